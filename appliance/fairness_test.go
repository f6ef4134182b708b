package appliance_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// medianProbe is the median of n probe round trips.
func medianProbe(t *testing.T, tb *testBroker, n int) time.Duration {
	t.Helper()
	var rtts []time.Duration
	for range n {
		rtts = append(rtts, probeRTT(t, tb))
	}
	slices.Sort(rtts)
	return rtts[n/2]
}

// Producers that flood durable SENDs without receipts cannot multiply
// another client's round trip: the journal takes the connections' batches
// round-robin and holds only a short stretch of them, so the probe's batch
// waits behind about one group commit, not behind everything the flooders
// managed to write (before: 80 us at rest, 110 ms beside the flood).
func TestBudget_JournalIntakeIsFair(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Journal.Sync = "normal" })
	base := medianProbe(t, tb, 7)
	frame := []byte("SEND\ndestination:/queue/flood\n\n" + strings.Repeat("f", 1024) + "\x00")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		r := dialRaw(t, tb)
		r.connect("1.2")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				flood(r.c, frame, 1<<20)
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	waitFor(t, 10*time.Second, "the flood to reach the journal", func() bool {
		v, ok := tb.B.Queue("flood")
		return ok && v.Messages > 20000
	})
	under := medianProbe(t, tb, 7)
	t.Logf("probe round trip: %s at rest, %s beside 2 flooding producers (%.1fx)", base, under, float64(under)/float64(base))
	if under > 20*base+25*time.Millisecond {
		t.Fatalf("probe round trip %s beside 2 flooding producers, %s at rest: the flood is not held to its share of the journal", under, base)
	}
}
