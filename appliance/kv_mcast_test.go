package appliance_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// kvSink carries bucket "b" (appliance.KVSink); Publish waits while gate
// is held, as a channel under its rate limit does.
type kvSink struct {
	gate sync.Mutex
	mu   sync.Mutex
	got  []stomp.Headers
	tops []string
}

func (s *kvSink) Name() string                       { return "kv-test" }
func (s *kvSink) Matches(string) bool                { return false }
func (s *kvSink) MatchesKVBucket(bucket string) bool { return bucket == "b" }
func (s *kvSink) Publish(topic string, hs stomp.Headers, body []byte) error {
	s.gate.Lock()
	s.gate.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, append(hs, stomp.Header{Key: "body", Value: string(body)}))
	s.tops = append(s.tops, topic)
	return nil
}

func (s *kvSink) received() []stomp.Headers {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]stomp.Headers(nil), s.got...)
}

// TestKV_MulticastMirror: the changes of a bucket a channel carries go to
// it in revision order on topic /kv/BUCKET; a sink that does not take them
// (a rate-limited channel) holds neither the store nor the RECEIPTs; what
// does not fit in kv.watch_buffer_bytes is not queued, and once the queue
// drains a kv-lost-revision marker names the highest revision lost, so no
// receiver is left with a silent gap. Transactions carry their id.
func TestKV_MulticastMirror(t *testing.T) {
	sink := &kvSink{}
	var _ appliance.KVSink = sink
	tb := startWrapped(t, func(c *appliance.Config) { c.KV.WatchBufferBytes = 4096 }, nil, sink)
	c := tb.Dial(t)
	put := func(dest, v string) uint64 {
		t.Helper()
		r, err := c.SendReceipt(ctxT(t), dest, []byte(v))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseUint(r.Get("revision"), 10, 64)
		return n
	}
	for i := 1; i <= 3; i++ {
		put("/kv/b.k"+strconv.Itoa(i), "v"+strconv.Itoa(i))
	}
	put("/kv/other.x", "not carried")
	waitFor(t, 5e9, "3 changes mirrored", func() bool { return len(sink.received()) == 3 })
	for i, h := range sink.received() {
		if h.Get("revision") != strconv.Itoa(i+1) || h.Get("destination") != "/kv/b.k"+strconv.Itoa(i+1) ||
			h.Get("kv-operation") != "PUT" || h.Get("body") != "v"+strconv.Itoa(i+1) || sink.tops[i] != "/kv/b" {
			t.Fatalf("mirrored change %d: %v on %s", i, h, sink.tops[i])
		}
	}

	// The sink stops taking: 100 puts still get their RECEIPTs.
	sink.gate.Lock()
	pad := strings.Repeat("p", 200)
	var last uint64
	for i := 0; i < 100; i++ {
		last = put("/kv/b.k"+strconv.Itoa(i%4), pad+strconv.Itoa(i))
	}
	if last != 103 {
		t.Fatalf("last revision %d, want 103", last)
	}
	st := tb.B.KVMirrorStats()
	if st.Dropped == 0 {
		t.Fatalf("%+v: 100 changes of 200 bytes queued within 4096 bytes?", st)
	}
	sink.gate.Unlock()
	waitFor(t, 5e9, "the lost-revision marker", func() bool { return tb.B.KVMirrorStats().Markers == 1 })
	got := sink.received()[3:]
	prev := uint64(3)
	for i, h := range got {
		if i == len(got)-1 {
			if h.Get("kv-lost-revision") != "103" || h.Get("revision") != "" {
				t.Fatalf("last of %d: %v, want the marker kv-lost-revision:103", len(got), h)
			}
			break
		}
		rev, _ := strconv.ParseUint(h.Get("revision"), 10, 64)
		if rev <= prev {
			t.Fatalf("revision %d after %d", rev, prev)
		}
		prev = rev
	}
	if uint64(len(got)-1)+st.Dropped != 100 {
		t.Fatalf("%d sent + %d dropped, want 100", len(got)-1, st.Dropped)
	}

	// A transaction: its id (first revision) on each change, the last marked.
	tx := tb.Dial(t)
	if err := tx.Write(stomp.NewFrame("BEGIN", "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		f := stomp.NewFrame(stomp.CmdSend, "destination", "/kv/b.t"+strconv.Itoa(i), "transaction", "t1")
		f.Body = []byte("t")
		if err := tx.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Request(ctxT(t), stomp.NewFrame("COMMIT", "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5e9, "the transaction mirrored", func() bool {
		r := sink.received()
		return len(r) > 0 && r[len(r)-1].Get("revision") == "106"
	})
	r := sink.received()
	for i, h := range r[len(r)-3:] {
		if h.Get("revision") != strconv.Itoa(104+i) || h.Get("kv-transaction") != "104" || (h.Get("kv-transaction-last") == "true") != (i == 2) {
			t.Fatalf("transaction change %d: %v", i, h)
		}
	}
}
