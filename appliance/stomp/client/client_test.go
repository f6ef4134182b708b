package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// fakeServer accepts one connection and exposes what the client sends as a
// channel of frames; the test goroutine writes the answers. It only knows
// enough STOMP to test the client's own logic.
type fakeServer struct {
	ln     net.Listener
	nc     net.Conn
	frames chan *stomp.Frame
	ver    chan string
	beats  atomic.Int64
	ready  chan struct{}
	wg     sync.WaitGroup
}

func mustStartFake(t *testing.T) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &fakeServer{ln: ln, frames: make(chan *stomp.Frame, 1024), ver: make(chan string, 1), ready: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(s.frames)
		nc, err := ln.Accept()
		if err != nil {
			close(s.ready)
			return
		}
		s.nc = nc
		close(s.ready)
		r := stomp.NewReader(nc, stomp.Limits{})
		first := true
		for {
			f, err := r.ReadFrame()
			if err != nil {
				return
			}
			if f == nil {
				s.beats.Add(1)
				continue
			}
			s.frames <- f
			if first {
				first = false
				v, ok := <-s.ver
				if !ok {
					return
				}
				r.SetVersion(v)
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-s.ready
		if s.nc != nil {
			s.nc.Close()
		}
		select {
		case s.ver <- "":
		default:
		}
		s.wg.Wait()
	})
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

// next returns the next frame the client sent.
func (s *fakeServer) next(t *testing.T) *stomp.Frame {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			t.Fatalf("got connection end, want a frame")
		}
		return f
	case <-time.After(5 * time.Second):
		t.Fatalf("got nothing for 5s, want a frame")
	}
	return nil
}

func (s *fakeServer) write(t *testing.T, v string, f *stomp.Frame) {
	t.Helper()
	<-s.ready
	if _, err := s.nc.Write(stomp.Encode(f, v)); err != nil {
		t.Fatalf("fake server write: %v", err)
	}
}

// handshake answers the client's CONNECT with CONNECTED for version v.
func (s *fakeServer) handshake(t *testing.T, v string, kv ...string) *stomp.Frame {
	t.Helper()
	connect := s.next(t)
	if connect.Command != stomp.CmdConnect {
		t.Fatalf("first frame: got %s, want CONNECT", connect.Command)
	}
	s.ver <- v
	f := stomp.NewFrame(stomp.CmdConnected, append([]string{"version", v, "session", "sess-1", "server", "fake/1"}, kv...)...)
	if v == stomp.V10 {
		f.Headers.Del("version")
	}
	s.write(t, v, f)
	return connect
}

// mustDial dials s in the background, answers the handshake, and returns the
// connection, closed at cleanup.
func mustDial(t *testing.T, s *fakeServer, v string, opts client.Options, kv ...string) (*client.Conn, *stomp.Frame) {
	t.Helper()
	type res struct {
		c   *client.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := client.Dial(context.Background(), s.addr(), opts)
		ch <- res{c, err}
	}()
	connect := s.handshake(t, v, kv...)
	r := <-ch
	if r.err != nil {
		t.Fatalf("Dial: got %v, want nil", r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c, connect
}

func checkNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 64<<10)
			t.Fatalf("goroutines: got %d, want at most %d\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDial(t *testing.T) {
	t.Run("connected", func(t *testing.T) {
		s := mustStartFake(t)
		opts := client.Options{Login: "u", Passcode: "p:w", HeartBeat: [2]time.Duration{0, 0},
			Headers: []stomp.Header{{Key: "client-id", Value: "x"}}}
		c, connect := mustDial(t, s, stomp.V12, opts)
		for k, want := range map[string]string{"accept-version": "1.0,1.1,1.2", "host": "127.0.0.1", "login": "u", "passcode": "p:w", "client-id": "x"} {
			if got := connect.Get(k); got != want {
				t.Errorf("CONNECT %s: got %q, want %q", k, got, want)
			}
		}
		if _, ok := connect.Headers.Lookup("heart-beat"); ok {
			t.Errorf("CONNECT heart-beat: got %q, want none", connect.Get("heart-beat"))
		}
		if c.Version() != stomp.V12 || c.Session() != "sess-1" || c.Connected().Get("server") != "fake/1" {
			t.Errorf("got version %q session %q, want 1.2 sess-1", c.Version(), c.Session())
		}
	})
	t.Run("1.0 server", func(t *testing.T) {
		s := mustStartFake(t)
		c, _ := mustDial(t, s, stomp.V10, client.Options{Host: "vhost", AcceptVersion: "1.0"})
		if c.Version() != stomp.V10 {
			t.Errorf("Version: got %q, want 1.0", c.Version())
		}
	})
	t.Run("error", func(t *testing.T) {
		s := mustStartFake(t)
		go func() {
			<-s.frames
			s.ver <- ""
			<-s.ready
			s.nc.Write(stomp.Encode(stomp.NewFrame(stomp.CmdError, "message", "bad login"), ""))
		}()
		_, err := client.Dial(context.Background(), s.addr(), client.Options{})
		var se *client.ServerError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "bad login") {
			t.Fatalf("got %v, want *ServerError with message bad login", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		s := mustStartFake(t)
		start := time.Now()
		_, err := client.Dial(context.Background(), s.addr(), client.Options{DialTimeout: 100 * time.Millisecond})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Dial returned after %v, want about 100ms", d)
		}
	})
	t.Run("refused", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		_, err := client.Dial(context.Background(), addr, client.Options{})
		if err == nil || !strings.Contains(err.Error(), "dial tcp "+addr) {
			t.Fatalf("got %v, want a dial error naming %s", err, addr)
		}
	})
}

func TestConn_Receipts(t *testing.T) {
	before := runtime.NumGoroutine()
	s := mustStartFake(t)
	c, _ := mustDial(t, s, stomp.V12, client.Options{})

	const n = 50
	results := make([]<-chan client.Result, n)
	for i := range n {
		ch, err := c.SendAsync("/queue/a", []byte(fmt.Sprint(i)), stomp.Header{Key: "n", Value: fmt.Sprint(i)})
		if err != nil {
			t.Fatalf("SendAsync %d: %v", i, err)
		}
		results[i] = ch
	}
	receipts := make([]string, n)
	for i := range n {
		f := s.next(t)
		if f.Command != stomp.CmdSend || f.Get("n") != fmt.Sprint(i) || string(f.Body) != fmt.Sprint(i) {
			t.Fatalf("frame %d: got %s n=%s body %q, want SEND in order", i, f.Command, f.Get("n"), f.Body)
		}
		receipts[i] = f.Get("receipt")
	}
	// answer in reverse order: each result must get its own receipt
	for i := n - 1; i >= 0; i-- {
		s.write(t, stomp.V12, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", receipts[i], "n", fmt.Sprint(i)))
	}
	for i, ch := range results {
		r := <-ch
		if r.Err != nil || r.Receipt.Get("n") != fmt.Sprint(i) {
			t.Fatalf("result %d: got %v %v, want receipt n=%d", i, r.Receipt, r.Err, i)
		}
	}

	// Request with a caller's receipt header: replaced by the client's own
	done := make(chan error, 1)
	go func() {
		_, err := c.Request(context.Background(), stomp.NewFrame(stomp.CmdBegin, "transaction", "t", "receipt", "mine"))
		done <- err
	}()
	f := s.next(t)
	if f.Get("receipt") == "mine" || len(f.Headers) != 2 {
		t.Fatalf("BEGIN headers: got %v, want transaction and one generated receipt", f.Headers)
	}
	s.write(t, stomp.V12, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", f.Get("receipt")))
	if err := <-done; err != nil {
		t.Fatalf("Request: got %v, want nil", err)
	}

	// a timed-out request is forgotten; a late receipt does no harm
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := c.SendReceipt(ctx, "/queue/a", nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SendReceipt: got %v, want context.DeadlineExceeded", err)
	}
	late := s.next(t)
	s.write(t, stomp.V12, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", late.Get("receipt")))

	// an ERROR naming a receipt fails that request only
	go func() {
		_, err := c.SendReceipt(context.Background(), "/queue/full", []byte("x"))
		done <- err
	}()
	f = s.next(t)
	s.write(t, stomp.V12, &stomp.Frame{Command: stomp.CmdError, Headers: stomp.Headers{{Key: "receipt-id", Value: f.Get("receipt")}, {Key: "message", Value: "queue full"}}, Body: []byte("try later")})
	err = <-done
	var se *client.ServerError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "queue full: try later") {
		t.Fatalf("got %v, want *ServerError \"queue full: try later\"", err)
	}
	select {
	case ef := <-c.Errors():
		if ef.Get("message") != "queue full" {
			t.Errorf("Errors(): got %q, want queue full", ef.Get("message"))
		}
	case <-time.After(time.Second):
		t.Errorf("Errors(): got nothing, want the ERROR frame")
	}

	// the connection ends after the ERROR: outstanding requests fail with it
	ch, err := c.SendAsync("/queue/a", nil)
	if err != nil {
		t.Fatalf("SendAsync: %v", err)
	}
	s.next(t)
	s.nc.Close()
	r := <-ch
	if !errors.As(r.Err, &se) {
		t.Fatalf("pending after ERROR and close: got %v, want *ServerError", r.Err)
	}
	<-c.Done()
	if !errors.As(c.Err(), &se) {
		t.Fatalf("Err: got %v, want *ServerError", c.Err())
	}
	if err := c.Send("/queue/a", nil); !errors.As(err, &se) {
		t.Fatalf("Send after end: got %v, want *ServerError", err)
	}
	c.Close()
	s.ln.Close()
	checkNoLeak(t, before+2) // the fake server's goroutine ends at cleanup
}

func TestConn_AckForms(t *testing.T) {
	msg := stomp.NewFrame(stomp.CmdMessage, "subscription", "sub-1", "message-id", "m:7", "ack", "a:7:1")
	tests := []struct {
		version string
		cmd     string
		want    stomp.Headers
	}{
		{stomp.V12, stomp.CmdAck, stomp.Headers{{Key: "id", Value: "a:7:1"}, {Key: "transaction", Value: "t"}}},
		{stomp.V12, stomp.CmdNack, stomp.Headers{{Key: "id", Value: "a:7:1"}, {Key: "transaction", Value: "t"}}},
		{stomp.V11, stomp.CmdAck, stomp.Headers{{Key: "message-id", Value: "m:7"}, {Key: "subscription", Value: "sub-1"}, {Key: "transaction", Value: "t"}}},
		{stomp.V11, stomp.CmdNack, stomp.Headers{{Key: "message-id", Value: "m:7"}, {Key: "subscription", Value: "sub-1"}, {Key: "transaction", Value: "t"}}},
		{stomp.V10, stomp.CmdAck, stomp.Headers{{Key: "message-id", Value: "m:7"}, {Key: "subscription", Value: "sub-1"}, {Key: "transaction", Value: "t"}}},
	}
	for _, tt := range tests {
		t.Run(tt.version+"/"+tt.cmd, func(t *testing.T) {
			s := mustStartFake(t)
			c, _ := mustDial(t, s, tt.version, client.Options{})
			ack := c.Ack
			if tt.cmd == stomp.CmdNack {
				ack = c.Nack
			}
			if err := ack(msg, stomp.Header{Key: "transaction", Value: "t"}); err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			f := s.next(t)
			if f.Command != tt.cmd || fmt.Sprint(f.Headers) != fmt.Sprint(tt.want) {
				t.Errorf("got %s %v, want %s %v", f.Command, f.Headers, tt.cmd, tt.want)
			}
		})
	}
	t.Run("1.0/NACK", func(t *testing.T) {
		s := mustStartFake(t)
		c, _ := mustDial(t, s, stomp.V10, client.Options{})
		if err := c.Nack(msg); err == nil {
			t.Errorf("got nil, want an error: NACK does not exist in 1.0")
		}
	})
	t.Run("1.2/no ack header", func(t *testing.T) {
		s := mustStartFake(t)
		c, _ := mustDial(t, s, stomp.V12, client.Options{})
		if err := c.Ack(stomp.NewFrame(stomp.CmdMessage, "message-id", "1")); !errors.Is(err, client.ErrNoAck) {
			t.Errorf("got %v, want ErrNoAck", err)
		}
	})
}

func TestConn_Subscriptions(t *testing.T) {
	before := runtime.NumGoroutine()
	s := mustStartFake(t)
	c, _ := mustDial(t, s, stomp.V12, client.Options{SubscriptionBuffer: 2})
	a, err := c.Subscribe("/queue/a", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Subscribe("/topic/b", "client-individual", stomp.Header{Key: "prefetch-count", Value: "5"})
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := s.next(t), s.next(t)
	if fa.Get("id") != a.ID() || fa.Get("ack") != "auto" || fa.Get("destination") != "/queue/a" {
		t.Errorf("SUBSCRIBE a: got %v", fa.Headers)
	}
	if fb.Get("id") != b.ID() || fb.Get("ack") != "client-individual" || fb.Get("prefetch-count") != "5" || a.ID() == b.ID() {
		t.Errorf("SUBSCRIBE b: got %v", fb.Headers)
	}

	// routed by the subscription header; 1.2 headers are unescaped
	s.write(t, stomp.V12, stomp.NewFrame(stomp.CmdMessage, "subscription", b.ID(), "k", "x:y\nz"))
	s.write(t, stomp.V12, stomp.NewFrame(stomp.CmdMessage, "subscription", a.ID(), "k", "1"))
	if m := <-a.C(); m.Get("k") != "1" {
		t.Errorf("a got k=%q, want 1", m.Get("k"))
	}
	if m := <-b.C(); m.Get("k") != "x:y\nz" {
		t.Errorf("b got k=%q, want %q", m.Get("k"), "x:y\nz")
	}

	// a full channel makes the reader wait, not drop or reorder
	for i := range 5 {
		s.write(t, stomp.V12, &stomp.Frame{Command: stomp.CmdMessage, Headers: stomp.Headers{{Key: "subscription", Value: a.ID()}}, Body: []byte(fmt.Sprint(i))})
	}
	waitFull(t, a)
	for i := range 5 {
		if m := <-a.C(); string(m.Body) != fmt.Sprint(i) {
			t.Errorf("message %d: got %q", i, m.Body)
		}
	}

	// Unsubscribe closes C at once even while the reader waits on it
	for range 4 {
		s.write(t, stomp.V12, stomp.NewFrame(stomp.CmdMessage, "subscription", b.ID()))
	}
	waitFull(t, b)
	done := make(chan error, 1)
	go func() { done <- b.Unsubscribe(context.Background()) }()
	u := s.next(t)
	if u.Command != stomp.CmdUnsubscribe || u.Get("id") != b.ID() {
		t.Fatalf("got %s %v, want UNSUBSCRIBE id=%s", u.Command, u.Headers, b.ID())
	}
	s.write(t, stomp.V12, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", u.Get("receipt")))
	if err := <-done; err != nil {
		t.Fatalf("Unsubscribe: got %v, want nil", err)
	}
	for range b.C() {
	}

	// the end of the connection closes the remaining subscriptions
	s.nc.Close()
	<-c.Done()
	if _, ok := <-a.C(); ok {
		t.Errorf("a.C(): got a message, want closed")
	}
	if !errors.Is(c.Err(), client.ErrConnectionLost) {
		t.Errorf("Err: got %v, want ErrConnectionLost", c.Err())
	}
	c.Close()
	checkNoLeak(t, before+2)
}

// waitFull waits until sub's channel is full: the reader, with more
// MESSAGEs for it, now waits on it.
func waitFull(t *testing.T, sub *client.Subscription) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(sub.C()) < cap(sub.C()); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("subscription %s: got %d of %d buffered after 5s, want it full", sub.ID(), len(sub.C()), cap(sub.C()))
		}
	}
}

func TestConn_HeartBeats(t *testing.T) {
	t.Run("client sends", func(t *testing.T) {
		s := mustStartFake(t)
		c, connect := mustDial(t, s, stomp.V12, client.Options{HeartBeat: [2]time.Duration{20 * time.Millisecond, 0}}, "heart-beat", "0,20")
		if got := connect.Get("heart-beat"); got != "20,0" {
			t.Errorf("CONNECT heart-beat: got %q, want 20,0", got)
		}
		// Not synchronisation: the window the beats are counted in.
		time.Sleep(200 * time.Millisecond)
		if n := s.beats.Load(); n < 4 {
			t.Errorf("heart-beats in 200ms at 20ms: got %d, want at least 4", n)
		}
		if c.Err() != nil {
			t.Errorf("Err: got %v, want nil", c.Err())
		}
	})
	t.Run("silent server is dead", func(t *testing.T) {
		s := mustStartFake(t)
		c, _ := mustDial(t, s, stomp.V12, client.Options{HeartBeat: [2]time.Duration{0, 30 * time.Millisecond}}, "heart-beat", "30,0")
		select {
		case <-c.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("connection still up after 2s of silence, want it dead after ~60ms")
		}
		if !errors.Is(c.Err(), client.ErrHeartbeatTimeout) {
			t.Errorf("Err: got %v, want ErrHeartbeatTimeout", c.Err())
		}
	})
	t.Run("beating server is alive", func(t *testing.T) {
		s := mustStartFake(t)
		c, _ := mustDial(t, s, stomp.V12, client.Options{HeartBeat: [2]time.Duration{0, 30 * time.Millisecond}}, "heart-beat", "30,0")
		for range 10 {
			// Not synchronisation: the server's beat, every 20ms.
			time.Sleep(20 * time.Millisecond)
			s.nc.Write([]byte("\n"))
		}
		if c.Err() != nil {
			t.Errorf("Err: got %v, want nil", c.Err())
		}
	})
	t.Run("not negotiated", func(t *testing.T) {
		s := mustStartFake(t)
		c, _ := mustDial(t, s, stomp.V12, client.Options{HeartBeat: [2]time.Duration{10 * time.Millisecond, 10 * time.Millisecond}}, "heart-beat", "0,0")
		// Proves absence: no heart-beat within 100ms (ten intervals).
		time.Sleep(100 * time.Millisecond)
		if n := s.beats.Load(); n != 0 || c.Err() != nil {
			t.Errorf("got %d heart-beats and Err %v, want none", n, c.Err())
		}
	})
}

func TestConn_Disconnect(t *testing.T) {
	before := runtime.NumGoroutine()
	s := mustStartFake(t)
	c, _ := mustDial(t, s, stomp.V11, client.Options{HeartBeat: [2]time.Duration{time.Second, time.Second}}, "heart-beat", "1000,1000")
	done := make(chan error, 1)
	go func() { done <- c.Disconnect(context.Background()) }()
	f := s.next(t)
	if f.Command != stomp.CmdDisconnect || f.Get("receipt") == "" {
		t.Fatalf("got %s %v, want DISCONNECT with receipt", f.Command, f.Headers)
	}
	s.write(t, stomp.V11, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", f.Get("receipt")))
	if err := <-done; err != nil {
		t.Fatalf("Disconnect: got %v, want nil", err)
	}
	if !errors.Is(c.Err(), client.ErrClosed) {
		t.Errorf("Err: got %v, want ErrClosed", c.Err())
	}
	if err := c.Send("/q", nil); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Send after Disconnect: got %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
	checkNoLeak(t, before+2)
}

func TestConn_ConcurrentSends(t *testing.T) {
	s := mustStartFake(t)
	c, _ := mustDial(t, s, stomp.V12, client.Options{})
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := c.Send("/queue/a", []byte(fmt.Sprintf("%d-%d", w, i))); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	next := make([]int, writers)
	for range writers * each {
		f := s.next(t)
		var w, i int
		if _, err := fmt.Sscanf(string(f.Body), "%d-%d", &w, &i); err != nil || i != next[w] {
			t.Fatalf("got body %q, want %d-%d", f.Body, w, next[w])
		}
		next[w]++
	}
}

// A server that answers with ERROR and closes (as Herald does for a refused
// SEND without a receipt) must be reported as that ERROR by whatever the
// client writes next, however the write races the reader seeing the close:
// `herald send` showed "write DISCONNECT: use of closed network connection"
// instead of the server's reason.
func TestConn_WriteAfterServerErrorReportsTheError(t *testing.T) {
	for i := 0; i < 200; i++ {
		s := mustStartFake(t)
		c, _ := mustDial(t, s, stomp.V12, client.Options{})
		s.write(t, stomp.V12, stomp.NewFrame(stomp.CmdError, "message", "invalid destination"))
		s.nc.Close()
		for j := 0; j < i%7; j++ {
			runtime.Gosched()
		}
		err := c.Disconnect(context.Background())
		var se *client.ServerError
		if !errors.As(err, &se) || se.Frame.Get("message") != "invalid destination" {
			t.Fatalf("run %d: Disconnect after the server's ERROR: got %v, want the ServerError", i, err)
		}
		c.Close()
	}
}

// TestConn_SubscribeFunc: the function gets each MESSAGE of its
// subscription in order on the reading goroutine, more telling whether
// another whole frame is already buffered (three MESSAGEs in one write:
// true, true, false); acknowledging with AckBuffered and flushing when more
// is false sends every ACK; C is closed when the subscription ends.
func TestConn_SubscribeFunc(t *testing.T) {
	s := mustStartFake(t)
	c, _ := mustDial(t, s, stomp.V12, client.Options{})
	type got struct {
		body string
		more bool
	}
	gotc := make(chan got, 16)
	sub, err := c.SubscribeFunc("/queue/f", "client-individual", func(f *stomp.Frame, more bool) {
		gotc <- got{string(f.Body), more}
		if err := c.AckBuffered(f); err != nil {
			t.Errorf("AckBuffered: %v", err)
		}
		if !more {
			if err := c.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if f := s.next(t); f.Command != stomp.CmdSubscribe || f.Get("id") != sub.ID() {
		t.Fatalf("got %s %v, want the SUBSCRIBE", f.Command, f.Headers)
	}
	var burst []byte
	for i := range 3 {
		m := stomp.NewFrame(stomp.CmdMessage, "subscription", sub.ID(), "message-id", fmt.Sprint(i), "ack", fmt.Sprint("a", i), "destination", "/queue/f")
		m.Body = []byte(fmt.Sprint("m", i))
		burst = append(burst, stomp.Encode(m, stomp.V12)...)
	}
	<-s.ready
	if _, err := s.nc.Write(burst); err != nil {
		t.Fatal(err)
	}
	for i, more := range []bool{true, true, false} {
		select {
		case g := <-gotc:
			if g.body != fmt.Sprint("m", i) || g.more != more {
				t.Fatalf("call %d: got %q more=%v, want %q more=%v", i, g.body, g.more, fmt.Sprint("m", i), more)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("call %d: the function was not called in 5s", i)
		}
	}
	for i := range 3 {
		if f := s.next(t); f.Command != stomp.CmdAck || f.Get("id") != fmt.Sprint("a", i) {
			t.Fatalf("ACK %d: got %s %v", i, f.Command, f.Headers)
		}
	}
	select {
	case f, ok := <-sub.C():
		t.Fatalf("C gave %v (open %v) while the subscription runs, want nothing", f, ok)
	default:
	}
	c.Close()
	select {
	case _, ok := <-sub.C():
		if ok {
			t.Fatal("C received a frame, want it closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("C not closed 5s after the connection ended")
	}
}

// TestConn_AckBuffered: ACKs made with AckBuffered stay in the buffer until
// a Flush writes them, in order, each naming its MESSAGE's ack header; a
// MESSAGE without one is refused with ErrNoAck and nothing is buffered.
func TestConn_AckBuffered(t *testing.T) {
	s := mustStartFake(t)
	c, _ := mustDial(t, s, stomp.V12, client.Options{})
	// Ack ids as a broker may make them: ones that need escaping too.
	ids := []string{"a0", "a:1", "a\\2\n", "a3"}
	for _, id := range ids {
		msg := stomp.NewFrame(stomp.CmdMessage, "ack", id, "subscription", "0")
		if err := c.AckBuffered(msg); err != nil {
			t.Fatalf("AckBuffered: %v", err)
		}
	}
	// With headers of its own (a transaction), the general encoder.
	if err := c.AckBuffered(stomp.NewFrame(stomp.CmdMessage, "ack", "a4"), stomp.Header{Key: "transaction", Value: "t:1"}); err != nil {
		t.Fatalf("AckBuffered in a transaction: %v", err)
	}
	if err := c.AckBuffered(stomp.NewFrame(stomp.CmdMessage, "subscription", "0")); !errors.Is(err, client.ErrNoAck) {
		t.Fatalf("AckBuffered of a MESSAGE without ack: %v, want ErrNoAck", err)
	}
	// An id no STOMP version can carry (a NUL) is refused, not sent as an
	// ACK without its id, on both paths.
	if err := c.AckBuffered(stomp.NewFrame(stomp.CmdMessage, "ack", "a\x00b")); err == nil || !strings.Contains(err.Error(), "cannot be written") {
		t.Fatalf("AckBuffered of ack id with NUL: %v, want an error saying it cannot be written", err)
	}
	if err := c.AckBuffered(stomp.NewFrame(stomp.CmdMessage, "ack", "a\x00b"), stomp.Header{Key: "transaction", Value: "t"}); err == nil || !strings.Contains(err.Error(), "cannot be written") {
		t.Fatalf("AckBuffered in a transaction of ack id with NUL: %v, want an error saying it cannot be written", err)
	}
	select {
	case f := <-s.frames:
		t.Fatalf("got %s %v before Flush, want nothing written yet", f.Command, f.Headers)
	case <-time.After(200 * time.Millisecond):
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i, id := range ids {
		if f := s.next(t); f.Command != stomp.CmdAck || f.Get("id") != id || len(f.Headers) != 1 || len(f.Body) != 0 {
			t.Fatalf("frame %d: got %s %q body %q, want ACK with id:%q only", i, f.Command, f.Headers, f.Body, id)
		}
	}
	if f := s.next(t); f.Command != stomp.CmdAck || f.Get("id") != "a4" || f.Get("transaction") != "t:1" {
		t.Fatalf("frame 4: got %s %q, want ACK id:a4 transaction:t:1", f.Command, f.Headers)
	}
}

// TestConn_SendBuffered: frames sent with SendBuffered stay in the connection's buffer until a
// Flush (or a Send) writes them, in order with what follows; a burst costs one write.
func TestConn_SendBuffered(t *testing.T) {
	s := mustStartFake(t)
	c, _ := mustDial(t, s, stomp.V12, client.Options{})
	for i := range 5 {
		if err := c.SendBuffered("/topic/a", []byte(fmt.Sprint(i))); err != nil {
			t.Fatalf("SendBuffered: %v", err)
		}
	}
	select {
	case f := <-s.frames:
		t.Fatalf("got %s %q before Flush, want nothing written yet", f.Command, f.Body)
	case <-time.After(200 * time.Millisecond):
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i := range 5 {
		if f := s.next(t); string(f.Body) != fmt.Sprint(i) {
			t.Fatalf("frame %d: got body %q", i, f.Body)
		}
	}
	if err := c.SendBuffered("/topic/a", []byte("5")); err != nil {
		t.Fatal(err)
	}
	if err := c.Send("/topic/a", []byte("6")); err != nil { // Send writes what was buffered too
		t.Fatal(err)
	}
	for _, want := range []string{"5", "6"} {
		if f := s.next(t); string(f.Body) != want {
			t.Fatalf("got body %q, want %q", f.Body, want)
		}
	}
}
