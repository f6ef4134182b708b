// Package admintest runs a real Herald daemon in-process for tests of the
// admin API and the herald CLI: a broker on 127.0.0.1:0 with a SQLite
// journal in a temporary directory, the admin API on a socket in that
// directory and metrics on 127.0.0.1:0.
package admintest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testbroker"
	"github.com/herald-mq/herald/journal"
)

// Daemon is a running broker, journal and admin server.
type Daemon struct {
	Dir     string
	Socket  string // admin socket
	STOMP   string // STOMP address
	Metrics string // metrics address
	Config  appliance.Config
	Broker  *appliance.Broker
	Store   *journal.Store
	Server  *admin.Server
	Level   *slog.LevelVar

	tb        *testbroker.Broker
	metrics   *admin.Metrics
	opTimeout time.Duration
}

// Start starts a daemon; mutate adjusts its config. Cleanup stops it.
func Start(t testing.TB, mutate func(*appliance.Config)) *Daemon {
	t.Helper()
	return StartOptions(t, mutate, Options{})
}

// Options are what tests of long or failing operations adjust beyond the
// config: the admin server's operation timeout (0: its default) and the
// journal (its Hook is the daemon's metrics').
type Options struct {
	OpTimeout time.Duration
	Journal   testbroker.Options
}

// StartOptions is Start with the options o.
func StartOptions(t testing.TB, mutate func(*appliance.Config), o Options) *Daemon {
	t.Helper()
	metrics := admin.NewMetrics("test")
	o.Journal.Hook = metrics.ObserveCommit
	tb := testbroker.StartOptions(t, func(c *appliance.Config) {
		c.Queues.RedeliveryMin = appliance.Duration{Duration: 10 * time.Millisecond}
		c.Queues.RedeliveryMax = appliance.Duration{Duration: 50 * time.Millisecond}
		c.Admin.Socket = filepath.Join(c.DataDir, "admin.sock")
		c.Admin.MetricsListen = "127.0.0.1:0"
		if mutate != nil {
			mutate(c)
		}
	}, o.Journal)
	cfg := tb.Cfg
	d := &Daemon{Dir: tb.Dir, Socket: cfg.Admin.Socket, Config: cfg, Level: new(slog.LevelVar), tb: tb, metrics: metrics, opTimeout: o.OpTimeout}
	d.serve(t)
	// Runs before testbroker's own cleanup: the admin server goes first.
	t.Cleanup(d.stop)
	return d
}

// serve starts the admin server on the current broker and journal.
func (d *Daemon) serve(t testing.TB) {
	t.Helper()
	d.STOMP, d.Broker, d.Store = d.tb.Addr, d.tb.B, d.tb.Store
	d.Server = admin.New(admin.Options{
		Socket:        d.Config.Admin.Socket,
		MetricsListen: d.Config.Admin.MetricsListen,
		Broker:        d.Broker,
		Journal:       StoreJournal{d.Store},
		Config:        d.Config,
		Level:         d.Level,
		Version:       "test",
		Metrics:       d.metrics,
		OpTimeout:     d.opTimeout,
	})
	if err := d.Server.Start(context.Background()); err != nil {
		t.Fatalf("admin start: %v", err)
	}
	d.Metrics = d.Server.MetricsAddr()
}

// Restart is what a restart of heraldd does to the API's clients: the
// admin server and the broker stop (operations running in the broker stop
// with it), then the broker starts again on the same data directory and a
// new admin server on the same socket. STOMP clients must dial again (the
// address may change).
func (d *Daemon) Restart(t testing.TB) {
	t.Helper()
	d.stop()
	d.tb.Restart()
	d.serve(t)
}

func (d *Daemon) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.Server.Close(ctx)
}

// Dial connects a STOMP client; Cleanup closes it.
func (d *Daemon) Dial(t testing.TB) *client.Conn {
	t.Helper()
	c, err := client.Dial(context.Background(), d.STOMP, client.Options{DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Send sends n messages to dest with receipts, bodies prefix0, prefix1, ...
func (d *Daemon) Send(t testing.TB, c *client.Conn, dest string, n int, prefix string) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.SendReceipt(ctx, dest, []byte(prefix+itoa(i)))
		cancel()
		if err != nil {
			t.Fatalf("send %d to %s: %v", i, dest, err)
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}

// StoreJournal adapts *journal.Store to admin.Journal (as heraldd does).
type StoreJournal struct{ S *journal.Store }

// Status implements admin.Journal.
func (a StoreJournal) Status() admin.JournalStatus {
	st := a.S.Stats()
	db, wal := a.S.Sizes()
	js := admin.JournalStatus{
		Path: a.S.Path(), DBBytes: db, WALBytes: wal, Commits: st.Commits, Ops: st.Ops,
		FailedCommits: st.FailedCommits, InlineCommits: st.Inline, Checkpoints: st.Checkpoints, WALBackstops: st.WALBackstops, LastBatchOps: st.LastBatchOps,
		ReadErrors:        st.ReadErrors,
		LastCommitSeconds: st.LastCommitTime.Seconds(),
	}
	if !st.LastCheckpoint.IsZero() {
		t := st.LastCheckpoint.UTC()
		js.LastCheckpoint = &t
	}
	return js
}

// Backup implements admin.Journal.
func (a StoreJournal) Backup(ctx context.Context, dest string, progress func(done, total int)) error {
	return a.S.Backup(ctx, dest, progress)
}
