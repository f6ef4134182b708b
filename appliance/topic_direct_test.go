package appliance_test

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Tests of the direct writes of topic messages from the publisher's
// goroutine (topic_direct.go).

// dialRawSmall is dialRaw with a tiny receive buffer (SO_RCVBUF set before
// the connection is made, so the window stays small): a subscriber that
// stops reading fills the server's socket soon.
func dialRawSmall(t *testing.T, tb *testBroker) *raw {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048)
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

func (r *raw) subscribe(id, dest string) {
	r.t.Helper()
	r.write("SUBSCRIBE\nid:" + id + "\ndestination:" + dest + "\nreceipt:sub-" + id + "\n\n\x00")
	if f := r.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "sub-"+id {
		r.t.Fatalf("got %s %v, want the SUBSCRIBE receipt", f.Command, f.Headers)
	}
}

// directBody is message i's body: its number, then a pattern that depends
// on it, so that a torn or spliced frame shows.
func directBody(prefix string, i, size int) string {
	head := prefix + ":" + strconv.Itoa(i) + ":"
	pat := string(rune('a' + i%26))
	return head + strings.Repeat(pat, max(size-len(head), 0))
}

// Several publishers at once, subscribers of mixed speed (reading at once,
// reading with pauses, with a tiny socket buffer): every subscriber gets
// every message of every publisher once, intact, in each publisher's
// order; and a publisher subscribed to its own topic gets its MESSAGE
// before the RECEIPT of the SEND that published it.
func TestTopicDirect_OrderPerSubscriber(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.SubscriberBuffer = 1 << 20 // nothing dropped: order is the point
	})
	const pubs, n, size = 3, 3000, 200
	type subr struct {
		r     *raw
		pause time.Duration // after every 64 frames
	}
	var subs []*subr
	for i := range 6 {
		var r *raw
		if i >= 4 {
			r = dialRawSmall(t, tb)
		} else {
			r = dialRaw(t, tb)
		}
		r.connect("1.2")
		r.subscribe("s", "/topic/order")
		subs = append(subs, &subr{r: r, pause: []time.Duration{0, 0, time.Millisecond, 3 * time.Millisecond, 0, 2 * time.Millisecond}[i]})
	}
	// Publisher 0 subscribes to its own topic and asks for a receipt every
	// 100 messages.
	prs := make([]*raw, pubs)
	for p := range pubs {
		prs[p] = dialRaw(t, tb)
		prs[p].connect("1.2")
	}
	prs[0].subscribe("own", "/topic/order")

	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for si, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := make([]int, pubs)
			s.r.c.SetReadDeadline(time.Now().Add(60 * time.Second))
			for got := 0; got < pubs*n; {
				f, err := s.r.r.ReadFrame()
				if err != nil {
					errs <- fmt.Errorf("subscriber %d after %d frames: %v", si, got, err)
					return
				}
				if f == nil {
					continue
				}
				if f.Command != stomp.CmdMessage {
					errs <- fmt.Errorf("subscriber %d: got %s %v", si, f.Command, f.Headers)
					return
				}
				parts := strings.SplitN(string(f.Body), ":", 3)
				p, _ := strconv.Atoi(strings.TrimPrefix(parts[0], "p"))
				i, _ := strconv.Atoi(parts[1])
				if len(parts) != 3 || p < 0 || p >= pubs || i != next[p] || string(f.Body) != directBody(parts[0], i, size) {
					errs <- fmt.Errorf("subscriber %d: got %.24q, want message %d of each publisher next %v", si, f.Body, i, next)
					return
				}
				next[p]++
				got++
				if s.pause > 0 && got%64 == 0 {
					time.Sleep(s.pause)
				}
			}
		}()
	}
	for p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr := prs[p]
			var burst bytes.Buffer
			for i := range n {
				burst.WriteString("SEND\ndestination:/topic/order\n")
				if p == 0 && i%100 == 99 {
					burst.WriteString("receipt:r" + strconv.Itoa(i) + "\n")
				}
				burst.WriteString("\n" + directBody("p"+strconv.Itoa(p), i, size) + "\x00")
				if i%(7+p) == 0 || i == n-1 { // bursts of different lengths
					if _, err := pr.c.Write(burst.Bytes()); err != nil {
						errs <- fmt.Errorf("publisher %d: %v", p, err)
						return
					}
					burst.Reset()
				}
			}
		}()
	}
	// Publisher 0's own connection: its MESSAGEs in order, each receipt
	// after the MESSAGE of its SEND.
	wg.Add(1)
	go func() {
		defer wg.Done()
		pr := prs[0]
		pr.c.SetReadDeadline(time.Now().Add(60 * time.Second))
		next, receipts := 0, 0
		for next < n || receipts < n/100 {
			f, err := pr.r.ReadFrame()
			if err != nil {
				errs <- fmt.Errorf("publisher 0 reading: %v (message %d next, %d receipts)", err, next, receipts)
				return
			}
			if f == nil {
				continue
			}
			switch f.Command {
			case stomp.CmdReceipt:
				k, _ := strconv.Atoi(strings.TrimPrefix(f.Get("receipt-id"), "r"))
				if k >= next {
					errs <- fmt.Errorf("publisher 0: RECEIPT r%d before its MESSAGE (next %d)", k, next)
					return
				}
				receipts++
			case stomp.CmdMessage:
				if !strings.HasPrefix(string(f.Body), "p") {
					errs <- fmt.Errorf("publisher 0: got %.24q", f.Body)
					return
				}
				if strings.HasPrefix(string(f.Body), "p0:") {
					if want := directBody("p0", next, size); string(f.Body) != want {
						errs <- fmt.Errorf("publisher 0: got %.24q, want its message %d", f.Body, next)
						return
					}
					next++
				}
			default:
				errs <- fmt.Errorf("publisher 0: got %s %v", f.Command, f.Headers)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w, _ := tb.B.DirectWritesForTest(); w == 0 {
		t.Error("no direct write: the test did not exercise the publisher's writes")
	}
}

// A subscriber with a tiny socket buffer that stops reading: a direct
// write is cut short, its rest goes to the subscriber's writer, and the
// publisher goes on meanwhile (its receipt arrives while the subscriber
// still reads nothing). Once the subscriber reads, every message arrives
// whole and in order.
func TestTopicDirect_PartialWriteHandedOver(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.SubscriberBuffer = 1 << 20
		c.Stomp.WriteTimeout = appliance.Duration{Duration: 60 * time.Second}
	})
	const n, size = 6000, 1024
	slow := dialRawSmall(t, tb)
	slow.connect("1.2")
	slow.subscribe("1", "/topic/full")
	p := dialRaw(t, tb)
	p.connect("1.2")
	var burst bytes.Buffer
	for i := range n {
		burst.WriteString("SEND\ndestination:/topic/full\n\n" + directBody("m", i, size) + "\x00")
		if burst.Len() > 32<<10 {
			p.write(burst.String())
			burst.Reset()
		}
	}
	burst.WriteString("SEND\ndestination:/topic/full\nreceipt:end\n\n" + directBody("m", n, size) + "\x00")
	p.write(burst.String())
	if f := p.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "end" {
		t.Fatalf("publisher: got %s %v, want its receipt", f.Command, f.Headers)
	}
	if _, h := tb.B.DirectWritesForTest(); h == 0 {
		t.Fatal("no direct write was handed over: the subscriber's socket never filled")
	}
	slow.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for i := 0; i <= n; {
		f, err := slow.r.ReadFrame()
		if err != nil {
			t.Fatalf("subscriber, reading message %d: %v", i, err)
		}
		if f == nil {
			continue
		}
		if f.Command != stomp.CmdMessage || f.Get("subscription") != "1" || f.Get("destination") != "/topic/full" {
			t.Fatalf("message %d: got %s %v", i, f.Command, f.Headers)
		}
		if want := directBody("m", i, size); string(f.Body) != want {
			t.Fatalf("message %d: got %.24q (%d bytes), want %.24q (%d bytes)", i, f.Body, len(f.Body), want, len(want))
		}
		i++
	}
}

// A subscriber that never reads, with a small subscriber_buffer, is closed
// as a slow consumer as before, while the publisher goes on (its receipt
// arrives, with the subscriber's write_timeout far away) and a fast
// subscriber gets everything.
func TestTopicDirect_SlowSubscriberDoesNotHoldPublisher(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.SubscriberBuffer = 64
		c.Stomp.WriteTimeout = appliance.Duration{Duration: 120 * time.Second}
	})
	dropsBefore := tb.B.Stats().SlowDrops
	slow := dialRawSmall(t, tb)
	slow.connect("1.2")
	slow.subscribe("1", "/topic/hose")
	fast := dialRaw(t, tb)
	fast.connect("1.2")
	fast.subscribe("1", "/topic/hose")
	p := dialRaw(t, tb)
	p.connect("1.2")
	const n, size = 4000, 1024
	// In bursts of 16, each read by the fast subscriber before the next:
	// it never lags by its buffer; the slow one falls behind for good.
	for i := 0; i < n; i += 16 {
		var burst bytes.Buffer
		for j := i; j < i+16; j++ {
			r := ""
			if j == n-1 {
				r = "receipt:end\n"
			}
			burst.WriteString("SEND\ndestination:/topic/hose\n" + r + "\n" + directBody("h", j, size) + "\x00")
		}
		p.write(burst.String())
		for j := i; j < i+16; j++ {
			if f := fast.frame(); string(f.Body) != directBody("h", j, size) {
				t.Fatalf("fast subscriber: got %s %.24q, want message %d", f.Command, f.Body, j)
			}
		}
	}
	if f := p.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "end" {
		t.Fatalf("publisher: got %s %v, want its receipt", f.Command, f.Headers)
	}
	slow.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		f, err := slow.r.ReadFrame()
		if err != nil {
			t.Fatalf("slow subscriber closed without ERROR: %v", err)
		}
		if f != nil && f.Command == stomp.CmdError {
			if !strings.Contains(f.Get("message"), "slow consumer") {
				t.Fatalf("ERROR %q, want slow consumer", f.Get("message"))
			}
			break
		}
	}
	slow.closed()
	if d := tb.B.Stats().SlowDrops - dropsBefore; d != 1 {
		t.Fatalf("slow_subscriber_drops_total rose by %d, want 1", d)
	}
}

// Heart-beats still go out while a subscriber's messages are written by
// publishers, between whole frames only, and once the messages stop.
//
// The write deadline the writer set for its last write (write_timeout, here
// short) has long passed when the publishers write: their writes must not
// fail on it (none is handed over: the subscriber reads all the time).
func TestTopicDirect_HeartBeats(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.HeartbeatSend = appliance.Duration{Duration: 100 * time.Millisecond}
		c.Stomp.WriteTimeout = appliance.Duration{Duration: 20 * time.Millisecond}
	})
	sub := dialRaw(t, tb)
	sub.write("CONNECT\naccept-version:1.2\nhost:test\nheart-beat:0,100\n\n\x00")
	if f := sub.frame(); f.Command != stomp.CmdConnected || f.Get("heart-beat") == "" || strings.HasPrefix(f.Get("heart-beat"), "0,") {
		t.Fatalf("got %s %v, want CONNECTED with the server beating", f.Command, f.Headers)
	}
	sub.subscribe("1", "/topic/beat")
	p := dialRaw(t, tb)
	p.connect("1.2")
	const n = 60
	go func() {
		for i := range n {
			io := "SEND\ndestination:/topic/beat\n\n" + directBody("b", i, 64) + "\x00"
			if _, err := p.c.Write([]byte(io)); err != nil {
				return
			}
			time.Sleep(7 * time.Millisecond)
		}
	}()
	sub.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for i := 0; i < n; {
		f, err := sub.r.ReadFrame()
		if err != nil {
			t.Fatalf("reading message %d: %v", i, err)
		}
		if f == nil {
			continue // a beat between frames
		}
		if string(f.Body) != directBody("b", i, 64) {
			t.Fatalf("got %.24q, want message %d", f.Body, i)
		}
		i++
	}
	if w, h := tb.B.DirectWritesForTest(); w == 0 || h != 0 {
		t.Fatalf("%d direct writes, %d handed over: want some, none handed over", w, h)
	}
	// Idle now: beats (nil frames) keep coming.
	for beats := 0; beats < 3; {
		sub.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := sub.r.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for heart-beat %d: %v", beats+1, err)
		}
		if f != nil {
			t.Fatalf("got %s, want only heart-beats", f.Command)
		}
		beats++
	}
}

// A topic message nobody takes over STOMP (no subscriber, history or last
// value: a topic only a multicast channel carries) costs no MESSAGE frame;
// one with a wildcard subscriber is still delivered, with message ids that
// counted the others.
func TestPublish_NoSubscriberBuildsNoFrame(t *testing.T) {
	tb := mustStartBroker(t, nil)
	body := []byte("x")
	tb.B.PublishForTest("quiet.a", body) // the topic's statistics exist
	if n := testing.AllocsPerRun(200, func() { tb.B.PublishForTest("quiet.a", body) }); n > 0 {
		t.Fatalf("%v allocations per message to a topic without subscribers, want none", n)
	}
	sub := dialRaw(t, tb)
	sub.connect("1.2")
	sub.subscribe("1", "/topic/quiet.*")
	tb.B.PublishForTest("quiet.a", []byte("seen"))
	f := sub.frame()
	if f.Command != stomp.CmdMessage || string(f.Body) != "seen" || f.Get("destination") != "/topic/quiet.a" {
		t.Fatalf("got %s %v %q, want the MESSAGE to the wildcard subscriber", f.Command, f.Headers, f.Body)
	}
	if id := f.Get("message-id"); !strings.HasPrefix(id, "t") || atoiOr0(id[1:]) < 202 {
		t.Fatalf("message-id %q, want t and a sequence counting the 201 messages nobody took", id)
	}
}

func atoiOr0(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// A message for many subscribers goes to their writers, which run on every
// core, instead of being written to each in turn by the publisher's
// goroutine; for a few, the publisher's goroutine writes it.
func TestTopicDirect_ManySubscribersHandedToWriters(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one core: every flush is written by the publisher's goroutine (needs GOMAXPROCS >= 2)")
	}
	tb := mustStartBroker(t, nil)
	p := dialRaw(t, tb)
	p.connect("1.2")
	publish := func(dest string, subs []*raw, i int) {
		t.Helper()
		p.write("SEND\ndestination:" + dest + "\nreceipt:m" + strconv.Itoa(i) + "\n\n" + directBody("m", i, 64) + "\x00")
		if f := p.frame(); f.Command != stomp.CmdReceipt {
			t.Fatalf("publisher: got %s %v, want its receipt", f.Command, f.Headers)
		}
		for k, s := range subs {
			if f := s.frame(); f.Command != stomp.CmdMessage || string(f.Body) != directBody("m", i, 64) {
				t.Fatalf("subscriber %d of %s: got %s %.24q, want message %d", k, dest, f.Command, f.Body, i)
			}
		}
	}
	subscribers := func(dest string, n int) []*raw {
		var subs []*raw
		for k := range n {
			s := dialRaw(t, tb)
			s.connect("1.2")
			s.subscribe(strconv.Itoa(k), dest)
			subs = append(subs, s)
		}
		return subs
	}
	many := subscribers("/topic/many", 10)
	for i := range 20 {
		publish("/topic/many", many, i)
	}
	if w, _ := tb.B.DirectWritesForTest(); w != 0 {
		t.Errorf("%d direct writes for 20 messages to 10 subscribers each: want none, every one handed to the writers", w)
	}
	few := subscribers("/topic/few", 3)
	for i := range 20 {
		publish("/topic/few", few, i)
	}
	if w, _ := tb.B.DirectWritesForTest(); w == 0 {
		t.Error("no direct write for 20 messages to 3 subscribers each")
	}
}
