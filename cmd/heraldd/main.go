// Command heraldd is the Herald message appliance daemon.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/journal"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("heraldd", flag.ContinueOnError)
	configPath := fs.String("config", "", "TOML config file (default: embedded defaults)")
	dataDir := fs.String("data-dir", "", "data directory (overrides data_dir; default ./herald-data)")
	listen := fs.String("stomp-listen", "", "STOMP listen address (overrides stomp.listen; default 127.0.0.1:61613)")
	adminSocket := fs.String("admin-socket", "", "admin unix socket (overrides admin.socket; default DATA_DIR/admin.sock)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	af := authFlags(fs) // auth.go
	wf := webFlags(fs)  // web.go
	showVersion := fs.Bool("version", false, "print the version and exit")
	checkConfig := fs.Bool("check-config", false, "validate the configuration and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the usage was printed, as asked
		}
		return 64
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "heraldd: unexpected argument %q: heraldd takes only flags (see heraldd --help)\n", fs.Arg(0))
		return 64
	}
	if *showVersion {
		fmt.Println("heraldd", version)
		return 0
	}
	cfg := appliance.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = appliance.LoadConfig(*configPath); err != nil {
			fmt.Fprintf(os.Stderr, "heraldd: %v\n", err)
			return 78
		}
	}
	// Flags override the file, also on a reload (SIGHUP).
	overrides := func(cfg *appliance.Config) {
		if *dataDir != "" {
			cfg.DataDir = *dataDir
		}
		if *listen != "" {
			cfg.Stomp.Listen = *listen
		}
		if *adminSocket != "" {
			cfg.Admin.Socket = *adminSocket
		}
		if *logLevel != "" {
			cfg.Log.Level = *logLevel
		}
		af.apply(cfg)
		wf.apply(cfg)
		if cfg.Admin.Socket == "" {
			cfg.Admin.Socket = filepath.Join(cfg.DataDir, "admin.sock")
		}
	}
	overrides(&cfg)
	// The same checks for --check-config and a start (preflight.go).
	problems := preflight(cfg)
	code := exitCode(problems)
	if *checkConfig {
		if os.Geteuid() == 0 {
			problems = append(problems, problem{sev: sevNote, msg: "checked as root: files, directories and ports below 1024 are checked with root's rights, which the service (user herald, no capabilities) does not have; check as its user: sudo -u herald heraldd --check-config --config FILE"})
		}
		out := os.Stdout
		if code != 0 {
			out = os.Stderr
		}
		report(out, problems, false)
		if code == 0 {
			fmt.Println("configuration ok")
		}
		return code
	}
	if code != 0 {
		report(os.Stderr, problems, true)
		return code
	}
	d := &daemon{cfg: cfg, configPath: *configPath, overrides: overrides, notes: problems}
	// A SIGHUP while starting (a long journal recovery) is a reload asked
	// early, not the end of the process (its default action): it waits on
	// this channel and is applied once serving. SIGTERM and SIGINT keep
	// their default until then.
	d.sigs = make(chan os.Signal, 2)
	signal.Notify(d.sigs, syscall.SIGHUP)
	return d.run()
}

// startHook, when set (by the tests' child process only), runs after
// preflight, before the daemon takes its locks and recovers its journal:
// a start that takes its time.
var startHook func()

type daemon struct {
	cfg        appliance.Config
	configPath string
	overrides  func(*appliance.Config) // the command line's flags, applied over the file
	sigs       chan os.Signal          // SIGHUP from the start, SIGTERM and SIGINT once serving
	notes      []problem               // preflight's notes, logged once the log is set up
	level      slog.LevelVar
	log        *slog.Logger
	store      *journal.Store
	broker     *appliance.Broker
	adm        adminState       // admin.go
	channels   []*channel       // multicast.go
	bridges    []*bridge.Bridge // bridges.go
	// restartKeys are the changed keys the last reload could not apply.
	restartKeys atomic.Pointer[[]string]
}

func (d *daemon) run() int {
	d.level.Set(parseLevel(d.cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: &d.level, ReplaceAttr: durationsAsText}
	if d.cfg.Log.Format == "json" {
		d.log = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	} else {
		d.log = slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	for _, p := range d.notes {
		d.log.Warn(p.msg, "key", p.key)
	}
	setGoMemoryLimit(d.log)
	start := time.Now()
	if err := mkdirDurable(d.cfg.DataDir, 0o750); err != nil {
		d.log.Error("cannot create the data directory; create it or choose another with --data-dir", "dir", d.cfg.DataDir, "err", err)
		return 73
	}
	if startHook != nil {
		startHook()
	}
	// Every exclusive claim first, before the journal is opened and before
	// any listener accepts a client: a daemon that cannot run here is
	// refused having touched nothing (TestAdminSocket_RefusedBeforeListening).
	unlock, err := lockDataDir(d.cfg.DataDir)
	if err != nil {
		d.log.Error("data directory in use", "err", err)
		return 75
	}
	defer unlock()
	ctx := context.Background()
	if d.adm.lock, err = admin.LockSocket(ctx, d.cfg.Admin.Socket); err != nil {
		d.log.Error("cannot start the admin API", "err", err)
		return 69
	}
	defer func() { d.adm.lock.Release() }() // unless the admin server took it
	notify("STATUS=recovering journal")
	d.store = journal.New(journal.Config{
		Path:               filepath.Join(d.cfg.DataDir, "herald.db"),
		Sync:               d.cfg.Journal.Sync,
		DedupWindow:        d.cfg.Queues.DedupWindow.Duration,
		DedupMax:           d.cfg.Queues.DedupMax,
		CheckpointInterval: d.cfg.Journal.Checkpoint.Duration,
		WALLimit:           d.cfg.Journal.WALLimitBytes,
		Compress:           d.cfg.Journal.Compress,
		MmapSize:           d.cfg.Journal.MmapBytes,
		Logger:             d.log.With("component", "journal"),
	})
	d.store.SetCommitHook(d.journalCommitHook())
	if err := d.store.Open(ctx); err != nil {
		d.log.Error("cannot open the journal", "err", err)
		return 74
	}
	d.broker = appliance.New(appliance.Options{
		Config:  d.cfg,
		Journal: d.store,
		Logger:  d.log.With("component", "broker"),
		Version: version,
	})
	d.logMemory()
	tuneGC(d.log, d.broker.MemoryHeld)
	if err := d.broker.Open(ctx); err != nil {
		d.log.Error("journal recovery failed", "err", err)
		d.store.Close(ctx)
		return 74
	}
	if err := d.openChannels(ctx); err != nil {
		d.log.Error("cannot open a multicast channel; check [[multicast.channel]] in the config", "err", err)
		d.shutdown()
		return 69
	}
	if err := d.startAuth(); err != nil {
		d.log.Error("cannot load users and permissions; fix them or auth.users_file", "err", err)
		d.shutdown()
		return 78
	}
	if err := d.newBridges(); err != nil {
		d.log.Error("cannot start a bridge; check [[bridge]] in the config", "err", err)
		d.shutdown()
		return 78
	}
	addr, err := d.broker.Listen(d.cfg.Stomp.Listen)
	if err != nil {
		// preflight bound it a moment ago: something took it since.
		p := bindProblem("stomp.listen", d.cfg.Stomp.Listen, err)
		d.log.Error("cannot listen: "+p.msg, "key", p.key, "err", err)
		d.shutdown()
		return exitCode([]problem{p})
	}
	if err := d.listenTLS(); err != nil {
		d.log.Error("cannot start the TLS listener", "err", err)
		d.shutdown()
		return listenExit(err)
	}
	if err := d.listenWeb(); err != nil {
		d.log.Error("cannot start the web listener", "err", err)
		d.shutdown()
		return listenExit(err)
	}
	if err := d.startAdmin(ctx); err != nil {
		d.log.Error("cannot start the admin API", "err", err)
		d.shutdown()
		return 69
	}
	d.startBridges(addr)
	d.log.Info("heraldd ready", "version", version, "stomp", addr.String(), "data_dir", d.cfg.DataDir, "sync", d.cfg.Journal.Sync, "startup", time.Since(start).Round(time.Millisecond))
	notify("READY=1\nSTATUS=serving STOMP on " + addr.String())

	sigs := d.sigs
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-d.store.Stopped():
			return d.journalStopped(start)
		}
		if sig == syscall.SIGHUP {
			d.reload()
			continue
		}
		d.log.Info("shutting down", "signal", sig.String())
		notify("STOPPING=1\nSTATUS=shutting down")
		go func() {
			// A second signal forces exit.
			for s := range sigs {
				if s != syscall.SIGHUP {
					d.log.Warn("second signal: exiting at once", "signal", s.String())
					os.Exit(130)
				}
			}
		}()
		break
	}
	if err := d.shutdown(); err != nil {
		d.log.Error("shutdown incomplete", "err", err)
		return 1
	}
	d.log.Info("heraldd stopped", "uptime", time.Since(start).Round(time.Second))
	return 0
}

// journalStopped ends the daemon after an I/O error stopped the journal
// (journal.Store.Stopped): sessions end (their clients got an ERROR for
// whatever the journal refused), and heraldd exits with 74 (EX_IOERR).
// The unit's Restart=on-failure starts it again, and the journal's
// recovery decides what the WAL durably holds; a batch whose commit met
// the error may or may not be there, as its ERROR said.
func (d *daemon) journalStopped(start time.Time) int {
	d.log.Error("the journal stopped after an I/O error: heraldd exits (status 74) so that a restart recovers the journal; check the disk (dmesg, smartctl)", "err", d.store.Failure(), "uptime", time.Since(start).Round(time.Second))
	notify("STOPPING=1\nSTATUS=journal I/O error: exiting")
	if err := d.shutdown(); err != nil {
		d.log.Warn("shutdown after the journal stopped", "err", err)
	}
	return 74
}

// shutdown stops in order: stop accepting and end sessions (unacked
// messages return to their queues), then flush and close the journal.
func (d *daemon) shutdown() error {
	d.stopAdmin()
	d.stopBridges()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if d.broker != nil {
		if err := d.broker.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	d.closeChannels()
	if err := d.store.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// durationsAsText writes durations as Go duration strings ("4ms"), not as
// nanosecond integers, in both log formats.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// setGoMemoryLimit gives the Go runtime a soft memory limit of 3/4 of what
// the daemon may use (its cgroup's limit, as systemd's MemoryMax sets it,
// else the machine's RAM), unless GOMEMLIMIT says otherwise: without one
// the heap may grow to twice what is live before a collection, and the
// memory budget (40% of the same figure) would not keep the daemon inside
// its cgroup.
func setGoMemoryLimit(log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if lim := appliance.MemoryLimit(); lim > 0 {
		debug.SetMemoryLimit(lim / 4 * 3)
		log.Debug("Go memory limit set", "bytes", lim/4*3)
	}
}

// logMemory says once at start what the memory budget and the Go memory
// limit were sized from: the cgroup's limit file, /proc/meminfo, or
// sysinfo(2) when /proc/meminfo is hidden (systemd's ProcSubset=pid, as
// in the packaged unit). When nothing tells how much memory the daemon may
// use, the budget is 1 GiB and there is no Go limit: that is a warning,
// with what to set.
func (d *daemon) logMemory() {
	lim, from := appliance.MemoryLimitSource()
	_, budget := d.broker.MemoryHeld()
	goLimit := debug.SetMemoryLimit(-1)
	if from == "" && (d.cfg.Memory.BudgetBytes == 0 || os.Getenv("GOMEMLIMIT") == "") {
		d.log.Warn("cannot tell how much memory heraldd may use (no cgroup memory limit; neither /proc/meminfo nor sysinfo(2) gives the RAM): set MemoryMax= in the unit (systemctl edit herald), or memory.budget_bytes and GOMEMLIMIT",
			"memory_budget_bytes", budget, "go_memory_limit_set", goLimit != math.MaxInt64)
		return
	}
	d.log.Info("memory sized", "limit_bytes", lim, "from", from, "memory_budget_bytes", budget, "go_memory_limit_bytes", goLimit)
}

// listenExit is the exit code of a listener that could not start: 69 when
// the address could not be bound (a port held by another program), 78 for
// a configuration problem (a certificate that does not load).
func listenExit(err error) int {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "listen" {
		return 69
	}
	return 78
}
