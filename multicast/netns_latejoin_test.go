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

// TestNetns_LateJoinHistory: receivers started on a running channel, behind 10% loss, with
// LateJoin 40 (herald listen --late-join 40). Each gets exactly the last 40 messages of every
// topic sent before it joined, in order, then every live message published while the history
// is being repaired and after: no gap, no duplicate (the helper checks order and bodies). A
// receiver without LateJoin on the same channel starts at the first live message, as before.
// The channel has the dashboard profile, the one a dashboard uses: its 2 s repair budget rides
// out a loaded host (with -race at a load of 12, the low-latency profile's 200 ms gave up a few
// live repairs in one run of three).
func TestNetns_LateJoinHistory(t *testing.T) {
	hosts := []string{"r1", "r2", "r3"}
	tp := newTopo(t, append([]string{"s", "r0"}, hosts...)...)
	const group, port, n = "239.255.7.10:7410", 7410, 40
	s := tp.startSender("s", SenderConfig{Group: group, Profile: ProfileDashboard})
	count := publishN(t, s, nil, 3000, 20000, 16)
	before := maps.Clone(count)
	var rs []*child
	for _, h := range hosts {
		tp.dropShare(h, port)
		rs = append(rs, tp.startReceiver(h, helperConfig{Group: group, Late: true, LateJoin: n, Profile: ProfileDashboard}))
	}
	plain := tp.startReceiver("r0", helperConfig{Group: group, Late: true, Profile: ProfileDashboard})
	// Joined on a HEARTBEAT of the idle sender; the history is being asked for and repaired
	// while live messages flow.
	waitReached(t, 5*time.Second, 1, nil, append(rs, plain)...)
	publishN(t, s, count, 3000, 20000, 16)
	waitReached(t, 15*time.Second, 1, count, append(rs, plain)...)
	for _, r := range append(rs, plain) {
		st := r.wait(t, 0)
		if _, gaps := r.check(t, []map[string]uint64{count}); gaps != 0 {
			t.Errorf("receiver %s: %d gaps, want 0 (10%% loss is repairable)", r.name, gaps)
		}
		r.mu.Lock()
		for _, l := range r.lines {
			if l.T != "end" {
				continue
			}
			for topic, last := range before {
				want := last - n + 1
				if r == plain {
					want = last + 1
				}
				if l.First[topic] != want {
					t.Errorf("receiver %s: %s starts at %d, want %d (last before the join %d)", r.name, topic, l.First[topic], want, last)
				}
			}
			if wantMsgs := 3000 + len(before)*n; r != plain && l.Msgs != wantMsgs {
				t.Errorf("receiver %s: %d messages, want %d (3000 live and %d of history per topic)", r.name, l.Msgs, wantMsgs, n)
			}
		}
		r.mu.Unlock()
		if r != plain && (st.HistoryAnswers != 1 || st.HistoryRepairs == 0) {
			t.Errorf("receiver %s: history answers %d repairs %d, want 1 answer and repairs", r.name, st.HistoryAnswers, st.HistoryRepairs)
		}
		t.Logf("receiver %s: history requests %d answers %d repairs %d, naks %d repairs %d", r.name,
			st.HistoryRequests, st.HistoryAnswers, st.HistoryRepairs, st.NAKs, st.Repairs)
	}
}
