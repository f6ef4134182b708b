package appliance_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testbroker"
)

// testBroker is a real broker on 127.0.0.1:0 with a real SQLite journal in
// a temporary directory (internal/testbroker).
type testBroker = testbroker.Broker

// mustStartBroker starts a broker; mutate adjusts the test config.
func mustStartBroker(t testing.TB, mutate func(*appliance.Config)) *testBroker {
	t.Helper()
	return testbroker.Start(t, mutate)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func hdr(k, v string) stomp.Header { return stomp.Header{Key: k, Value: v} }

// recv waits for the next MESSAGE on sub.
func recv(t *testing.T, sub *client.Subscription) *stomp.Frame {
	t.Helper()
	select {
	case f, ok := <-sub.C():
		if !ok {
			t.Fatalf("subscription %s closed", sub.ID())
		}
		return f
	case <-time.After(5 * time.Second):
		t.Fatalf("no message on subscription %s within 5s", sub.ID())
	}
	return nil
}

// expectNone checks that nothing arrives on sub within d.
func expectNone(t *testing.T, sub *client.Subscription, d time.Duration) {
	t.Helper()
	select {
	case f, ok := <-sub.C():
		if ok {
			t.Fatalf("unexpected message %q (headers %v)", f.Body, f.Headers)
		}
	case <-time.After(d):
	}
}

func sendN(t *testing.T, c *client.Conn, dest string, n int, prefix string) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := c.SendReceipt(ctxT(t), dest, []byte(prefix+strconv.Itoa(i))); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// raw is a bare TCP connection for writing arbitrary bytes.
type raw struct {
	t  *testing.T
	c  net.Conn
	r  *stomp.Reader
	br *bufio.Reader
}

func dialRaw(t *testing.T, tb *testBroker) *raw {
	t.Helper()
	c, err := net.Dial("tcp", tb.Addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &raw{t: t, c: c, r: stomp.NewReader(c, stomp.Limits{})}
}

func (r *raw) write(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// frame reads the next non-heart-beat frame.
func (r *raw) frame() *stomp.Frame {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := r.r.ReadFrame()
		if err != nil {
			r.t.Fatalf("read frame: %v", err)
		}
		if f != nil {
			return f
		}
	}
}

// closed checks that the server closes the connection.
func (r *raw) closed() {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := r.r.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			r.t.Fatalf("connection still open after 5s")
		}
		if err != nil {
			return // reset also means closed
		}
		if f != nil {
			r.t.Fatalf("unexpected frame %s %v before close", f.Command, f.Headers)
		}
	}
}

func (r *raw) connect(version string) *stomp.Frame {
	r.t.Helper()
	r.write("CONNECT\naccept-version:" + version + "\nhost:test\n\n\x00")
	f := r.frame()
	if f.Command != stomp.CmdConnected {
		r.t.Fatalf("got %s %v, want CONNECTED", f.Command, f.Headers)
	}
	r.r.SetVersion(f.Get("version"))
	return f
}

func strconvFormat(n int64) string { return strconv.FormatInt(n, 10) }

// startWrapped starts a broker whose journal is wrapped (fault injection).
func startWrapped(t testing.TB, mutate func(*appliance.Config), wrap func(appliance.Journal) appliance.Journal, sinks ...appliance.TopicSink) *testBroker {
	t.Helper()
	return testbroker.StartWrapped(t, mutate, wrap, sinks...)
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ackNow sends cmd (ACK or NACK) for m with a receipt and waits for it.
func ackNow(t *testing.T, c *client.Conn, cmd string, m *stomp.Frame) {
	t.Helper()
	if _, err := c.Request(ctxT(t), stomp.NewFrame(cmd, "id", m.Get("ack"))); err != nil {
		t.Fatalf("%s %q: %v", cmd, m.Body, err)
	}
}

// wantMsg checks a queue MESSAGE's body and delivery count, and that
// redelivered:true is there exactly when the count is above 1.
func wantMsg(t *testing.T, m *stomp.Frame, body string, count int) {
	t.Helper()
	redelivered := ""
	if count > 1 {
		redelivered = "true"
	}
	if string(m.Body) != body || m.Get("delivery-count") != strconv.Itoa(count) || m.Get("redelivered") != redelivered {
		t.Fatalf("got %q delivery-count %q redelivered %q, want %q delivery-count %d redelivered %q",
			m.Body, m.Get("delivery-count"), m.Get("redelivered"), body, count, redelivered)
	}
}

// waitQueue polls queue name's view until ok holds (at most 5 s).
func waitQueue(t *testing.T, tb *testBroker, name, what string, ok func(appliance.QueueView) bool) appliance.QueueView {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, _ := tb.B.Queue(name)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s: got %+v after 5s, want %s", name, v, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
