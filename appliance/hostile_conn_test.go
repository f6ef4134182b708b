package appliance_test

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// connectHB sends CONNECT (STOMP 1.2) with the given heart-beat header and
// waits for CONNECTED.
func connectHB(r *raw, hb string) {
	r.t.Helper()
	r.write("CONNECT\naccept-version:1.2\nhost:test\nheart-beat:" + hb + "\n\n\x00")
	f := r.frame()
	if f.Command != stomp.CmdConnected {
		r.t.Fatalf("got %s %v, want CONNECTED", f.Command, f.Headers)
	}
	r.r.SetVersion(f.Get("version"))
}

// wantError reads the next frame and checks it is an ERROR with message msg
// whose body names setting.
func wantError(r *raw, msg, setting string) {
	r.t.Helper()
	f := r.frame()
	if f.Command != stomp.CmdError || f.Get("message") != msg || !strings.Contains(string(f.Body), setting) {
		r.t.Fatalf("got %s message %q body %q, want ERROR message %q with a body naming %s", f.Command, f.Get("message"), f.Body, msg, setting)
	}
}

// sendReceipt sends a SEND with a receipt and checks the RECEIPT comes back:
// the connection is up.
func sendReceipt(r *raw, what string) {
	r.t.Helper()
	r.write("SEND\ndestination:/queue/alive\nreceipt:" + what + "\n\nx\x00")
	f := r.frame()
	if f.Command != stomp.CmdReceipt || f.Get("receipt-id") != what {
		r.t.Fatalf("%s: got %s %v %q, want RECEIPT %s", what, f.Command, f.Headers, f.Body, what)
	}
}

// heapInuse returns the heap in use after a full collection.
func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestHostile_AnnouncedBodiesDoNotReserveMemory opens many connections that
// each announce a 16 MiB body and send a few octets of it: the broker must
// not reserve the announced bodies, only what arrived (plus one bounded
// step). Before, each such frame cost its whole content-length at once.
func TestHostile_AnnouncedBodiesDoNotReserveMemory(t *testing.T) {
	const (
		conns     = 200
		announced = 16 << 20
		// per connection: the first body step (64 KiB), and as much
		// again for incidental allocations.
		perConn = 128 << 10
	)
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Stomp.MaxBodyBytes = announced })
	rs := make([]*raw, conns)
	for i := range rs {
		rs[i] = dialRaw(t, tb)
		rs[i].connect("1.2")
	}
	bytesIn := func() uint64 {
		var n uint64
		for _, c := range tb.B.Connections() {
			n += c.BytesIn
		}
		return n
	}
	waitBytesIn := func(want uint64) {
		t.Helper()
		waitFor(t, 20*time.Second, "the broker to read "+strconv.FormatUint(want, 10)+" bytes", func() bool { return bytesIn() == want })
	}
	base := bytesIn()
	before := heapInuse()

	head := "SEND\ndestination:/queue/big\ncontent-length:" + strconv.Itoa(announced) + "\n\nabc"
	for _, r := range rs {
		r.write(head)
	}
	waitBytesIn(base + conns*uint64(len(head)))
	// The broker reads these only once it has decoded the headers above
	// and set up the body: every reader is now inside its body.
	for _, r := range rs {
		r.write("def")
	}
	waitBytesIn(base + conns*uint64(len(head)+3))

	after := heapInuse()
	runtime.KeepAlive(rs) // the client side's buffers count in both figures
	grown := int64(after) - int64(before)
	t.Logf("heap in use: %d before, %d with %d bodies of %d bytes announced (+%d)", before, after, conns, announced, grown)
	if grown > conns*perConn {
		t.Errorf("got the heap grown by %d bytes for %d connections each announcing %d bytes and sending 6, want at most %d (%d per connection)",
			grown, conns, announced, conns*perConn, perConn)
	}
}

// TestHostile_FrameTimeout starts frames and never finishes them: with or
// without heart-beats, the client gets an ERROR naming stomp.frame_timeout,
// no sooner than frame_timeout after the frame's first byte, and the
// connection is closed.
func TestHostile_FrameTimeout(t *testing.T) {
	const ft = 300 * time.Millisecond
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.FrameTimeout = appliance.Duration{Duration: ft}
		c.Stomp.HeartbeatReceive = appliance.Duration{Duration: 100 * time.Millisecond}
	})
	for _, tc := range []struct {
		name, heartbeat, partial string
		trickle                  bool // then one byte of body every 50 ms
	}{
		{"headers, no heart-beats", "0,0", "SEND\ndestination:/queue/a\nreceipt:1\n", false},
		{"body, no heart-beats", "0,0", "SEND\ndestination:/queue/a\ncontent-length:10\n\nabc", false},
		{"body, heart-beats", "100,0", "SEND\ndestination:/queue/a\ncontent-length:10\n\nabc", false},
		// every byte well within the heart-beat interval, the frame never
		// complete
		{"trickled body, heart-beats", "100,0", "SEND\ndestination:/queue/a\ncontent-length:1000\n\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, tb)
			connectHB(r, tc.heartbeat)
			start := time.Now()
			r.write(tc.partial)
			if tc.trickle {
				defer trickle(r.c, 50*time.Millisecond, "x")()
			}
			wantError(r, "frame timeout", "stomp.frame_timeout")
			if elapsed := time.Since(start); elapsed < ft {
				t.Errorf("got the ERROR %s after the frame started, want no sooner than frame_timeout (%s)", elapsed, ft)
			}
			r.closed()
		})
	}
	t.Run("CONNECT keeps connect_timeout", func(t *testing.T) {
		// Regression guard: a frame_timeout longer than connect_timeout
		// does not extend the time CONNECT may take.
		tb := mustStartBroker(t, func(c *appliance.Config) {
			c.Stomp.ConnectTimeout = appliance.Duration{Duration: ft}
			c.Stomp.FrameTimeout = appliance.Duration{Duration: time.Minute}
		})
		r := dialRaw(t, tb)
		r.write("CONNECT\naccept-version:1.2\n")
		wantError(r, "connect timeout", "CONNECT")
		r.closed()
	})
}

// TestHostile_IdleTimeout checks that a connection without heart-beats that
// sends nothing is closed after stomp.idle_timeout with an ERROR naming it,
// while one that keeps sending and one whose negotiated heart-beat interval
// is longer than idle_timeout stay up.
func TestHostile_IdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.IdleTimeout = appliance.Duration{Duration: idle}
		c.Stomp.HeartbeatReceive = appliance.Duration{Duration: time.Second}
	})

	// Negotiated client heart-beats (1 s: silence allowed for 3 s), silent.
	beating := dialRaw(t, tb)
	connectHB(beating, "1000,0")
	// No heart-beats, but an EOL every idle/3.
	chatty := dialRaw(t, tb)
	connectHB(chatty, "0,0")
	stopChatty := trickle(chatty.c, idle/3, "\n")

	// Two idle connections, one after the other: when the second has its
	// ERROR, the two above have been up for more than twice idle_timeout.
	for i := 0; i < 2; i++ {
		idler := dialRaw(t, tb)
		// The server's clock starts at its read after CONNECT, which
		// the client cannot see: it is after CONNECT was sent and may be
		// before CONNECTED arrives (by the writer's wake-up and the
		// loopback under load). So the bound runs from the send.
		start := time.Now()
		connectHB(idler, "0,0")
		wantError(idler, "idle timeout", "stomp.idle_timeout")
		if elapsed := time.Since(start); elapsed < idle {
			t.Errorf("idle connection %d: got the ERROR %s after sending CONNECT, want no sooner than idle_timeout (%s)", i, elapsed, idle)
		}
		idler.closed()
	}
	stopChatty()
	sendReceipt(beating, "beating")
	sendReceipt(chatty, "chatty")
}

// TestHostile_TimeoutsValidated checks the new timeouts' validation:
// frame_timeout must be positive, idle_timeout "0s" (never) or positive.
func TestHostile_TimeoutsValidated(t *testing.T) {
	cfg := appliance.DefaultConfig()
	if got, want := cfg.Stomp.FrameTimeout.Duration, 30*time.Second; got != want {
		t.Errorf("got frame_timeout %s by default, want %s", got, want)
	}
	if got, want := cfg.Stomp.IdleTimeout.Duration, 10*time.Minute; got != want {
		t.Errorf("got idle_timeout %s by default, want %s", got, want)
	}
	cfg.Stomp.IdleTimeout.Duration = 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("idle_timeout 0s: got %v, want valid (never)", err)
	}
	cfg.Stomp.FrameTimeout.Duration = 0
	cfg.Stomp.IdleTimeout.Duration = -time.Second
	err := cfg.Validate()
	for _, want := range []string{"stomp.frame_timeout", "stomp.idle_timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("frame_timeout 0s, idle_timeout -1s: got %v, want an error naming %s", err, want)
		}
	}
}

// trickle writes b to c every interval until the returned stop is called
// (which waits for the writer to end).
func trickle(c net.Conn, every time.Duration, b string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				if _, err := c.Write([]byte(b)); err != nil {
					return
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// A burst of SENDs written at once keeps one frame_timeout deadline (set
// with a sixteenth of slack) instead of setting one per frame (each was a
// poller update), and every message of it is delivered.
func TestSession_BurstSharesFrameDeadline(t *testing.T) {
	tb := mustStartBroker(t, nil)
	sub := dialRaw(t, tb)
	sub.connect("1.2")
	sub.subscribe("1", "/topic/burst")
	p := dialRaw(t, tb)
	p.connect("1.2")
	const n = 4000
	var burst strings.Builder
	for i := range n {
		fmt.Fprintf(&burst, "SEND\ndestination:/topic/burst\n\n%d\x00", i)
	}
	burst.WriteString("SEND\ndestination:/topic/burst\nreceipt:end\n\nend\x00")
	before := tb.B.ReadDeadlinesForTest()
	p.write(burst.String())
	if f := p.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "end" {
		t.Fatalf("got %s %v, want the burst's receipt", f.Command, f.Headers)
	}
	set := tb.B.ReadDeadlinesForTest() - before
	for i := range n {
		if f := sub.frame(); string(f.Body) != strconv.Itoa(i) {
			t.Fatalf("message %d: got %s %q", i, f.Command, f.Body)
		}
	}
	// The burst takes far less than a sixteenth of frame_timeout (30 s by
	// default); the subscriber's session sets none (it reads nothing).
	if set > n/10 {
		t.Fatalf("%d read deadlines set for a burst of %d frames, want far fewer than one per frame", set, n+1)
	}
	t.Logf("%d read deadlines for %d frames", set, n+1)
}

// gateJournal holds the batches submitted while its gate is closed and
// passes them on when it opens.
type gateJournal struct {
	appliance.Journal
	mu     sync.Mutex
	closed bool
	held   []*appliance.Batch
}

func (j *gateJournal) Submit(b *appliance.Batch) {
	j.mu.Lock()
	if j.closed {
		j.held = append(j.held, b)
		j.mu.Unlock()
		return
	}
	j.mu.Unlock()
	j.Journal.Submit(b)
}

func (j *gateJournal) open() {
	j.mu.Lock()
	held := j.held
	j.closed, j.held = false, nil
	j.mu.Unlock()
	for _, b := range held {
		j.Journal.Submit(b)
	}
}

// A frame whose first octets were read before the reader waited (here for
// the journal: stomp.max_journal_pending_bytes) longer than frame_timeout
// gets its whole frame_timeout from when the reader comes to it, not from
// the read: the client is not cut off for the server's own wait.
func TestSession_FrameTimeoutAfterReaderWaited(t *testing.T) {
	const ft = 300 * time.Millisecond
	gj := &gateJournal{closed: true}
	tb := startWrapped(t, func(c *appliance.Config) {
		c.Stomp.FrameTimeout = appliance.Duration{Duration: ft}
		c.Stomp.MaxJournalPendingBytes = 1 // one batch in the journal's hands at a time
	}, func(j appliance.Journal) appliance.Journal {
		gj.Journal = j
		return gj
	})
	r := dialRaw(t, tb)
	r.connect("1.2")
	// One write: two durable SENDs, and the start of a third. The second
	// waits for the first, which the closed gate holds.
	r.write("SEND\ndestination:/queue/w\nreceipt:1\n\none\x00" +
		"SEND\ndestination:/queue/w\nreceipt:2\n\ntwo\x00" +
		"SEND\ndestination:/queue/w\nreceipt:3\n")
	time.Sleep(2 * ft) // not synchronisation: the reader's wait, longer than frame_timeout
	gj.open()
	time.Sleep(ft / 3) // the reader goes on to the third frame meanwhile
	r.write("\nthree\x00")
	for _, id := range []string{"1", "2", "3"} {
		if f := r.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != id {
			t.Fatalf("got %s %v (%s), want RECEIPT %s: the third frame's time ran from the read, not from when the reader came to it", f.Command, f.Headers, f.Body, id)
		}
	}
}
