package appliance_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// appendN appends n messages to stream dest with receipts and checks that
// each receipt carries the next offset.
func appendN(t *testing.T, c *client.Conn, dest string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		r, err := c.SendReceipt(ctxT(t), dest, []byte("m"+strconv.Itoa(i)))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if got := r.Get("x-stream-offset"); got != strconv.Itoa(i) {
			t.Fatalf("receipt of append %d: x-stream-offset %q", i, got)
		}
	}
}

// wantOffsets receives len(want) messages and checks their offsets and
// bodies (body "mN" for offset N).
func wantOffsets(t *testing.T, sub *client.Subscription, want ...int) []*stomp.Frame {
	t.Helper()
	var out []*stomp.Frame
	for _, w := range want {
		m := recv(t, sub)
		if m.Get("x-stream-offset") != strconv.Itoa(w) || string(m.Body) != "m"+strconv.Itoa(w) {
			t.Fatalf("got offset %q body %q, want offset %d", m.Get("x-stream-offset"), m.Body, w)
		}
		if ts, err := strconv.ParseInt(m.Get("timestamp"), 10, 64); err != nil || time.Since(time.UnixMilli(ts)) > time.Minute || time.Until(time.UnixMilli(ts)) > time.Second {
			t.Fatalf("offset %d: timestamp %q is not the append time in ms", w, m.Get("timestamp"))
		}
		out = append(out, m)
	}
	return out
}

func offs(a, b int) []int {
	var out []int
	for i := a; i < b; i++ {
		out = append(out, i)
	}
	return out
}

func TestStream_OffsetsReplayAndLive(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	appendN(t, c, "/stream/s", 0, 10)

	first, err := c.SubscribeReceipt(ctxT(t), "/stream/s", "auto", hdr("x-stream-offset", "first"))
	if err != nil {
		t.Fatal(err)
	}
	wantOffsets(t, first, offs(0, 10)...)
	at5, _ := c.SubscribeReceipt(ctxT(t), "/stream/s", "auto", hdr("x-stream-offset", "offset=5"))
	wantOffsets(t, at5, offs(5, 10)...)
	last, _ := c.SubscribeReceipt(ctxT(t), "/stream/s", "auto", hdr("x-stream-offset", "last"))
	wantOffsets(t, last, 9)
	next, _ := c.SubscribeReceipt(ctxT(t), "/stream/s", "auto") // default: next
	expectNone(t, next, 100*time.Millisecond)

	// Live: every subscriber gets the new append, once.
	appendN(t, c, "/stream/s", 10, 1)
	for _, s := range []*client.Subscription{first, at5, last, next} {
		wantOffsets(t, s, 10)
		expectNone(t, s, 50*time.Millisecond)
	}

	// timestamp=T (seconds): from the first message at or after T.
	future := time.Now().Add(2 * time.Second).Unix()
	ts, _ := c.SubscribeReceipt(ctxT(t), "/stream/s", "auto", hdr("x-stream-offset", "timestamp="+strconv.FormatInt(future, 10)))
	expectNone(t, ts, 50*time.Millisecond)
	past, _ := c.SubscribeReceipt(ctxT(t), "/stream/s", "auto", hdr("x-stream-offset", "timestamp=0"))
	wantOffsets(t, past, offs(0, 11)...)

	// Consumers never remove messages: everything is still there.
	again, _ := c.SubscribeReceipt(ctxT(t), "/stream/s", "client-individual", hdr("x-stream-offset", "first"))
	for i := range 11 {
		ackNow(t, c, "ACK", wantOffsets(t, again, i)[0])
	}
	after, _ := c.SubscribeReceipt(ctxT(t), "/stream/s", "auto", hdr("x-stream-offset", "0"))
	wantOffsets(t, after, offs(0, 11)...)

	if _, err := c.SubscribeReceipt(ctxT(t), "/stream/s", "auto", hdr("x-stream-offset", "yesterday")); err == nil || !strings.Contains(err.Error(), "x-stream-offset") {
		t.Fatalf("bad x-stream-offset accepted: %v", err)
	}
}

func TestStream_DedupAndTransactions(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), "/stream/d", []byte("m0"), hdr("dedup-id", "k1")); err != nil {
		t.Fatal(err)
	}
	r, err := c.SendReceipt(ctxT(t), "/stream/d", []byte("m0 again"), hdr("dedup-id", "k1"))
	if err != nil || r.Get("duplicate") != "true" || r.Get("x-stream-offset") != "0" {
		t.Fatalf("duplicate append: receipt %v, err %v", r, err)
	}
	// An aborted transaction appends nothing; a committed one appends all.
	tx := func(id, end string, bodies ...string) {
		if _, err := c.Request(ctxT(t), stomp.NewFrame("BEGIN", "transaction", id)); err != nil {
			t.Fatal(err)
		}
		for _, b := range bodies {
			f := stomp.NewFrame("SEND", "destination", "/stream/d", "transaction", id)
			f.Body = []byte(b)
			if err := c.Write(f); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Request(ctxT(t), stomp.NewFrame(end, "transaction", id)); err != nil {
			t.Fatal(err)
		}
	}
	tx("a", "ABORT", "lost1", "lost2")
	tx("b", "COMMIT", "m1", "m2", "m3")
	sub, _ := c.SubscribeReceipt(ctxT(t), "/stream/d", "auto", hdr("x-stream-offset", "first"))
	wantOffsets(t, sub, 0, 1, 2, 3)
	expectNone(t, sub, 100*time.Millisecond)

	// One COMMIT holding a queue SEND and a stream append: both or neither.
	if _, err := c.Request(ctxT(t), stomp.NewFrame("BEGIN", "transaction", "mixed")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/queue/dq", "/stream/d"} {
		f := stomp.NewFrame("SEND", "destination", d, "transaction", "mixed")
		f.Body = []byte("m4")
		if err := c.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Request(ctxT(t), stomp.NewFrame("COMMIT", "transaction", "mixed")); err != nil {
		t.Fatal(err)
	}
	wantOffsets(t, sub, 4)
	waitQueue(t, tb, "dq", "one message", func(v appliance.QueueView) bool { return v.Messages == 1 })
}

func TestStream_PrefetchCredit(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	appendN(t, c, "/stream/p", 0, 6)
	sub, _ := c.SubscribeReceipt(ctxT(t), "/stream/p", "client-individual", hdr("x-stream-offset", "first"), hdr("prefetch-count", "2"))
	ms := wantOffsets(t, sub, 0, 1)
	expectNone(t, sub, 100*time.Millisecond)
	ackNow(t, c, "ACK", ms[1])
	wantOffsets(t, sub, 2)
	expectNone(t, sub, 100*time.Millisecond)
	ackNow(t, c, "ACK", ms[0])
	wantOffsets(t, sub, 3)
}

// Retention removes the head in small batches while appends go on, and a
// reader whose start was removed is told where the gap began.
func TestStream_RetentionUnderAppends(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Streams.Policies = []appliance.StreamPolicy{{Match: "ret.>", MaxCount: 100}}
		c.Streams.RetentionInterval = appliance.Duration{Duration: 20 * time.Millisecond}
		c.Streams.RetentionBatch = 50
	})
	c := tb.Dial(t)
	// A backlog far beyond the bound, written fast (receipt at the end).
	for i := 0; i < 3000; i++ {
		f := stomp.NewFrame("SEND", "destination", "/stream/ret.x")
		f.Body = []byte("m" + strconv.Itoa(i))
		if err := c.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	appendN(t, c, "/stream/ret.x", 3000, 1)
	// Appends keep succeeding while retention removes the backlog.
	var appended atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c2 := tb.Dial(t)
		for i := 0; i < 200; i++ {
			if _, err := c2.SendReceipt(ctxT(t), "/stream/ret.y", []byte("y")); err != nil {
				t.Errorf("append during retention: %v", err)
				return
			}
			appended.Add(1)
		}
	}()
	// An early reader (its own connection, read concurrently).
	early := tb.Dial(t)
	sub, _ := early.SubscribeReceipt(ctxT(t), "/stream/ret.x", "auto", hdr("x-stream-offset", "first"))
	gaps := make(chan error, 1)
	go func() {
		last := -1
		for last < 3000 {
			m, ok := <-sub.C()
			if !ok {
				gaps <- fmt.Errorf("early subscription closed at %d", last)
				return
			}
			off, _ := strconv.Atoi(m.Get("x-stream-offset"))
			if last < 0 {
				// Its start: whatever was first when it subscribed
				// (removed since, if the first message reports a gap).
				last = off - 1
				if g, err := strconv.Atoi(m.Get("x-stream-gap-from")); err == nil {
					last = g - 1
				}
			}
			if off != last+1 {
				if from := m.Get("x-stream-gap-from"); from != strconv.Itoa(last+1) {
					gaps <- fmt.Errorf("offset %d after %d without x-stream-gap-from:%d (got %q)", off, last, last+1, from)
					return
				}
			}
			last = off
		}
		gaps <- nil
	}()
	waitFor(t, 10*time.Second, "retention down to 100 messages", func() bool {
		pc := tb.Dial(t)
		defer pc.Close()
		sub2, err := pc.SubscribeReceipt(ctxT(t), "/stream/ret.x", "auto", hdr("x-stream-offset", "first"))
		if err != nil {
			t.Fatal(err)
		}
		m := recv(t, sub2)
		n, _ := strconv.Atoi(m.Get("x-stream-offset"))
		return n >= 2901
	})
	wg.Wait()
	if appended.Load() != 200 {
		t.Fatalf("%d of 200 appends succeeded during retention", appended.Load())
	}
	// The early subscriber saw contiguous offsets, or a gap announced.
	select {
	case err := <-gaps:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the early subscriber did not reach offset 3000")
	}
	// A reader asking for a removed offset is told.
	old, _ := c.SubscribeReceipt(ctxT(t), "/stream/ret.x", "auto", hdr("x-stream-offset", "offset=0"))
	m := recv(t, old)
	if m.Get("x-stream-gap-from") != "0" {
		t.Fatalf("first message for a removed offset 0: offset %s, x-stream-gap-from %q", m.Get("x-stream-offset"), m.Get("x-stream-gap-from"))
	}
}

func TestStream_DurableCursor(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	appendN(t, c, "/stream/w", 0, 10)
	cons := hdr("x-stream-consumer", "stats-volume")
	sub, _ := c.SubscribeReceipt(ctxT(t), "/stream/w", "client", cons, hdr("x-stream-offset", "first"), hdr("prefetch-count", "100"))
	ms := wantOffsets(t, sub, offs(0, 5)...)
	ackNow(t, c, "ACK", ms[2]) // acknowledges 0, 1 and 2

	// One consumer per name.
	c2 := tb.Dial(t)
	if _, err := c2.SubscribeReceipt(ctxT(t), "/stream/w", "client", cons); err == nil || !strings.Contains(err.Error(), "consumer name in use") {
		t.Fatalf("second consumer with the same name: %v, want ERROR consumer name in use", err)
	}
	// A cursor needs ack:client.
	c3 := tb.Dial(t)
	if _, err := c3.SubscribeReceipt(ctxT(t), "/stream/w", "auto", hdr("x-stream-consumer", "other")); err == nil {
		t.Fatal("x-stream-consumer with ack:auto accepted")
	}
	c.Close()

	resume := func(conn *client.Conn, want ...int) []*stomp.Frame {
		t.Helper()
		var sub *client.Subscription
		waitFor(t, 5*time.Second, "the name is free again", func() bool {
			var err error
			sub, err = conn.SubscribeReceipt(ctxT(t), "/stream/w", "client", cons, hdr("x-stream-offset", "first"))
			if err != nil && !strings.Contains(err.Error(), "in use") {
				t.Fatal(err)
			}
			if err != nil {
				conn = tb.Dial(t)
			}
			return err == nil
		})
		return wantOffsets(t, sub, want...)
	}
	ms = resume(tb.Dial(t), offs(3, 10)...)
	// Acknowledging an earlier offset never moves the cursor back.
	tb.Restart()
	c5 := tb.Dial(t)
	ms = resume(c5, offs(3, 10)...)
	ackNow(t, c5, "ACK", ms[len(ms)-1])
	c5.Close()
	tb.Restart()
	c6 := tb.Dial(t)
	appendN(t, c6, "/stream/w", 10, 2)
	ms = resume(c6, 10, 11)
	// A NACK gives credit back but does not move the cursor.
	ackNow(t, c6, "NACK", ms[1])
	c6.Close()
	resume(tb.Dial(t), 10, 11)
	_ = fmt.Sprint
}

// Streams need read to subscribe, write to append and create to make a
// stream that does not exist, as queues do.
func TestStream_Permissions(t *testing.T) {
	tb := authBroker(t, `[users.writer]
password = "{pw:w}"
write = ["/stream/stats.>"]
[users.maker]
password = "{pw:m}"
write = ["/stream/stats.>"]
create = ["/stream/stats.>"]
[users.reader]
password = "{pw:r}"
read = ["/stream/stats.>"]
[users.queuereader]
password = "{pw:q}"
read = ["/queue/stats.>"]
`, nil)
	try := func(login, pass string, fn func(c *client.Conn) error) error {
		c, err := dialAs(tb.Addr, login, pass)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return fn(c)
	}
	send := func(c *client.Conn) error {
		_, err := c.SendReceipt(ctxT(t), "/stream/stats.cpu", []byte("m0"))
		return err
	}
	sub := func(c *client.Conn) error {
		_, err := c.SubscribeReceipt(ctxT(t), "/stream/stats.cpu", "auto", hdr("x-stream-offset", "first"))
		return err
	}
	denied := func(what string, err error, perm string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "permission denied: "+perm+" on /stream/stats.cpu") {
			t.Fatalf("%s: %v, want permission denied: %s", what, err, perm)
		}
	}
	denied("write without create, new stream", try("writer", "w", send), "create")
	if err := try("maker", "m", send); err != nil {
		t.Fatalf("write with create: %v", err)
	}
	if err := try("writer", "w", send); err != nil {
		t.Fatalf("write to an existing stream: %v", err)
	}
	denied("subscribe without read", try("writer", "w", sub), "read")
	denied("read on the queue of the same name", try("queuereader", "q", sub), "read")
	if err := try("reader", "r", sub); err != nil {
		t.Fatalf("subscribe with read: %v", err)
	}
	denied("append with read only", try("reader", "r", send), "write")
}

// Retention by age, and a [[streams.policy]] added by a reload applies
// from the next retention round.
func TestStream_RetentionByAgeAndReload(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Streams.MaxAge = appliance.Duration{Duration: 300 * time.Millisecond}
		c.Streams.RetentionInterval = appliance.Duration{Duration: 20 * time.Millisecond}
		c.Streams.Policies = []appliance.StreamPolicy{{Match: "keep.>", MaxAge: appliance.Duration{Duration: time.Hour}}}
	})
	c := tb.Dial(t)
	appendN(t, c, "/stream/aged", 0, 3)
	appendN(t, c, "/stream/keep.x", 0, 10)
	first := func(dest string) string {
		pc := tb.Dial(t)
		defer pc.Close()
		sub, err := pc.SubscribeReceipt(ctxT(t), dest, "auto", hdr("x-stream-offset", "first"))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-sub.C():
			return m.Get("x-stream-offset")
		case <-time.After(200 * time.Millisecond):
			return "none"
		}
	}
	waitFor(t, 5*time.Second, "messages older than max_age removed", func() bool { return first("/stream/aged") == "none" })
	// The next offset survives: a new append gets 3.
	appendN(t, c, "/stream/aged", 3, 1)
	if got := first("/stream/keep.x"); got != "0" {
		t.Fatalf("keep.x (max_age 1h) first offset %s, want 0", got)
	}
	cfg := *tb.B.Config()
	cfg.Streams.Policies = []appliance.StreamPolicy{{Match: "keep.>", MaxAge: appliance.Duration{Duration: time.Hour}, MaxCount: 4}}
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the reloaded max_count applied", func() bool { return first("/stream/keep.x") == "6" })
}

func TestStream_MaxStreams(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Streams.MaxStreams = 2 })
	c := tb.Dial(t)
	appendN(t, c, "/stream/a", 0, 1)
	appendN(t, c, "/stream/b", 0, 1)
	_, err := c.SendReceipt(ctxT(t), "/stream/c", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "streams.max_streams") {
		t.Fatalf("third stream: %v, want an ERROR naming streams.max_streams", err)
	}
}

func TestStream_ConfigValidated(t *testing.T) {
	for _, c := range []struct {
		key    string
		mutate func(*appliance.StreamsConfig)
	}{
		{"streams.max_age", func(s *appliance.StreamsConfig) { s.MaxAge.Duration = -time.Second }},
		{"streams.max_bytes", func(s *appliance.StreamsConfig) { s.MaxBytes = -1 }},
		{"streams.max_streams", func(s *appliance.StreamsConfig) { s.MaxStreams = 0 }},
		{"streams.max_cursors", func(s *appliance.StreamsConfig) { s.MaxCursors = 0 }},
		{"streams.page_bytes", func(s *appliance.StreamsConfig) { s.PageBytes = 10 }},
		{"streams.page_messages", func(s *appliance.StreamsConfig) { s.PageMessages = 0 }},
		{"streams.retention_interval", func(s *appliance.StreamsConfig) { s.RetentionInterval.Duration = 0 }},
		{"streams.retention_batch", func(s *appliance.StreamsConfig) { s.RetentionBatch = 0 }},
		{"streams.policy[0].match", func(s *appliance.StreamsConfig) { s.Policies = []appliance.StreamPolicy{{}} }},
		{"streams.policy[0]", func(s *appliance.StreamsConfig) { s.Policies = []appliance.StreamPolicy{{Match: "a", MaxCount: -1}} }},
	} {
		cfg := appliance.DefaultConfig()
		c.mutate(&cfg.Streams)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: Validate = %v, want an error naming it", c.key, err)
		}
	}
	def := appliance.DefaultConfig()
	if err := def.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

// A subscriber replaying a stream far larger than its connection's output
// bound, and not reading, holds at most about stomp.max_output_bytes plus
// one page of the memory budget: reads wait for room.
func TestStream_ReplayToStalledReaderIsBounded(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.MaxOutputBytes = 64 << 10
		c.Streams.PageBytes = 16 << 10
		c.Streams.TailBytes = 32 << 10 // charged to the budget too
	})
	c := tb.Dial(t)
	body := make([]byte, 1024)
	for i := 0; i < 4000; i++ { // 4 MB
		f := stomp.NewFrame("SEND", "destination", "/stream/big")
		f.Body = body
		if err := c.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SendReceipt(ctxT(t), "/stream/big", body); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, tb)
	r.connect("1.2")
	r.write("SUBSCRIBE\ndestination:/stream/big\nid:1\nx-stream-offset:first\n\n\x00")
	// The reader never reads again: TCP buffers fill, then the output bound.
	time.Sleep(500 * time.Millisecond)
	var peak int64
	for i := 0; i < 20; i++ {
		peak = max(peak, tb.B.Stats().MemoryUsed)
		time.Sleep(25 * time.Millisecond)
	}
	// Output bound + one page + the tail cache + a frame's overheads; far
	// below the 4 MB.
	if limit := int64(64<<10 + 16<<10 + 32<<10 + 64<<10); peak > limit {
		t.Fatalf("memory held for a stalled stream reader: %d bytes, want at most %d", peak, limit)
	}
	if peak == 0 {
		t.Fatal("nothing charged to the memory budget while MESSAGEs wait for a stalled reader")
	}
}
