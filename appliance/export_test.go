package appliance

// PublishForTest publishes body to topic name as a SEND would.
func (b *Broker) PublishForTest(name string, body []byte) { b.publish(name, nil, body, nil) }

// DirectWritesForTest reports how many topic flushes a publisher's goroutine
// wrote itself, and how many of them handed an unwritten rest to the
// subscriber's writer (topic_direct.go).
func (b *Broker) DirectWritesForTest() (writes, handovers uint64) {
	return b.stats.directWrites.Load(), b.stats.directHandovers.Load()
}
