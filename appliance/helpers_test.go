package appliance_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/journal"
)

// testBroker is a real broker on 127.0.0.1:0 with a real SQLite journal in
// a temporary directory.
type testBroker struct {
	t     *testing.T
	dir   string
	cfg   appliance.Config
	store *journal.Store
	b     *appliance.Broker
	addr  string
}

func testConfig(dir string) appliance.Config {
	cfg := appliance.DefaultConfig()
	cfg.DataDir = dir
	cfg.Stomp.Listen = "127.0.0.1:0"
	cfg.Journal.Sync = "normal" // tests need not fsync; crash tests use full
	cfg.Journal.MinFreeBytes = 0
	cfg.Queues.RedeliveryMin = appliance.Duration{Duration: 20 * time.Millisecond}
	cfg.Queues.RedeliveryMax = appliance.Duration{Duration: 200 * time.Millisecond}
	return cfg
}

// mustStartBroker starts a broker; mutate adjusts the test config.
func mustStartBroker(t *testing.T, mutate func(*appliance.Config)) *testBroker {
	t.Helper()
	cfg := testConfig(t.TempDir())
	if mutate != nil {
		mutate(&cfg)
	}
	tb := &testBroker{t: t, dir: cfg.DataDir, cfg: cfg}
	tb.start()
	t.Cleanup(tb.stop)
	return tb
}

func (tb *testBroker) start() {
	t := tb.t
	t.Helper()
	if err := tb.cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	tb.store = journal.New(journal.Config{
		Path:               filepath.Join(tb.dir, "herald.db"),
		Sync:               tb.cfg.Journal.Sync,
		DedupWindow:        tb.cfg.Queues.DedupWindow.Duration,
		CheckpointInterval: 50 * time.Millisecond,
	})
	ctx := context.Background()
	if err := tb.store.Open(ctx); err != nil {
		t.Fatalf("open journal: %v", err)
	}
	tb.b = appliance.New(appliance.Options{Config: tb.cfg, Journal: tb.store, Version: "test", Logger: testLogger(t)})
	if err := tb.b.Open(ctx); err != nil {
		t.Fatalf("open broker: %v", err)
	}
	addr, err := tb.b.Listen(tb.cfg.Stomp.Listen)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	tb.addr = addr.String()
}

// stop closes broker and journal; idempotent.
func (tb *testBroker) stop() {
	if tb.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tb.b.Close(ctx); err != nil {
		tb.t.Errorf("close broker: %v", err)
	}
	if err := tb.store.Close(ctx); err != nil {
		tb.t.Errorf("close journal: %v", err)
	}
	tb.b = nil
}

// restart stops and starts the broker on the same data directory.
func (tb *testBroker) restart() {
	tb.stop()
	tb.start()
}

func (tb *testBroker) dial(t *testing.T, opts ...func(*client.Options)) *client.Conn {
	t.Helper()
	o := client.Options{DialTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	c, err := client.Dial(context.Background(), tb.addr, o)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
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

func (tb *testBroker) raw(t *testing.T) *raw {
	t.Helper()
	c, err := net.Dial("tcp", tb.addr)
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

// testLogger logs to the test's output when HERALD_TEST_LOG=1.
func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("HERALD_TEST_LOG") != "1" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
