package bridge_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
)

// oneNode makes c's stream one replica, taking subjects (for a
// natstest cluster of one node).
func oneNode(c appliance.BridgeConfig, subjects ...string) appliance.BridgeConfig {
	c.Replicas = 1
	c.StreamSubjects = subjects
	return c
}

// waitStreamCount waits up to d for the stream HERALD to hold want
// messages on subject and returns what it holds.
func waitStreamCount(t *testing.T, js jetstream.JetStream, subject string, want uint64, d time.Duration) uint64 {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := streamSubjectCount(t, js, subject)
		if got >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}
