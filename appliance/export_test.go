package appliance

// PublishForTest publishes body to topic name as a SEND would.
func (b *Broker) PublishForTest(name string, body []byte) { b.publish(name, nil, body, nil) }

// DirectWritesForTest reports how many topic flushes a publisher's goroutine
// wrote itself, and how many of them handed an unwritten rest to the
// subscriber's writer (topic_direct.go).
func (b *Broker) DirectWritesForTest() (writes, handovers uint64) {
	return b.stats.directWrites.Load(), b.stats.directHandovers.Load()
}

// ReceiptsNowForTest reports how many RECEIPTs a journal completion wrote
// itself (sendNow), and how many of them left a rest to the writer.
func (b *Broker) ReceiptsNowForTest() (written, handed uint64) {
	return b.stats.receiptsNow.Load(), b.stats.receiptsHanded.Load()
}

// ReadDeadlinesForTest reports how many read deadlines the sessions set.
func (b *Broker) ReadDeadlinesForTest() uint64 { return b.stats.readDeadlines.Load() }
