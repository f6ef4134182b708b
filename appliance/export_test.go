package appliance

// PublishForTest publishes body to topic name as a SEND would.
func (b *Broker) PublishForTest(name string, body []byte) { b.publish(name, nil, body) }
