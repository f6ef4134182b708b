// Package testbroker starts a real Herald broker for tests: a real SQLite
// journal in a temporary directory and a STOMP listener on 127.0.0.1:0.
// Tests in several packages share it instead of each wiring their own.
package testbroker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/journal"
)

// Broker is a running broker and its journal.
type Broker struct {
	T     testing.TB
	Dir   string
	Cfg   appliance.Config
	Store *journal.Store
	B     *appliance.Broker
	Addr  string // host:port of the STOMP listener

	// mu guards B against goroutines other than the test's (a bridge's
	// queue-depth probe) while Restart replaces it; see Queue.
	mu sync.Mutex

	hook  func(ops int, d time.Duration)
	tune  func(*journal.Config)
	wrap  func(appliance.Journal) appliance.Journal
	sinks []appliance.TopicSink
}

// Config returns the test defaults for data directory dir: listener on
// 127.0.0.1:0, sync "normal" (tests that need fsyncs set "full"), no disk
// floor, and short redelivery back-off.
func Config(dir string) appliance.Config {
	cfg := appliance.DefaultConfig()
	cfg.DataDir = dir
	cfg.Stomp.Listen = "127.0.0.1:0"
	cfg.Journal.Sync = "normal"
	cfg.Journal.MinFreeBytes = 0
	cfg.Queues.RedeliveryMin = appliance.Duration{Duration: 20 * time.Millisecond}
	cfg.Queues.RedeliveryMax = appliance.Duration{Duration: 200 * time.Millisecond}
	return cfg
}

// Start starts a broker on a new temporary directory; mutate adjusts the
// config first. It stops with the test.
func Start(t testing.TB, mutate func(*appliance.Config)) *Broker {
	t.Helper()
	return StartWith(t, mutate, nil)
}

// StartWrapped is Start with the journal seen by the broker wrapped by wrap
// (fault injection); the real journal stays in Store.
// sinks are registered before the listener starts.
func StartWrapped(t testing.TB, mutate func(*appliance.Config), wrap func(appliance.Journal) appliance.Journal, sinks ...appliance.TopicSink) *Broker {
	t.Helper()
	return launch(t, mutate, &Broker{wrap: wrap, sinks: sinks})
}

// StartTuned is StartWrapped (wrap may be nil) with the journal's own
// settings (those heraldd does not take from its config) adjusted by tune,
// at every start.
func StartTuned(t testing.TB, mutate func(*appliance.Config), tune func(*journal.Config), wrap func(appliance.Journal) appliance.Journal) *Broker {
	t.Helper()
	return launch(t, mutate, &Broker{tune: tune, wrap: wrap})
}

// StartWith is Start with a journal commit hook (metrics tests).
func StartWith(t testing.TB, mutate func(*appliance.Config), commitHook func(ops int, d time.Duration)) *Broker {
	t.Helper()
	return launch(t, mutate, &Broker{hook: commitHook})
}

// Options are a test broker's journal options, all of which StartOptions
// takes: Tune adjusts the journal's own settings at every start, Wrap
// wraps the journal the broker sees, Hook is the journal's commit hook,
// Sinks are registered before the listener starts.
type Options struct {
	Tune  func(*journal.Config)
	Wrap  func(appliance.Journal) appliance.Journal
	Hook  func(ops int, d time.Duration)
	Sinks []appliance.TopicSink
}

// StartOptions is Start with the journal options o.
func StartOptions(t testing.TB, mutate func(*appliance.Config), o Options) *Broker {
	t.Helper()
	return launch(t, mutate, &Broker{tune: o.Tune, wrap: o.Wrap, hook: o.Hook, sinks: o.Sinks})
}

// launch starts b (its journal options set) on a new temporary directory
// with the test config adjusted by mutate; it stops with the test.
func launch(t testing.TB, mutate func(*appliance.Config), b *Broker) *Broker {
	t.Helper()
	cfg := Config(t.TempDir())
	if mutate != nil {
		mutate(&cfg)
	}
	b.T, b.Dir, b.Cfg = t, cfg.DataDir, cfg
	b.start()
	t.Cleanup(b.Stop)
	return b
}

func (b *Broker) start() {
	t := b.T
	t.Helper()
	if err := b.Cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	jc := journal.Config{
		Path:               filepath.Join(b.Dir, "herald.db"),
		Sync:               b.Cfg.Journal.Sync,
		DedupWindow:        b.Cfg.Queues.DedupWindow.Duration,
		CheckpointInterval: 50 * time.Millisecond,
		WALLimit:           b.Cfg.Journal.WALLimitBytes, // as heraldd
		MmapSize:           b.Cfg.Journal.MmapBytes,     // as heraldd
	}
	if b.tune != nil {
		b.tune(&jc)
	}
	b.Store = journal.New(jc)
	if b.hook != nil {
		b.Store.SetCommitHook(b.hook)
	}
	ctx := context.Background()
	if err := b.Store.Open(ctx); err != nil {
		t.Fatalf("open journal: %v", err)
	}
	var j appliance.Journal = b.Store
	if b.wrap != nil {
		j = b.wrap(j)
	}
	nb := appliance.New(appliance.Options{Config: b.Cfg, Journal: j, Version: "test", Logger: logger()})
	b.mu.Lock()
	b.B = nb
	b.mu.Unlock()
	for _, s := range b.sinks {
		b.B.AddTopicSink(s)
	}
	if err := b.B.Open(ctx); err != nil {
		t.Fatalf("open broker: %v", err)
	}
	addr, err := b.B.Listen(b.Cfg.Stomp.Listen)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	b.Addr = addr.String()
}

// Stop closes broker and journal; idempotent.
func (b *Broker) Stop() {
	if b.B == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.B.Close(ctx); err != nil {
		b.T.Errorf("close broker: %v", err)
	}
	if err := b.Store.Close(ctx); err != nil {
		b.T.Errorf("close journal: %v\n%s", err, stuckStacks())
	}
	b.mu.Lock()
	b.B = nil
	b.mu.Unlock()
}

// Queue is B.Queue for goroutines other than the test's: safe while the
// test restarts the broker, and not found while it is stopped.
func (b *Broker) Queue(name string) (appliance.QueueView, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.B == nil {
		return appliance.QueueView{}, false
	}
	return b.B.Queue(name)
}

// Restart stops and starts the broker on the same data directory (on a new
// port).
func (b *Broker) Restart() {
	b.T.Helper()
	b.Stop()
	b.start()
}

// Dial connects Herald's Go client; the connection closes with the test.
func (b *Broker) Dial(t testing.TB, opts ...func(*client.Options)) *client.Conn {
	t.Helper()
	o := client.Options{DialTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	c, err := client.Dial(context.Background(), b.Addr, o)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// logger logs to stderr when HERALD_TEST_LOG=1.
func logger() *slog.Logger {
	if os.Getenv("HERALD_TEST_LOG") != "1" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// stuckStacks is the stacks of the goroutines in the journal, SQLite or
// the FUSE server, for a close that did not finish in time: where it
// waits (a rare CI failure had the journal's close time out after an I/O
// error stop, not reproduced since).
func stuckStacks() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "herald/journal") || strings.Contains(g, "go-sqlite3") || strings.Contains(g, "go-fuse") {
			out = append(out, g)
		}
	}
	s := strings.Join(out, "\n\n")
	if len(s) > 64<<10 {
		s = s[:64<<10] + "\n..."
	}
	return "goroutines in the journal, SQLite or FUSE:\n" + s
}
