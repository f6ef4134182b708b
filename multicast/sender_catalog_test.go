package multicast

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// catalogRun publishes one message on each of n new topics, flushing every batch messages (1:
// every message alone, as under light load), then runs the sender idle for idle. It returns the
// CATALOG bytes sent (original and repaired alike) and whether every DATA datagram is still in the
// window.
func catalogRun(t *testing.T, s *SenderCore, n, batch int, idle time.Duration) (catBytes, dataBytes int, inWindow bool) {
	t.Helper()
	var dataSeqs []uint64
	count := func(now time.Time) {
		for _, b := range s.Ready() {
			switch Type(b[3]) {
			case TypeCatalog:
				catBytes += len(b)
			case TypeData:
				dataBytes += len(b)
				if h, err := DecodeHeader(b); err == nil {
					dataSeqs = append(dataSeqs, h.Seq)
				}
			}
		}
	}
	now := t0
	for i := 0; i < n; i++ {
		if err := s.Publish(now, fmt.Sprintf("sensors.site%03d.t%05d", i%997, i), msg("21.5")); err != nil {
			t.Fatal(err)
		}
		if (i+1)%batch == 0 {
			s.Flush(now)
			count(now)
			now = now.Add(50 * time.Microsecond)
			s.Tick(now)
			count(now)
		}
	}
	s.Flush(now)
	count(now)
	for end := now.Add(idle); now.Before(end); now = now.Add(time.Millisecond) {
		s.Tick(now)
		count(now)
	}
	inWindow = len(dataSeqs) > 0
	for _, q := range dataSeqs {
		if s.win.get(q) == nil {
			inWindow = false
		}
	}
	return catBytes, dataBytes, inWindow
}

// TestSenderCore_CatalogDeltas: 10,000 new one-message topics cost O(topics) catalog bytes: a new
// topic sends only its entry (plus the paced periodic catalog), and the data stays repairable.
func TestSenderCore_CatalogDeltas(t *testing.T) {
	const n = 10000
	for _, batch := range []int{1, 100} {
		t.Run(fmt.Sprintf("flush every %d", batch), func(t *testing.T) {
			s := mustSenderCore(t, SenderCoreConfig{})
			cat, data, in := catalogRun(t, s, n, batch, 5*time.Second)
			per := float64(cat) / n
			t.Logf("%d topics: %d catalog bytes (%.1f per topic), %d data bytes, data still in the window: %v", n, cat, per, data, in)
			if per > 120 {
				t.Errorf("%.1f catalog bytes per new topic, want at most 120 (a delta entry and the paced periodic catalog)", per)
			}
			if !in {
				t.Errorf("DATA datagrams left the window: catalogs pushed repairable data out")
			}
		})
	}
}

// TestSenderCore_StreamIdleExpiry: a stream idle for StreamIdle whose data has left the window
// leaves the periodic catalog (and the heartbeats) and is forgotten: the sender's memory follows
// the active topics. The topic's next message starts a new stream (new id, sequence 1) announced
// by a delta.
func TestSenderCore_StreamIdleExpiry(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{StreamIdle: 2 * time.Second, Window: 16 * DefaultMTU})
	now := t0
	for i := 0; i < 100; i++ {
		s.Publish(now, fmt.Sprintf("old.t%03d", i), msg("x"))
	}
	s.Flush(now)
	s.Ready()
	periodic := func(from, to time.Time, topic string) (entries int) {
		for ; from.Before(to); from = from.Add(10 * time.Millisecond) {
			s.Publish(from, topic, msg("live")) // keeps one stream busy and the window moving
			s.Flush(from)
			s.Tick(from)
			for _, p := range decodeAll(t, s.Ready()) {
				if p.Type == TypeCatalog {
					entries += len(p.Catalog)
				}
			}
		}
		return entries
	}
	before := periodic(now, now.Add(1500*time.Millisecond), "live") // one periodic catalog, at 1 s
	if c := s.Counters(); c.Streams != 101 || before < 101 {
		t.Fatalf("before idle: %d streams listed, %d entries in 1 s of periodic catalog; want 101 and all of them", c.Streams, before)
	}
	now = now.Add(1500 * time.Millisecond)
	periodic(now, now.Add(2*time.Second), "live")
	now = now.Add(2 * time.Second)
	after := periodic(now, now.Add(2*time.Second), "live")
	c := s.Counters()
	t.Logf("catalog entries per second: %d before, %d after the idle time; %d streams expired", before, after/2, c.StreamsExpired)
	if c.Streams != 1 || c.StreamsExpired != 100 || after > 4 {
		t.Errorf("after idle: %d streams, %d expired, %d entries in 2 s; want 1, 100 and only the live one", c.Streams, c.StreamsExpired, after)
	}
	now = now.Add(2 * time.Second)
	s.Publish(now, "old.t042", msg("back"))
	s.Flush(now)
	var cat *CatalogEntry
	var rec *Record
	for _, p := range decodeAll(t, s.Ready()) {
		if p.Type == TypeCatalog && cat == nil {
			cat = &p.Catalog[0]
		}
		if p.Type == TypeData && cat != nil {
			rec = &p.Records[0]
		}
	}
	if cat == nil || rec == nil || cat.Topic != "old.t042" || cat.Stream != 102 || rec.Stream != 102 || rec.Seq != 1 || cat.First == 0 {
		t.Errorf("a message on an expired topic: catalog %+v then record %+v; want a delta for a new stream 102 before its record, seq 1", cat, rec)
	}
}

// TestSenderCore_ExpiredTopicReachesReceiver: a receiver that heard a topic before it expired
// gets the topic's next message (a new stream, sequence 1) with no gap.
func TestSenderCore_ExpiredTopicReachesReceiver(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{StreamIdle: time.Second, Window: 4 * DefaultMTU})
	r, err := NewReceiverCore(ReceiverCoreConfig{Rand: rand.New(rand.NewPCG(3, 4))})
	if err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort("198.18.0.9:5000")
	var got []string
	pump := func(now time.Time) {
		for _, b := range s.Ready() {
			r.Handle(now, from, b)
		}
		r.Tick(now)
		evs, _ := r.Ready()
		for _, e := range evs {
			switch e := e.(type) {
			case Message:
				got = append(got, fmt.Sprintf("%s/%d#%d=%s", e.Topic, e.Stream, e.StreamSeq, e.Body))
			case Gap:
				got = append(got, fmt.Sprintf("gap %s %d-%d", e.Topic, e.From, e.To))
			}
		}
	}
	now := t0
	s.Publish(now, "rare", msg("1"))
	s.Flush(now)
	pump(now)
	for end := now.Add(3 * time.Second); now.Before(end); now = now.Add(10 * time.Millisecond) {
		s.Publish(now, "busy", msg("b"))
		s.Flush(now)
		s.Tick(now)
		pump(now)
	}
	if s.Counters().StreamsExpired != 1 {
		t.Fatalf("streams expired %d, want 1 (rare)", s.Counters().StreamsExpired)
	}
	s.Publish(now, "rare", msg("2"))
	s.Flush(now)
	pump(now)
	var rare []string
	for _, g := range got {
		if strings.HasPrefix(g, "rare") || strings.HasPrefix(g, "gap") {
			rare = append(rare, g)
		}
	}
	if want := []string{"rare/1#1=1", "rare/3#1=2"}; !slices.Equal(rare, want) {
		t.Errorf("receiver got %v for the rare topic, want %v", rare, want)
	}
}

// TestSenderCore_MaxStreams: the streams the sender remembers are bounded: past MaxStreams the
// least recently used stream whose data has left the window is forgotten; streams with data in
// the window are kept whatever their number (the window bounds them).
func TestSenderCore_MaxStreams(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{MaxStreams: 100, Window: 8 * DefaultMTU})
	now := t0
	for i := 0; i < 1000; i++ {
		if i%10 == 0 {
			s.Publish(now, "hot", msg("h")) // used all along: never the least recently used
		}
		s.Publish(now, fmt.Sprintf("t%04d", i), msg("x"))
		s.Flush(now)
		s.Ready()
	}
	c := s.Counters()
	t.Logf("1000 topics, MaxStreams 100, a window of 8 datagrams: %d streams remembered, %d evicted", c.Streams, c.StreamsEvicted)
	if c.Streams > 100 || c.StreamsEvicted < 900 {
		t.Errorf("%d streams remembered, %d evicted; want at most 100 and at least 900", c.Streams, c.StreamsEvicted)
	}
	if st := s.streams["hot"]; st == nil || st.id != 1 {
		t.Errorf("the busy topic was forgotten: %+v", st)
	}
	big := mustSenderCore(t, SenderCoreConfig{MaxStreams: 100})
	for i := 0; i < 1000; i++ {
		big.Publish(now, fmt.Sprintf("t%04d", i), msg("x"))
		big.Flush(now)
		big.Ready()
	}
	if c := big.Counters(); c.Streams != 1000 || c.StreamsEvicted != 0 {
		t.Errorf("all data in the window: %d streams, %d evicted; want 1000 and 0 (their data can still be repaired)", c.Streams, c.StreamsEvicted)
	}
}
