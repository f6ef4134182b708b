package multicast

import (
	"math/rand/v2"
	"testing"
	"time"
)

// loneTrace is a publisher's Publish times (ns from 0).
type loneTrace struct {
	name string
	at   []int64
}

// burstsWithPauses: bursts of 100 messages 2-10 µs apart every 5 ms (a STOMP connection's frames
// read in one go, as TestMulticastE2E/LossyLink publishes), with the publisher descheduled for
// 60-300 µs after about one message in twelve (a loaded host, or -race).
func burstsWithPauses(rng *rand.Rand, bursts int) loneTrace {
	var at []int64
	for b := 0; b < bursts; b++ {
		t := int64(b) * int64(5*time.Millisecond)
		for i := 0; i < 100; i++ {
			t += int64(2000 + rng.IntN(8000))
			if rng.IntN(12) == 0 {
				t += int64(60000 + rng.IntN(240000))
			}
			at = append(at, t)
		}
	}
	return loneTrace{"bursts with pauses", at}
}

// steady: one message every period, late by up to jitter (a sleep that overshoots); a late
// publisher sends what is due back to back (as BenchmarkNetnsLatency and herald bench topic).
func steady(rng *rand.Rand, n int, period, jitter time.Duration) loneTrace {
	var at []int64
	t := int64(0)
	for i := 0; i < n; i++ {
		due := int64(i) * int64(period)
		if t < due {
			t = due + rng.Int64N(int64(jitter))
		} else {
			t += 1000 // caught up: right after the previous one
		}
		at = append(at, t)
	}
	return loneTrace{"steady", at}
}

// datagrams counts the DATA datagrams a trace costs (64-byte messages, 15 to a datagram) when
// lone messages go alone and the others are packed by a writer that wakes wake after the first
// of them and takes what has come by then. lone decides for each Publish.
func datagrams(tr loneTrace, wake int64, lone func(int64) bool) (dgs, inline int) {
	const perDatagram = 15
	var pending []int64 // queued, not yet packed
	flush := func(upTo int64) {
		for len(pending) > 0 && pending[0]+wake <= upTo {
			due := pending[0] + wake
			k := 0
			for k < len(pending) && pending[k] <= due {
				k++
			}
			dgs += (k + perDatagram - 1) / perDatagram
			pending = pending[k:]
		}
	}
	for _, t := range tr.at {
		flush(t)
		if lone(t) && len(pending) == 0 {
			dgs++
			inline++
			continue
		}
		pending = append(pending, t)
	}
	flush(1 << 62)
	return dgs, inline
}

// TestLoneRule: which messages Publish sends itself (SenderConfig.LoneInline), on seeded traces.
// The rule before (lone = more than 50 µs after the previous Publish) sent every message that
// followed a pause inside a burst on its own: 1.4-1.9x the datagrams of the writer's batching in
// TestMulticastE2E/LossyLink under -race (the model: 1.40-1.42x). Now a burst ends only after
// 1 ms of silence or two long gaps in a row: 1.18-1.20x (a burst's first message goes at once,
// one more when two pauses come in a row or one comes within its first six messages), and a
// steady 10,000/s still goes out message by message, catch-ups of up to five included.
func TestLoneRule(t *testing.T) {
	const wake = 40_000 // ns: the writer goroutine's wake-up on a loaded host
	old := func() func(int64) bool {
		var last int64
		return func(now int64) bool {
			gap := now - last
			last = now
			return gap > int64(inlineGap)
		}
	}
	rule := func() func(int64) bool {
		var r loneRule
		return r.publish
	}
	queued := func(int64) bool { return false }
	for seed := uint64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		tr := burstsWithPauses(rng, 200)
		base, _ := datagrams(tr, wake, queued)
		before, _ := datagrams(tr, wake, old())
		now, inline := datagrams(tr, wake, rule())
		t.Logf("seed %d, %s: %d messages: queued %d datagrams; 50 µs rule %d (%.2fx); now %d (%.2fx, %d inline)",
			seed, tr.name, len(tr.at), base, before, float64(before)/float64(base), now, float64(now)/float64(base), inline)
		if before < base*13/10 {
			t.Errorf("seed %d: the former rule cost %d datagrams against %d: the trace does not show its defect", seed, before, base)
		}
		if now > base*125/100 {
			t.Errorf("seed %d: %d datagrams against %d queued: more than 1.25x", seed, now, base)
		}
		if inline < 190 {
			t.Errorf("seed %d: %d bursts' first messages sent inline, want about 200", seed, inline)
		}

		for _, jitter := range []time.Duration{30 * time.Microsecond, 150 * time.Microsecond} {
			st := steady(rng, 20000, 100*time.Microsecond, jitter)
			_, inline = datagrams(st, wake, rule())
			// A message less than inlineGap after the previous one is never lone (the
			// second of a pair sent back to back); every other one should be.
			spaced := 0
			for i, at := range st.at {
				if i == 0 || at-st.at[i-1] >= int64(inlineGap) {
					spaced++
				}
			}
			t.Logf("seed %d, steady 10,000/s late by up to %v: %d of %d messages inline, %d spaced more than %v", seed, jitter, inline, len(st.at), spaced, inlineGap)
			if inline < spaced*95/100 {
				t.Errorf("seed %d: steady 10,000/s late by up to %v: %d inline of %d spaced messages, want at least 95%%", seed, jitter, inline, spaced)
			}
		}
	}
	// Flat out (a million messages a second): nothing inline after the first.
	var r loneRule
	n := 0
	for i := int64(0); i < 10000; i++ {
		if r.publish(1e9 + i*1000) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("back to back: %d messages lone, want 1 (the first)", n)
	}
}
