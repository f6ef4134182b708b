package main

import (
	"context"
	"fmt"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/journal"
)

// processStart is when the daemon process started, for uptime.
var processStart = time.Now()

// adminBindHook, when set (by the tests' child process only), runs with the
// admin socket bound under its temporary name, before it is renamed into
// place (admin.Options.BindHook).
var adminBindHook func()

// adminState is the daemon's admin API server and metrics registry.
type adminState struct {
	metrics *admin.Metrics
	server  *admin.Server
	// lock is the claim on the admin socket's path, taken early in the
	// start (admin.LockSocket) and handed to the server by startAdmin.
	lock *admin.SocketLock
}

// adminMetrics returns the metrics registry, creating it on first use.
func (d *daemon) adminMetrics() *admin.Metrics {
	if d.adm.metrics == nil {
		d.adm.metrics = admin.NewMetrics(version)
	}
	return d.adm.metrics
}

// journalCommitHook returns the function to pass to the journal's
// SetCommitHook (before Open) so commit latency and batch size histograms
// are recorded:
//
//	d.store.SetCommitHook(d.journalCommitHook())
func (d *daemon) journalCommitHook() func(ops int, took time.Duration) {
	return d.adminMetrics().ObserveCommit
}

// startAdmin serves the admin API on cfg.Admin.Socket and, when
// cfg.Admin.MetricsListen is set, /metrics and /healthz on TCP. Call it
// once the broker listens; an error must fail startup.
func (d *daemon) startAdmin(ctx context.Context) error {
	srv := admin.New(admin.Options{
		Socket:        d.cfg.Admin.Socket,
		MetricsListen: d.cfg.Admin.MetricsListen,
		Broker:        d.broker,
		Journal:       storeAdmin{d.store},
		Config:        d.cfg,
		RestartNeeded: func() []string {
			if k := d.restartKeys.Load(); k != nil {
				return *k
			}
			return nil
		},
		CurrentConfig: func() appliance.Config {
			if d.broker == nil {
				return d.cfg
			}
			return *d.broker.Config()
		},
		Level:   &d.level,
		Version: version,
		Started: processStart,
		Logger:  d.log.With("component", "admin"),
		Metrics: d.adminMetrics(),
		// Tests only: a start that pauses with the socket bound.
		BindHook: adminBindHook,
		// Taken before the journal was opened; the server owns it now.
		SocketLock: d.adm.lock,
	})
	d.adm.lock = nil
	if err := srv.Start(ctx); err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	srv.SetChannels(channelStats{d})
	d.adm.server = srv
	return nil
}

// stopAdmin stops the admin API first thing at shutdown, so no admin
// operation races the broker's shutdown. Idempotent.
func (d *daemon) stopAdmin() {
	if d.adm.server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.adm.server.Close(ctx); err != nil {
		d.log.Warn("admin API did not stop cleanly", "err", err)
	}
}

// storeAdmin adapts the journal to admin.Journal.
type storeAdmin struct{ s *journal.Store }

func (a storeAdmin) Status() admin.JournalStatus {
	st := a.s.Stats()
	db, wal := a.s.Sizes()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	free, _, _ := a.s.Reusable(ctx)
	cancel()
	js := admin.JournalStatus{
		DBFreeBytes:       free,
		Path:              a.s.Path(),
		DBBytes:           db,
		WALBytes:          wal,
		Commits:           st.Commits,
		Ops:               st.Ops,
		FailedCommits:     st.FailedCommits,
		InlineCommits:     st.Inline,
		Checkpoints:       st.Checkpoints,
		WALBackstops:      st.WALBackstops,
		ReadErrors:        st.ReadErrors,
		LastBatchOps:      st.LastBatchOps,
		LastCommitSeconds: st.LastCommitTime.Seconds(),
	}
	if !st.LastCheckpoint.IsZero() {
		t := st.LastCheckpoint.UTC()
		js.LastCheckpoint = &t
	}
	return js
}

func (a storeAdmin) Backup(ctx context.Context, dest string, progress func(done, total int)) error {
	return a.s.Backup(ctx, dest, progress)
}
