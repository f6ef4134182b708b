package appliance_test

import (
	"bytes"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// heapInUse is the Go heap in use after a GC.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// flood writes frame over c again and again, never reading, until total
// bytes are written or a write blocks for 2 s (the server stopped reading).
// It returns the bytes written and whether it was blocked.
func flood(c net.Conn, frame []byte, total int) (int, bool) {
	var buf bytes.Buffer
	for buf.Len() < 256<<10 {
		buf.Write(frame)
	}
	chunk := buf.Bytes()
	sent := 0
	for sent < total {
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Write(chunk)
		sent += n
		if err != nil {
			var ne net.Error
			return sent, errorsAs(err, &ne) && ne.Timeout()
		}
	}
	return sent, false
}

func errorsAs(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}

// probeRTT is the round trip of a durable SEND with receipt on its own
// connection.
func probeRTT(t *testing.T, tb *testBroker) time.Duration {
	t.Helper()
	c := tb.Dial(t)
	defer c.Close()
	start := time.Now()
	if _, err := c.SendReceipt(ctxT(t), "/queue/probe", []byte("ping")); err != nil {
		t.Fatalf("probe: %v", err)
	}
	return time.Since(start)
}

// A client that sends frames with receipts and never reads its socket is
// not read either once its unwritten frames pass stomp.max_output_bytes:
// the daemon's heap stays bounded, the attack is counted, and another
// client is served as before.
func TestBudget_NonReadingClientIsNotRead(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.MaxOutputBytes = 1 << 20
		c.Stomp.WriteTimeout = appliance.Duration{Duration: 3 * time.Second}
	})
	base := probeRTT(t, tb)
	heap0 := heapInUse()
	r := dialRaw(t, tb)
	r.connect("1.2")
	// 64 MiB of topic SENDs, each asking for a RECEIPT (~40 bytes of
	// frames in memory per 60 sent), none of which the client reads.
	sent, blocked := flood(r.c, []byte("SEND\ndestination:/topic/void\nreceipt:r\n\nx\x00"), 64<<20)
	if !blocked {
		t.Fatalf("the server read all %d bytes of a client that never reads", sent)
	}
	// flood calls a write blocked for 2 s "blocked": on a loaded machine
	// the server may only be slow to read what the socket holds; it
	// reaches stomp.max_output_bytes as it reads on.
	for deadline := time.Now().Add(10 * time.Second); tb.B.Stats().OutputWaits == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := tb.B.Stats().OutputWaits; n == 0 {
		t.Fatal("output_backpressure_total is 0 10 s after a non-reading client was held")
	}
	if grown := heapInUse() - heap0; grown > 24<<20 {
		t.Fatalf("heap grew %d KiB for a non-reading client (sent %d KiB), want at most 24 MiB", grown>>10, sent>>10)
	}
	if rtt := probeRTT(t, tb); rtt > 20*base+200*time.Millisecond {
		t.Fatalf("probe round trip %s beside the attack, baseline %s", rtt, base)
	}
	// The write timeout ends the attacker.
	waitFor(t, 15*time.Second, "the non-reading connection closed", func() bool { return tb.B.Stats().Connections == 0 })
}

// A topic subscriber that does not read loses its oldest messages (or its
// connection) once they weigh more than topics.subscriber_buffer_bytes,
// however few they are.
func TestBudget_TopicSubscriberBufferBytes(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.SubscriberBufferBytes = 2 << 20
		c.Topics.SlowSubscriber = "drop-oldest"
	})
	slow := dialRaw(t, tb)
	slow.connect("1.2")
	slow.write("SUBSCRIBE\nid:1\ndestination:/topic/big\nreceipt:ok\n\n\x00")
	if f := slow.frame(); f.Command != "RECEIPT" {
		t.Fatalf("got %s, want RECEIPT", f.Command)
	}
	heap0 := heapInUse()
	p := tb.Dial(t)
	body := []byte(strings.Repeat("b", 256<<10))
	for range 400 { // 100 MiB, fewer messages than subscriber_buffer
		if err := p.Send("/topic/big", body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.SendReceipt(ctxT(t), "/topic/big", []byte("end")); err != nil {
		t.Fatal(err)
	}
	if grown := heapInUse() - heap0; grown > 48<<20 {
		t.Fatalf("heap grew %d KiB for a subscriber that does not read 100 MiB, want at most 48 MiB", grown>>10)
	}
	if v := topicView(tb, "big"); v.Dropped == 0 {
		t.Fatalf("topic big: dropped_total 0, want the messages over 2 MiB dropped")
	}
}

// Open transactions are bounded per connection in bytes, headers included:
// many tiny headers cost what they weigh, and two transactions share one
// budget.
func TestBudget_TransactionBytes(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Stomp.MaxTxBytes = 1 << 20 })
	r := dialRaw(t, tb)
	r.connect("1.2")
	var frame strings.Builder
	frame.WriteString("SEND\ndestination:/queue/tx\n")
	for i := range 50 {
		frame.WriteString("h" + strconvFormat(int64(i)) + ":v\n")
	}
	r.write("BEGIN\ntransaction:a\n\n\x00BEGIN\ntransaction:b\n\n\x00")
	sent := 0
	var errFrame *stomp.Frame
	for sent < 5000 && errFrame == nil {
		tx := "a"
		if sent%2 == 1 {
			tx = "b"
		}
		r.write(frame.String() + "transaction:" + tx + "\nreceipt:" + strconvFormat(int64(sent)) + "\n\n\x00")
		if f := r.frame(); f.Command == "ERROR" {
			errFrame = f
		}
		sent++
	}
	if errFrame == nil {
		t.Fatalf("%d buffered frames of 50 headers accepted with max_transaction_bytes 1 MiB", sent)
	}
	if errFrame.Get("message") != "transaction too large" || !strings.Contains(string(errFrame.Body), "stomp.max_transaction_bytes") {
		t.Fatalf("got ERROR %q %q, want transaction too large naming stomp.max_transaction_bytes", errFrame.Get("message"), errFrame.Body)
	}
	// Each frame weighs at least 50 headers x 32 bytes: far fewer than
	// 5000 fit in 1 MiB, across both transactions.
	if sent > (1<<20)/(50*32)+1 {
		t.Fatalf("%d frames accepted before the ERROR, want at most %d", sent, (1<<20)/(50*32)+1)
	}
}

// A queue's memory window is bounded in bytes as well as in messages, also
// right after a restart: large messages stay on disk until their turn.
func TestBudget_MemoryWindowBytes(t *testing.T) {
	const window = 4 << 20
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MemoryWindowBytes = window })
	c := tb.Dial(t)
	body := strings.Repeat("m", 256<<10)
	sendAll(t, c, "/queue/big", 200, func(i int) string { return strconvFormat(int64(i)) + " " + body }) // 50 MiB
	c.Close()
	for round := range 2 {
		v, _ := tb.B.Queue("big")
		if max := window/(256<<10) + 2; v.InMemory > max {
			t.Fatalf("round %d: %d messages of 256 KiB in memory, want at most %d (memory_window_bytes %d)", round, v.InMemory, max, window)
		}
		if round == 0 {
			heap0 := heapInUse()
			tb.Restart()
			waitFor(t, 5*time.Second, "first page in", func() bool { v, _ := tb.B.Queue("big"); return v.InMemory > 0 })
			if grown := heapInUse() - heap0; grown > 3*window {
				t.Fatalf("heap grew %d KiB at restart with a 4 MiB window over 50 MiB of messages", grown>>10)
			}
		}
	}
	cc := tb.Dial(t)
	sub, err := cc.SubscribeReceipt(ctxT(t), "/queue/big", "client-individual", hdr("prefetch-count", "4"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		f := recv(t, sub)
		if want := strconvFormat(int64(i)) + " "; !strings.HasPrefix(string(f.Body), want) {
			t.Fatalf("got message %.10q, want %q...", f.Body, want)
		}
		ackNow(t, cc, "ACK", f)
	}
}

// One address cannot hold every connection slot: past
// stomp.max_connections_per_address it is refused with an ERROR naming the
// setting, and a slot it frees is usable again.
func TestBudget_ConnectionsPerAddress(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Stomp.MaxConnectionsPerAddress = 3 })
	var held []*raw
	for range 3 {
		r := dialRaw(t, tb)
		r.connect("1.2")
		held = append(held, r)
	}
	extra := dialRaw(t, tb)
	f := extra.frame()
	if f.Command != "ERROR" || !strings.Contains(f.Get("message"), "stomp.max_connections_per_address") {
		t.Fatalf("fourth connection from one address: got %s %q, want ERROR naming stomp.max_connections_per_address", f.Command, f.Get("message"))
	}
	held[0].c.Close()
	waitFor(t, 5*time.Second, "a slot freed", func() bool { return tb.B.Stats().Connections == 2 })
	again := dialRaw(t, tb)
	if f := again.connect("1.2"); f.Command != "CONNECTED" {
		t.Fatalf("after a slot was freed: got %s", f.Command)
	}
}

// Queues that hold nothing are forgotten once idle (topics.idle_forget), so
// a client cannot hold every queues.max_queues slot with empty names; a
// queue holding a message or a consumer is kept, and a forgotten name works
// again as a new queue.
func TestBudget_EmptyQueuesForgotten(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.MaxQueues = 20
		c.Topics.IdleForget = appliance.Duration{Duration: 100 * time.Millisecond}
	})
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), "/queue/kept-msg", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscribeReceipt(ctxT(t), "/queue/kept-sub", "auto"); err != nil {
		t.Fatal(err)
	}
	for i := range 18 {
		s, err := c.SubscribeReceipt(ctxT(t), "/queue/empty"+strconv.Itoa(i), "auto")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Unsubscribe(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.Dial(t).SendReceipt(ctxT(t), "/queue/one-more", []byte("x")); err == nil || !strings.Contains(err.Error(), "max_queues") {
		t.Fatalf("queue 21 of 20: %v, want an ERROR naming queues.max_queues", err)
	}
	waitFor(t, 5*time.Second, "the empty queues forgotten", func() bool { return len(tb.B.Queues()) == 2 })
	for _, name := range []string{"kept-msg", "kept-sub"} {
		if _, ok := tb.B.Queue(name); !ok {
			t.Fatalf("queue %s forgotten although it holds a message or a consumer", name)
		}
	}
	if _, err := tb.Dial(t).SendReceipt(ctxT(t), "/queue/empty3", []byte("again")); err != nil {
		t.Fatalf("a forgotten name as a new queue: %v", err)
	}
	if v, _ := tb.B.Queue("empty3"); v.Messages != 1 {
		t.Fatalf("empty3 holds %d messages, want 1", v.Messages)
	}
}

// Backlog caches fill only what the queues' half of the memory budget has
// free above its half, and give it back when windows need it: an idle
// queue's cache is shed (shedCaches) once other queues' windows bring that
// half below its half, so their windows are never capped for it.
func TestBudget_BacklogCacheYieldsToWindows(t *testing.T) {
	const budget, window, size = 64 << 20, 6 << 20, 64 << 10
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Memory.BudgetBytes = budget
		c.Queues.MemoryWindowBytes = window
	})
	body := strings.Repeat("c", size)
	c := tb.Dial(t)
	sendAll(t, c, "/queue/idle", 400, func(i int) string { return body }) // 25 MiB, no consumer
	v, _ := tb.B.Queue("idle")
	held, _ := tb.B.MemoryHeld()
	// The queues' half is 32 MiB: window and cache together stop at 16.
	if limit := int64(budget/4 + 2*(size+1024)); v.CachedBytes < 2<<20 || held > limit {
		t.Fatalf("after filling 25 MiB: cached %d bytes, %d held in all: want a cache, and at most %d held", v.CachedBytes, held, limit)
	}
	// Two more queues fill their windows: 18 MiB of windows leave less
	// than half of the queues' half free, so the idle queue's cache goes.
	for _, q := range []string{"/queue/busy1", "/queue/busy2"} {
		sendAll(t, c, q, 160, func(i int) string { return body }) // 10 MiB each
	}
	c.Close()
	waitFor(t, 5*time.Second, "the idle queue's cache shed", func() bool { v, _ := tb.B.Queue("idle"); return v.CachedBytes == 0 })
	for _, name := range []string{"busy1", "busy2"} {
		v, _ := tb.B.Queue(name)
		if minMsgs := window / (size + 128); v.InMemory < minMsgs || v.CachedBytes != 0 {
			t.Fatalf("%s: %d messages in memory (window %d bytes: want at least %d), %d bytes cached (want none: no room)", name, v.InMemory, window, minMsgs, v.CachedBytes)
		}
	}
}
