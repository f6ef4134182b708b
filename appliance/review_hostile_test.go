package appliance_test

// Hostile-client review: each test states what it claims. They start a real
// broker on 127.0.0.1:0 and speak raw STOMP over TCP where the point is
// what a misbehaving client sends.

import (
	"bufio"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// rhHeap is the live heap after two full collections (the second empties
// sync.Pool's victim cache, whose buffers survive one).
func rhHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// rhDialSmall dials the broker with a receive buffer as small as the kernel
// allows, so that a client that does not read holds few bytes in its
// socket and the broker's own buffers are what is measured.
func rhDialSmall(t *testing.T, tb *testBroker) *raw {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &raw{t: t, c: c, r: stomp.NewReader(c, stomp.Limits{})}
}

// A queue message keeps what it is counted at: the headers a SEND carries
// but the message does not keep (broker-owned ones such as message-id,
// repeated keys, transport headers) must not stay in memory with it. The
// queue window and the memory budget count a message at Message.Size (its
// kept headers and body); if its header strings still share the whole
// frame's header text, each message pins up to stomp.max_header_bytes
// (64 KiB) that nothing counts, and queues.memory_window_bytes and
// memory.budget_bytes bound nothing.
func TestReviewHostile_QueueMessageDoesNotPinDroppedHeaders(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const n = 500
	pad := strings.Repeat("p", 15000)
	frame := "SEND\ndestination:/queue/pin\nx:1\nx:" + pad + "\nmessage-id:" + pad + "\n\nb\x00"
	heap0 := rhHeap()
	r := dialRaw(t, tb)
	r.connect("1.2")
	wrote := make(chan error, 1)
	go func() {
		var buf strings.Builder
		for range n - 1 {
			buf.WriteString(frame)
		}
		buf.WriteString("SEND\ndestination:/queue/pin\nreceipt:last\n\nb\x00")
		_, err := r.c.Write([]byte(buf.String()))
		wrote <- err
	}()
	if f := r.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("got %s %v %q, want RECEIPT", f.Command, f.Headers, f.Body)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	r.c.Close()
	v := waitQueue(t, tb, "pin", "500 messages in memory", func(v appliance.QueueView) bool {
		return v.Messages == n && v.InMemory == n
	})
	waitFor(t, 5*time.Second, "the connection gone", func() bool { return tb.B.Stats().Connections == 0 })
	grown := rhHeap() - heap0
	t.Logf("heap grew %d KiB for %d messages of %d counted bytes (%d pinned in dropped headers each)", grown>>10, n, v.Bytes, 2*len(pad))
	if grown > 4<<20 {
		t.Fatalf("heap grew %d KiB for %d queue messages counted at %d bytes in all: each pins the header text the SEND carried but the message dropped (~%d KiB)", grown>>10, n, v.Bytes, 2*len(pad)>>10)
	}
}

// Unread RECEIPTs are bounded by stomp.max_output_bytes at what they
// weigh (frameSize counts the receipt-id). A RECEIPT's receipt-id must not
// keep the whole header text of the frame it answers: a client that pads
// each frame with 30 KB of other headers and never reads makes every
// queued RECEIPT, counted at about 1.2 KB, hold 31 KB (the 64 MiB default
// output bound becomes 1.6 GiB per connection). The receipt-ids are 1000
// bytes so that the kernel's socket buffers fill first.
func TestReviewHostile_UnreadReceiptsDoNotPinFrameText(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.MaxOutputBytes = 1 << 20
		c.Stomp.WriteTimeout = appliance.Duration{Duration: 10 * time.Second}
	})
	heap0 := rhHeap()
	r := rhDialSmall(t, tb)
	r.connect("1.2")
	// ACKs of nothing: ignored (stale), answered with a RECEIPT.
	pad := strings.Repeat("p", 15000)
	frame := []byte("ACK\nid:9.1\nreceipt:" + strings.Repeat("r", 1000) + "\npad1:" + pad + "\npad2:" + pad + "\n\n\x00")
	sent, blocked := flood(r.c, frame, 1<<30)
	grown := rhHeap() - heap0
	t.Logf("sent %d KiB (%d frames), heap grew %d KiB", sent>>10, sent/len(frame), grown>>10)
	if !blocked {
		t.Fatalf("the server read all %d bytes of a client that never reads", sent)
	}
	if grown > 8<<20 {
		t.Fatalf("heap grew %d KiB for a non-reading client with stomp.max_output_bytes 1 MiB, want at most 8 MiB: each unread RECEIPT pins its frame's 31 KB of headers", grown>>10)
	}
}

// A queue consumer that does not read is bounded in bytes, not only by
// its prefetch count: deliveries stop once its unwritten frames weigh more
// than stomp.max_output_bytes. Otherwise a subscriber with
// prefetch-count:1000 (or ack:auto, whose default prefetch is 1000) that
// never reads makes the broker page in and hold up to 1000 messages of up
// to 16 MiB each, past queues.memory_window_bytes, max_output_bytes and
// the memory budget (deliveries always go on).
func TestReviewHostile_NonReadingConsumerBoundedInBytes(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.MaxOutputBytes = 1 << 20
		c.Stomp.WriteTimeout = appliance.Duration{Duration: 20 * time.Second}
		c.Queues.MemoryWindowBytes = 2 << 20
	})
	const n, size = 64, 512 << 10
	p := tb.Dial(t)
	body := []byte(strings.Repeat("m", size))
	for range n - 1 {
		if err := p.Send("/queue/big", body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.SendReceipt(ctxT(t), "/queue/big", body); err != nil {
		t.Fatal(err)
	}
	r := rhDialSmall(t, tb)
	r.connect("1.2")
	r.write("SUBSCRIBE\nid:1\ndestination:/queue/big\nack:client-individual\nprefetch-count:1000\n\n\x00")
	// Never read. Give the broker time to deliver what it will.
	var v appliance.QueueView
	last, stable := -1, 0
	for stable < 10 {
		time.Sleep(100 * time.Millisecond)
		v, _ = tb.B.Queue("big")
		if int(v.Delivered) == last {
			stable++
		} else {
			last, stable = int(v.Delivered), 0
		}
	}
	t.Logf("delivered %d of %d messages of %d KiB to a consumer that reads nothing; in memory %d; memory used %d KiB", v.Delivered, n, size>>10, v.InMemory, tb.B.Stats().MemoryUsed>>10)
	// 1 MiB of output is 2 messages; the window's 2 MiB 4 more; the
	// kernel's socket buffers take a few MiB more.
	if v.Delivered > 24 {
		t.Fatalf("%d messages (%d MiB) delivered to a consumer that reads nothing, with stomp.max_output_bytes 1 MiB and queues.memory_window_bytes 2 MiB: want deliveries to stop once its output is full", v.Delivered, int(v.Delivered)*size>>20)
	}
}

// One address cannot take every slot of the web listener: its HTTP
// connections (upgraded or not) are bounded by
// stomp.max_connections_per_address as STOMP's are, so that a client
// opening stomp.max_connections idle sockets does not lock every other
// browser and SSE client out (the listener otherwise waits for a slot,
// and an idle socket keeps one for its 10 s header timeout, again and
// again).
func TestReviewHostile_WebListenerBoundsConnectionsPerAddress(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.MaxConnections = 16
		c.Stomp.MaxConnectionsPerAddress = 4
	})
	addr := startWeb(t, tb, nil)
	for i := range 16 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
	}
	time.Sleep(200 * time.Millisecond)
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from 127.0.0.2: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 ") {
		t.Fatalf("a request from another address while 127.0.0.1 holds 16 idle connections (stomp.max_connections 16, max_connections_per_address 4): got %q, %v; want an answer within 3 s", line, err)
	}
}

// Every resource a client can grow has a setting named in its ERROR: the
// number of open transactions per connection is bounded (16), but the
// ERROR names no setting that raises it.
func TestReviewHostile_TooManyTransactionsNamesSetting(t *testing.T) {
	tb := mustStartBroker(t, nil)
	r := dialRaw(t, tb)
	r.connect("1.2")
	for i := range 16 {
		r.write("BEGIN\ntransaction:t" + strconvFormat(int64(i)) + "\n\n\x00")
	}
	r.write("BEGIN\ntransaction:one-too-many\nreceipt:b\n\n\x00")
	f := r.frame()
	if f.Command != stomp.CmdError {
		t.Fatalf("got %s %v, want ERROR", f.Command, f.Headers)
	}
	if !strings.Contains(f.Get("message")+string(f.Body), "stomp.") {
		t.Fatalf("ERROR message %q body %q names no setting", f.Get("message"), f.Body)
	}
}

// A connection's subscriptions are bounded in bytes, not only in number:
// stomp.max_subscriptions (1024) subscriptions whose ids are 16 KiB each
// (a header line may be 16 KiB) hold 16 MiB per connection, 16 GiB from
// one address at stomp.max_connections_per_address, none of it counted in
// the memory budget; and each subscription kept the whole header text of
// its SUBSCRIBE (up to stomp.max_header_bytes, 64 KiB) as long as its id
// shared that text. Either what they hold is bounded (or charged), or such
// an id is refused with an ERROR that says how long one may be.
func TestReviewHostile_SubscriptionsBoundedInBytes(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const n = 1000
	heap0 := rhHeap()
	used0 := tb.B.Stats().MemoryUsed
	r := dialRaw(t, tb)
	r.connect("1.2")
	pad := strings.Repeat("p", 15000)
	wrote := make(chan error, 1)
	go func() {
		var buf strings.Builder
		for i := range n {
			id := strconvFormat(int64(i)) + strings.Repeat("i", 15000)
			buf.WriteString("SUBSCRIBE\nid:" + id + "\ndestination:/topic/subs\npad1:" + pad + "\npad2:" + pad + "\n\n\x00")
		}
		buf.WriteString("SEND\ndestination:/queue/alive\nreceipt:last\n\nx\x00")
		_, err := r.c.Write([]byte(buf.String()))
		wrote <- err
	}()
	f := r.frame()
	if f.Command == stomp.CmdError {
		// Refusing such an id is a bound too, if the ERROR says which.
		if !strings.Contains(f.Get("message")+string(f.Body), "bytes") {
			t.Fatalf("ERROR %q %q for a 15 KB subscription id names no bound", f.Get("message"), f.Body)
		}
		t.Logf("refused: %s: %s", f.Get("message"), f.Body)
		<-wrote
		return
	}
	if f.Command != stomp.CmdReceipt {
		t.Fatalf("got %s %v %q, want RECEIPT", f.Command, f.Headers, f.Body)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	grown := rhHeap() - heap0
	charged := tb.B.Stats().MemoryUsed - used0
	t.Logf("%d subscriptions of one connection: heap grew %d KiB, memory budget charged %d KiB", n, grown>>10, charged>>10)
	if grown > 8<<20 && charged < grown/2 {
		t.Fatalf("%d subscriptions with 15 KB ids hold %d KiB of heap, %d KiB of it charged to memory.budget_bytes, and no setting bounds their bytes", n, grown>>10, charged>>10)
	}
}

// Once a burst of SENDs is committed, consumed and acknowledged, nothing
// of their frames stays in memory. The journal's writer kept the batches
// of its largest group commit in the tail of a reused slice (batches[:0]),
// and each batch's Done holds its SEND frame (every header it carried,
// up to stomp.max_header_bytes, and its body): up to a group's worth of
// frames (hundreds) stayed alive, uncounted, until a group as large came
// again.
func TestReviewHostile_JournalDoesNotKeepCommittedFrames(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const n = 2000
	heap0 := rhHeap()
	r := dialRaw(t, tb)
	r.connect("1.2")
	pad := strings.Repeat("p", 15000)
	wrote := make(chan error, 1)
	go func() {
		var buf strings.Builder
		for range n {
			buf.WriteString("SEND\ndestination:/queue/burst\nmessage-id:" + pad + "\nreceipt:" + pad + "\n\nb\x00")
		}
		buf.WriteString("SEND\ndestination:/queue/burst\nreceipt:last\n\nb\x00")
		_, err := r.c.Write([]byte(buf.String()))
		wrote <- err
	}()
	for {
		f := r.frame()
		if f.Command != stomp.CmdReceipt {
			t.Fatalf("got %s %v %q, want RECEIPT", f.Command, f.Headers, f.Body)
		}
		if f.Get("receipt-id") == "last" {
			break
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	r.c.Close()
	c := tb.Dial(t)
	sub, err := c.Subscribe("/queue/burst", "auto")
	if err != nil {
		t.Fatal(err)
	}
	for range n + 1 {
		recv(t, sub)
	}
	c.Close()
	waitQueue(t, tb, "burst", "empty", func(v appliance.QueueView) bool { return v.Messages == 0 })
	waitFor(t, 5*time.Second, "the connections gone", func() bool { return tb.B.Stats().Connections == 0 })
	grown := rhHeap() - heap0
	t.Logf("heap grew %d KiB after %d SENDs of 30 KB of headers were committed and consumed", grown>>10, n)
	if grown > 4<<20 {
		t.Fatalf("heap grew %d KiB after %d SENDs (30 KB of headers each) were committed, consumed and acknowledged: their frames are still held", grown>>10, n)
	}
}

// A consumer that was sent a large message and then idles holds nothing of
// it once it is written and acknowledged: the memory budget released it.
// The session's writer kept its encoding buffer at the size of the largest
// frame it ever wrote (up to max_body_bytes), and its list of auto-ack
// deliveries of the last batch (each holding its message and body), for
// as long as the connection lasted: every idle connection that once
// received a 16 MiB message held 32 MiB that nothing counted.
func TestReviewHostile_IdleConsumerKeepsNoWrittenMessage(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const conns, size = 4, 4 << 20
	heap0 := rhHeap()
	p := dialRaw(t, tb) // the client library's buffers are not the broker's
	p.connect("1.2")
	for i := range conns {
		p.write("SEND\ndestination:/queue/idle" + strconvFormat(int64(i)) + "\nreceipt:r\ncontent-length:" + strconvFormat(size) + "\n\n" + strings.Repeat("m", size) + "\x00")
		if f := p.frame(); f.Command != stomp.CmdReceipt {
			t.Fatalf("got %s %v %q, want RECEIPT", f.Command, f.Headers, f.Body)
		}
	}
	p.c.Close()
	for i := range conns {
		r := dialRaw(t, tb)
		r.connect("1.2")
		r.write("SUBSCRIBE\nid:1\ndestination:/queue/idle" + strconvFormat(int64(i)) + "\nack:auto\n\n\x00")
		if m := r.frame(); m.Command != stomp.CmdMessage || len(m.Body) != size {
			t.Fatalf("got %s of %d bytes, want a MESSAGE of %d", m.Command, len(m.Body), size)
		}
		waitQueue(t, tb, "idle"+strconvFormat(int64(i)), "empty", func(v appliance.QueueView) bool { return v.Messages == 0 })
	}
	// The consumers stay connected, idle.
	grown := rhHeap() - heap0
	t.Logf("heap grew %d KiB with %d idle consumers that each received one %d MiB message", grown>>10, conns, size>>20)
	if grown > 6<<20 {
		t.Fatalf("heap grew %d KiB after %d consumers each received and auto-acked one %d MiB message and went idle: their sessions still hold it", grown>>10, conns, size>>20)
	}
}
