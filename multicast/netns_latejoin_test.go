package multicast

import (
	"maps"
	"testing"
	"time"
)

// TestNetns_LateJoinLossy: receivers join a live, idle session (they hear its HEARTBEATs and
// CATALOG) behind 10% loss, then the sender publishes. Every message published after the join must be delivered:
// when the first datagrams after the join are lost and repaired later, their messages are not
// dropped as duplicates (issue 11, found 1: 4 of about 8 such runs lost 27 to 70 messages
// silently).
func TestNetns_LateJoinLossy(t *testing.T) {
	hosts := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
	tp := newTopo(t, append([]string{"s"}, hosts...)...)
	const group, port = "239.255.7.9:7409", 7409
	s := tp.startSender("s", SenderConfig{Group: group})
	count := publishN(t, s, nil, 2000, 20000, 16)
	for _, h := range hosts {
		tp.dropShare(h, port)
		r := tp.startReceiver(h, helperConfig{Group: group, Late: true})
		// Joined once it has heard the session: the sender is idle, so on a HEARTBEAT.
		waitReached(t, 5*time.Second, 1, nil, r)
		// A dashboard started on an idle channel: it hears the periodic CATALOG (every second)
		// before the next message, so its streams are known when the loss hits.
		time.Sleep(1200 * time.Millisecond) // not synchronisation: the catalog interval
		before := maps.Clone(count)
		publishN(t, s, count, 2000, 20000, 16)
		waitReached(t, 10*time.Second, 1, count, r)
		r.wait(t, 0)
		if _, gaps := r.check(t, []map[string]uint64{count}); gaps != 0 {
			t.Errorf("receiver %s: %d gaps, want 0 (10%% loss is repairable)", h, gaps)
		}
		r.mu.Lock()
		for _, l := range r.lines {
			if l.T != "end" {
				continue
			}
			for topic, n := range before {
				if l.First[topic] != n+1 {
					t.Errorf("receiver %s: %s starts at %d, want %d: the first message after the join", h, topic, l.First[topic], n+1)
				}
			}
		}
		r.mu.Unlock()
	}
}
