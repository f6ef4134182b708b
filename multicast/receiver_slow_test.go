package multicast

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// Skip mode delivers ahead of a hole and delivers the repair later. A slow consumer's dropped
// messages 5 and 7 (6 was the hole) must be reported as two Gaps, 5-5 and 7-7, so that the repair
// of 6, delivered after them, is not covered (section 4.5: "Gap.from and to never cover a
// delivered sequence"). Before, the dropped messages were merged into one pending Gap per
// stream by min/max: a slow-consumer Gap 5-7, and then message 6.
func TestReceiver_SlowConsumerGapNeverCoversSkipRepair(t *testing.T) {
	r, err := NewReceiver(ReceiverConfig{Group: DefaultGroup, Mode: Skip, EventsLen: 2, SlowConsumerWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.emit(ctx, Message{Topic: "a", Stream: 1, StreamSeq: 3})
	r.emit(ctx, Message{Topic: "a", Stream: 1, StreamSeq: 4})
	r.emit(ctx, Message{Topic: "a", Stream: 1, StreamSeq: 5}) // full: waits 1 ms, dropped
	r.emit(ctx, Message{Topic: "a", Stream: 1, StreamSeq: 7}) // skip mode: ahead of the hole at 6
	evs := []Event{<-r.events, <-r.events}                    // the reader comes back
	r.emit(ctx, Message{Topic: "a", Stream: 1, StreamSeq: 6, Repaired: true})
	for len(r.events) > 0 {
		evs = append(evs, <-r.events)
	}
	delivered := map[uint64]bool{}
	for _, e := range evs {
		if m, ok := e.(Message); ok {
			delivered[m.StreamSeq] = true
		}
	}
	for _, e := range evs {
		if g, ok := e.(Gap); ok {
			for q := g.From; q <= g.To; q++ {
				if delivered[q] {
					t.Errorf("%v covers message %d, delivered too; events: %s", g, q, eventLine(evs))
				}
			}
		}
	}
}

// addGap keeps a stream's pending slow-consumer gaps sorted and disjoint, merging only ranges
// that overlap or touch.
func TestReceiver_AddGapMergesOnlyContiguous(t *testing.T) {
	var gs []Gap
	for _, r := range [][2]uint64{{5, 5}, {9, 9}, {7, 7}, {1, 2}, {3, 3}, {10, 12}, {20, 30}, {25, 40}, {6, 6}} {
		gs = addGap(gs, Gap{From: r[0], To: r[1]})
	}
	var got []string
	for _, g := range gs {
		got = append(got, fmt.Sprintf("%d-%d", g.From, g.To))
	}
	if s := strings.Join(got, " "); s != "1-3 5-7 9-12 20-40" {
		t.Errorf("ranges %s, want 1-3 5-7 9-12 20-40", s)
	}
	gs = addGap(nil, Gap{From: 0, To: math.MaxUint64})
	gs = addGap(gs, Gap{From: math.MaxUint64, To: math.MaxUint64})
	if len(gs) != 1 || gs[0].From != 0 || gs[0].To != math.MaxUint64 {
		t.Errorf("extremes: %v", gs)
	}
}
