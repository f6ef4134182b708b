package multicast

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Without a key, one forged CATALOG (stream ids are 1, 2, 3, ... so the next one is known)
// names the sender's next stream with a topic the receiver does not want, and takes the
// sequence of the sender's own CATALOG delta. When the sender starts px.eu as that stream, the
// receiver (--topic 'px.>') must still deliver or report its messages: the sender's periodic
// CATALOG names the stream px.eu, a conflict (section 4.6). Before, "the first entry for a
// stream id in a session wins": every px.eu message was dropped as unwanted, silently, for the
// session.
func TestReceiverCore_ForgedCatalogNeverSilencesTopic(t *testing.T) {
	s := newSeededSender(t, 10, t0, SenderCoreConfig{})
	r := mustReceiverCore(t, ReceiverCoreConfig{Profile: ProfileLowLatency, Filter: topicFilter([]string{"px.>"})})
	now := t0
	s.Publish(now, "px.us", msg("1"))
	s.Flush(now)
	evs := pumpPair(s, r, &now, 5*time.Millisecond, nil)
	c := s.Counters()
	g := dgb{session: s.Session()}
	// The forger's CATALOG: a sequence just ahead, stream id 2 named "junk".
	r.Handle(now, sndAddr, g.cat(c.Leading+1, c.Trailing, CatalogEntry{Stream: 2, First: c.Leading + 1, Topic: "junk"}))
	for i := 1; i <= 5; i++ {
		s.Publish(now, "px.eu", msg(fmt.Sprint(i)))
		s.Flush(now)
	}
	evs = append(evs, pumpPair(s, r, &now, time.Second, nil)...)
	if got := eventLine(evs); !strings.Contains(got, "px.eu") {
		t.Errorf("px.eu: 5 messages, none delivered or reported; events: %s", got)
	}
}

// A CATALOG conflict is counted; the stream is delivered if either name matches the filter,
// under the first name that does.
func TestReceiverCore_CatalogConflictRules(t *testing.T) {
	g := dgb{session: uint64(t0.Unix())<<32 | 7}
	r := mustReceiverCore(t, ReceiverCoreConfig{Filter: topicFilter([]string{"px.>"})})
	now := t0
	got := script(r, &now, time.Millisecond,
		g.cat(1, 1, CatalogEntry{1, 1, "px.eu"}, CatalogEntry{2, 1, "px.us"}),
		g.data(2, 1, rec(1, 1, "a"), rec(2, 1, "b")),
		g.cat(3, 1, CatalogEntry{1, 1, "junk"}, CatalogEntry{2, 1, "px.fake"}), // wanted first names stay
		g.data(4, 1, rec(1, 2, "c"), rec(2, 2, "d")))
	want := []string{"session 0 7", "msg px.eu 1 a", "msg px.us 1 b", "msg px.eu 2 c", "msg px.us 2 d"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if c := r.Counters().CatalogConflicts; c != 2 {
		t.Errorf("catalog conflicts %d, want 2", c)
	}
}
