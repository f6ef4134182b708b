package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/flock"
)

// Defaults for Options.
const (
	DefaultOpTimeout  = 30 * time.Second
	DefaultSocketMode = 0o660
)

// Options configure a Server.
type Options struct {
	Socket        string // unix socket path (required)
	MetricsListen string // TCP address of /metrics and /healthz; empty: off
	Broker        Broker // required
	Journal       Journal
	Config        appliance.Config // effective configuration, served by GET /v1/config
	// CurrentConfig, when set, is served instead of Config: the
	// configuration in force after reloads (SIGHUP).
	CurrentConfig func() appliance.Config
	// RestartNeeded, when set, lists the changed keys a reload could not
	// apply (they keep their old values until a restart).
	RestartNeeded func() []string
	Level         *slog.LevelVar // the daemon's log level; nil: PUT /v1/log-level is refused
	Version       string
	Started       time.Time
	Logger        *slog.Logger
	Metrics       *Metrics      // nil: created here
	Ready         func() error  // nil: ready while serving
	OpTimeout     time.Duration // bound of purge, delete, requeue, peek
	// BindHook, when set (by tests), runs once the socket is bound under
	// its temporary name, before it is renamed into place: a start that
	// takes its time there.
	BindHook func()
	// SocketLock, when set, is the claim on Socket the daemon took with
	// LockSocket early in its start, before it opened anything or
	// listened: Start uses it instead of taking it then, and the Server
	// owns it from Start on.
	SocketLock *SocketLock
}

// Server serves the admin API on a unix socket and, optionally, metrics on
// TCP. New applies defaults; Start listens; Close stops.
type Server struct {
	o        Options
	log      *slog.Logger
	metrics  *Metrics
	channels atomic.Pointer[ChannelStats]
	bridges  atomic.Pointer[BridgeStats] // bridges.go
	backupMu sync.Mutex

	api, mh      *http.Server
	apiLn, metLn net.Listener
	sockLock     *SocketLock // held while the socket is ours
	wg           sync.WaitGroup
	closeOnce    sync.Once
	closed       atomic.Bool
}

// New returns a Server for o with defaults applied.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Started.IsZero() {
		o.Started = time.Now()
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(o.Version)
	}
	s := &Server{o: o, log: o.Logger, metrics: o.Metrics}
	s.metrics.attach(s)
	return s
}

// SetChannels registers the multicast channels' statistics, served by GET
// /v1/channels and exported as metrics. Safe to call at any time.
func (s *Server) SetChannels(c ChannelStats) {
	if c == nil {
		s.channels.Store(nil)
		return
	}
	s.channels.Store(&c)
}

func (s *Server) channelViews() []ChannelView {
	if p := s.channels.Load(); p != nil {
		if v := (*p).Channels(); v != nil {
			return v
		}
	}
	return []ChannelView{}
}

// Start listens on the admin socket (mode 0660; a stale socket left by a
// dead daemon is removed, one a live daemon serves, or whose lock file it
// holds, is ErrSocketInUse) and on the metrics address when set, and
// serves them until Close. It uses Options.SocketLock when set (and owns
// it from then on, released at Close or when Start fails), else it takes
// the lock itself.
func (s *Server) Start(ctx context.Context) error {
	ln, lock, err := listenSocket(ctx, s.o.Socket, s.o.SocketLock, s.o.BindHook)
	if err != nil {
		return err
	}
	s.apiLn, s.sockLock = ln, lock
	s.api = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerCred(c))
		},
	}
	if s.o.MetricsListen != "" {
		ml, err := net.Listen("tcp", s.o.MetricsListen)
		if err != nil {
			ln.Close()
			os.Remove(s.o.Socket)
			lock.Release()
			return fmt.Errorf("admin: metrics listen %s: %w (choose another admin.metrics_listen, or set it to \"\" to turn metrics off)", s.o.MetricsListen, err)
		}
		s.metLn = ml
		s.mh = &http.Server{
			Handler:           s.metrics.Handler(),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		}
		s.serve(s.mh, ml)
	}
	s.serve(s.api, ln)
	s.log.Info("admin API listening", "socket", s.o.Socket, "metrics", s.MetricsAddr())
	return nil
}

func (s *Server) serve(hs *http.Server, ln net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// MetricsAddr returns the bound metrics address, or "" when off.
func (s *Server) MetricsAddr() string {
	if s.metLn == nil {
		return ""
	}
	return s.metLn.Addr().String()
}

// Close stops both listeners, waits for requests in progress until ctx
// ends (then cuts them, a running backup included), and removes the socket.
// It is idempotent.
func (s *Server) Close(ctx context.Context) error {
	var errs []error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		for _, hs := range []*http.Server{s.api, s.mh} {
			if hs == nil {
				continue
			}
			if err := hs.Shutdown(ctx); err != nil {
				hs.Close()
				errs = append(errs, fmt.Errorf("admin: shutdown: %w", err))
			}
		}
		s.wg.Wait()
		if s.apiLn != nil {
			if err := os.Remove(s.o.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("admin: remove socket: %w", err))
			}
		}
		if s.sockLock != nil {
			// Only now that the socket is gone may another daemon take
			// the path.
			s.sockLock.Release()
		}
	})
	return errors.Join(errs...)
}

// TempSocketLen is the length of the path the admin socket at path is
// bound under first (DIR/.hNNNNNNNNNN/s, see listenSocket): like path, it
// must fit the 107 bytes of a unix socket address.
func TempSocketLen(path string) int {
	return len(filepath.Dir(path)) + len("/.h4294967295/s")
}

// SocketLockPath is the lock file of the admin socket at path: PATH.lock,
// which the daemon serving the socket holds locked (flock) from before it
// looks at the path until it has removed the socket, and the file, at
// Close. It holds that daemon's pid.
func SocketLockPath(path string) string { return path + ".lock" }

// SocketLock is a claim on an admin socket path: the exclusive flock on
// SocketLockPath(path), which holds this process's pid. LockSocket takes
// it; Release gives it up.
type SocketLock struct {
	f    *os.File
	path string
}

// LockSocket claims the admin socket path for this process before it
// opens or listens on anything else, so that a daemon that cannot have
// the path is refused before it accepts a client
// (TestAdminSocket_RefusedBeforeListening): it creates the socket's
// directory, takes the lock (ErrSocketInUse naming the holder's pid when
// another daemon holds it), and refuses a path that is not a socket
// (ErrNotSocket) or on which a daemon that takes no lock answers
// (ErrSocketInUse). Pass the claim to the Server in Options.SocketLock.
func LockSocket(ctx context.Context, path string) (*SocketLock, error) {
	if path == "" {
		return nil, errors.New("admin: no socket path: set admin.socket or --admin-socket")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("admin: socket directory: %w", err)
	}
	f, err := lockSocket(path)
	if err != nil {
		return nil, err
	}
	l := &SocketLock{f: f, path: path}
	if _, err := probeSocket(ctx, path); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// Release removes the lock file, while it still holds its lock, and
// releases the lock. Removed while locked: a daemon that opened the file
// before and locks it after finds it no longer at the path, and takes the
// one there (lockSocket). Nil-safe and idempotent.
func (l *SocketLock) Release() {
	if l == nil || l.f == nil {
		return
	}
	unlockSocket(l.f, l.path)
	l.f = nil
}

// probeSocket looks at what is at path, under its lock: nothing or a
// stale socket (nobody answers; stale is true) is fine, a path that is not
// a socket or on which a daemon answers is an error.
func probeSocket(ctx context.Context, path string) (stale bool, err error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return false, nil
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return false, fmt.Errorf("%w: %s; move it away or choose another admin.socket (--admin-socket)", ErrNotSocket, path)
	}
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "unix", path)
	if err == nil {
		c.Close()
		// A daemon of a version that took no lock.
		return false, fmt.Errorf("%w: admin.socket %s answers: stop the other heraldd, or give this one another admin.socket (--admin-socket) and data_dir", ErrSocketInUse, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return false, fmt.Errorf("admin: cannot tell whether %s is in use (%v); remove it if no heraldd runs", path, err)
	}
	return true, nil
}

// listenSocket creates the unix socket at path with mode 0660, without a
// window in which another user can connect: it is bound in a fresh
// directory of mode 0700 beside path (whatever the umask makes of the
// socket's own mode there), chmodded, then renamed into place.
//
// The rename replaces whatever is at path, so all of it is done holding
// the claim on path (LockSocket), returned to be held while the socket
// serves: two daemons given the same path, started at once, would
// otherwise both find it free and the second would rename its socket
// over the first's (TestAdminSocket_TwoDaemonsAtOnce). lock is the claim
// taken beforehand, or nil to take it here; on an error it is released.
func listenSocket(ctx context.Context, path string, lock *SocketLock, hook func()) (_ net.Listener, _ *SocketLock, err error) {
	if lock == nil {
		if lock, err = LockSocket(ctx, path); err != nil {
			return nil, nil, err
		}
	}
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	if lock.path != path {
		return nil, nil, fmt.Errorf("admin: the lock taken is for %s, not for the socket %s", lock.path, path)
	}
	// Looked at again: the claim may have been taken a while ago.
	stale, err := probeSocket(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	if stale {
		if err := os.Remove(path); err != nil {
			return nil, nil, fmt.Errorf("admin: remove stale socket %s: %w", path, err)
		}
	}
	priv, err := os.MkdirTemp(filepath.Dir(path), ".h")
	if err != nil {
		return nil, nil, fmt.Errorf("admin: socket directory: %w (is it writable by the daemon's user?)", err)
	}
	defer os.Remove(priv)
	if err := os.Chmod(priv, 0o700); err != nil {
		return nil, nil, fmt.Errorf("admin: socket directory: %w", err)
	}
	tmp := filepath.Join(priv, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, nil, fmt.Errorf("admin: listen on %s: %w (is the directory writable by the daemon's user? socket paths are limited to 107 bytes, and it is bound first as %s)", path, err, tmp)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // Close removes the final path itself
	if err := os.Chmod(tmp, DefaultSocketMode); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, nil, fmt.Errorf("admin: chmod %s: %w", tmp, err)
	}
	if hook != nil {
		hook()
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, nil, fmt.Errorf("admin: rename socket into place: %w", err)
	}
	return ln, lock, nil
}

// lockSocket takes the exclusive flock on SocketLockPath(path) and writes
// this process's pid in it. A lock file replaced between its open and the
// flock (removed by hand) is taken again at the path. A lock held by
// another is tried again for up to flock.Wait (1 s), so that a lock
// taken shared for a moment by a check (SocketLockHolder, for heraldd
// --check-config) does not refuse a start.
func lockSocket(path string) (*os.File, error) {
	lp := SocketLockPath(path)
	deadline := time.Now().Add(flock.Wait)
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(lp, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("admin: lock file of the admin socket: %w (is its directory writable by the daemon's user?)", err)
		}
		if err := flock.Exclusive(int(f.Fd()), deadline); err != nil {
			f.Close()
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("admin: lock %s: %w", lp, err)
			}
			who := "another heraldd"
			if pid := lockPID(lp); pid > 0 {
				who = fmt.Sprintf("another heraldd (pid %d)", pid)
			}
			return nil, fmt.Errorf("%w: admin.socket %s: its lock %s is held by %s: stop that daemon, or give this one another admin.socket (--admin-socket)", ErrSocketInUse, path, lp, who)
		}
		if !sameFile(f, lp) {
			// Removed or replaced between the open and the flock.
			f.Close()
			if attempt < 10 {
				continue
			}
			return nil, fmt.Errorf("admin: lock file %s keeps being replaced: is another program removing it?", lp)
		}
		f.Truncate(0)
		fmt.Fprintf(f, "%d\n", os.Getpid())
		return f, nil
	}
}

// unlockSocket removes the lock file of the socket at path, while it holds
// its lock, and releases it. Removed while locked: a daemon that opened it
// before and locks it after finds it no longer at the path, and takes the
// one there (lockSocket).
func unlockSocket(lock *os.File, path string) {
	if lp := SocketLockPath(path); sameFile(lock, lp) {
		os.Remove(lp)
	}
	lock.Close()
}

// sameFile reports whether the open file f is the file at path now.
func sameFile(f *os.File, path string) bool {
	var a, b syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &a) != nil || syscall.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// SocketLockHolder tells whether a process holds the lock of the admin
// socket at path (SocketLockPath), and its pid when written there (else
// 0), for heraldd --check-config. It creates nothing; it takes the lock
// shared for a moment, which a daemon starting then waits out
// (lockSocket).
func SocketLockHolder(path string) (held bool, pid int) {
	lp := SocketLockPath(path)
	f, err := os.Open(lp)
	if err != nil {
		return false, 0
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false, 0
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		return false, 0
	}
	return true, lockPID(lp)
}

// lockPID is the pid written in the lock file lp, or 0.
func lockPID(lp string) int {
	b, err := os.ReadFile(lp)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

type peerKey struct{}

// peerInfo is who is at the other end of an admin connection.
type peerInfo struct {
	uid, pid int  // -1: unknown
	unmapped bool // uid is the overflow uid: the caller's is not mapped in the daemon's user namespace
}

// peer returns the caller's uid and pid as log attributes: "uid", the
// uid (-1 unknown) or "unmapped" when the daemon's user namespace does not
// map it (systemd's PrivateUsers=yes maps only root and the service's
// user; the kernel then says 65534 for everyone else), and "pid".
func peer(r *http.Request) []any {
	p, ok := r.Context().Value(peerKey{}).(peerInfo)
	if !ok {
		return []any{"uid", -1, "pid", -1}
	}
	if p.unmapped {
		return []any{"uid", "unmapped", "pid", p.pid}
	}
	return []any{"uid", p.uid, "pid", p.pid}
}
