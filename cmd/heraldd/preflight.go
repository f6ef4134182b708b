package main

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/herald-mq/herald/admin"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
)

// severity says what a problem found by preflight does to a start.
type severity uint8

const (
	sevConfig      severity = iota // the config cannot work on this host: exit 78 (EX_CONFIG)
	sevUnavailable                 // something else holds what it needs (a port): exit 69 (EX_UNAVAILABLE)
	sevNote                        // worth knowing, no reason to refuse
)

// problem is one finding of preflight: the config key it is about (empty
// when the message names it, as Validate's do) and what to do.
type problem struct {
	sev severity
	key string
	msg string
}

func (p problem) String() string {
	if p.key == "" {
		return p.msg
	}
	return p.key + ": " + p.msg
}

// preflight runs every check the daemon needs to pass before it serves cfg,
// and returns every problem at once: the values (Config.Validate), the
// listen addresses (parsed, resolved and bound for a moment: in use, not an
// address of this host, a privileged port), the admin socket's path and
// directory, the data directory and the disk floor, and each multicast
// channel's interface and key file. Both --check-config and the daemon's
// start call it, so that "check, then restart" means what it says. It
// changes nothing on the host.
//
// Ports and the admin socket held by a heraldd that runs on cfg's data
// directory (it holds its lock, lock.go) are notes: a restart frees them.
// An admin socket whose lock another daemon holds is a problem (exit 69).
//
// A [tls] or user section with certificate or password files would be
// checked here too (readable, parseable); the config has none yet.
func preflight(cfg appliance.Config) []problem {
	var ps []problem
	if err := cfg.Validate(); err != nil {
		for _, e := range splitJoined(err) {
			ps = append(ps, problem{sev: sevConfig, msg: e.Error()})
		}
	}
	if err := cfg.CheckExposure(); err != nil {
		ps = append(ps, problem{sev: sevConfig, msg: err.Error()})
	}
	add := func(p *problem) {
		if p != nil {
			ps = append(ps, *p)
		}
	}
	running := lockHolder(cfg.DataDir)
	if cfg.Stomp.Listen != "" {
		add(checkListen("stomp.listen", cfg.Stomp.Listen, running, cfg.DataDir))
	}
	if cfg.Stomp.TLSListen != "" {
		add(checkListen("stomp.tls_listen", cfg.Stomp.TLSListen, running, cfg.DataDir))
		if _, err := appliance.TLSConfig(cfg.Stomp); err != nil {
			ps = append(ps, problem{sev: sevConfig, key: "stomp.tls_cert", msg: err.Error()})
		}
	}
	for i, bc := range cfg.Bridges {
		if err := bridge.Check(bc); err != nil {
			ps = append(ps, problem{sev: sevConfig, key: fmt.Sprintf("bridge[%d] (%s)", i, bc.Name), msg: err.Error()})
		}
	}
	if _, _, err := appliance.LoadAuth(cfg); err != nil {
		ps = append(ps, problem{sev: sevConfig, key: "auth.users_file", msg: err.Error()})
	}
	if cfg.Web.Listen != "" {
		add(checkListen("web.listen", cfg.Web.Listen, running, cfg.DataDir))
		if cfg.Web.TLS && cfg.Stomp.TLSListen == "" {
			// web.tls serves the STOMP listener's certificate.
			if _, err := appliance.TLSConfig(cfg.Stomp); err != nil {
				ps = append(ps, problem{sev: sevConfig, key: "stomp.tls_cert", msg: "web.tls: " + err.Error()})
			}
		}
	}
	if cfg.Admin.MetricsListen != "" {
		add(checkListen("admin.metrics_listen", cfg.Admin.MetricsListen, running, cfg.DataDir))
	}
	if cfg.Admin.Socket != "" {
		ps = append(ps, checkSocketPath("admin.socket", cfg.Admin.Socket, running, cfg.DataDir)...)
	}
	if cfg.DataDir != "" {
		add(checkDir("data_dir", cfg.DataDir, false))
		add(checkDiskFloor(cfg))
	}
	for i, ch := range cfg.Multicast.Channels {
		where := fmt.Sprintf("multicast.channel[%d]", i)
		if ch.Interface != "" {
			add(checkInterface(where+".interface", ch.Interface))
		}
		if ch.KeyFile != "" && ch.Key == "" {
			if _, err := readChannelKey(ch); err != nil {
				add(&problem{sev: sevConfig, key: where + ".key_file", msg: err.Error()})
			}
		}
		if ch.PreviousKeyFile != "" {
			// The same rules as key_file: the key a rotation still accepts.
			if _, err := readChannelKey(appliance.ChannelConfig{KeyFile: ch.PreviousKeyFile}); err != nil {
				add(&problem{sev: sevConfig, key: where + ".previous_key_file", msg: err.Error()})
			}
		}
	}
	return ps
}

// splitJoined undoes errors.Join.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// sevUnavailableCode is the exit code when only sevUnavailable problems stop a start.
const sevUnavailableCode = 69

// exitCode is the code a start (or --check-config) ends with for ps: 78 if
// any problem is the config's, else 69 if something else holds what the
// daemon needs, else 0.
func exitCode(ps []problem) int {
	code := 0
	for _, p := range ps {
		switch p.sev {
		case sevConfig:
			return 78
		case sevUnavailable:
			code = sevUnavailableCode
		}
	}
	return code
}

// report writes ps as --check-config and a refused start (starting) show
// them: the failures under one heading with their count, then the notes.
func report(w *os.File, ps []problem, starting bool) {
	var fails, notes []string
	for _, p := range ps {
		if p.sev == sevNote {
			notes = append(notes, "note: "+p.String())
		} else {
			fails = append(fails, p.String())
		}
	}
	if len(fails) > 0 {
		noun := "problems"
		if len(fails) == 1 {
			noun = "problem"
		}
		what := "invalid configuration"
		if exitCode(ps) == sevUnavailableCode {
			what = "cannot serve this configuration now"
		}
		then := "the daemon would refuse to start"
		if starting {
			then = "not starting"
		}
		fmt.Fprintf(w, "heraldd: %s: %d %s (%s):\n%s\n", what, len(fails), noun, then, strings.Join(fails, "\n"))
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, strings.Join(notes, "\n"))
	}
}

// readChannelKey returns a channel's shared key: key, or the content of
// key_file without its trailing newline. The daemon's start and preflight
// both read it here.
func readChannelKey(cc appliance.ChannelConfig) ([]byte, error) {
	if cc.KeyFile == "" {
		return []byte(cc.Key), nil
	}
	b, err := os.ReadFile(cc.KeyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: no such file: create it (for example: head -c 32 /dev/urandom | base64 > %s) or fix the path", cc.KeyFile, cc.KeyFile)
	case errors.Is(err, syscall.EISDIR):
		return nil, fmt.Errorf("%s: is a directory: name the file holding the key", cc.KeyFile)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("%s: permission denied for uid %d: make it readable by the daemon's user (packaged: chgrp herald %s; chmod 0640 %s)", cc.KeyFile, os.Geteuid(), cc.KeyFile, cc.KeyFile)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", cc.KeyFile, err)
	}
	key := bytes.TrimRight(b, "\r\n")
	if len(key) == 0 {
		return nil, fmt.Errorf("%s: empty: put the channel's shared key in it (the same on every sender and receiver)", cc.KeyFile)
	}
	return key, nil
}

// checkListen parses, resolves and binds addr for a moment.
func checkListen(key, addr string, running int, dataDir string) *problem {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return &problem{sevConfig, key, fmt.Sprintf("%q: %v: want HOST:PORT (example: \"127.0.0.1:61613\")", addr, addrErrText(err))}
	}
	if looksNumeric(host) {
		if _, err := netip.ParseAddr(host); err != nil {
			return &problem{sevConfig, key, fmt.Sprintf("%q: %s is not a valid IP address (example: \"127.0.0.1:61613\")", addr, host)}
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		return nil
	}
	p := bindProblem(key, addr, err)
	if p.sev == sevUnavailable && running != 0 {
		who := "the running heraldd"
		if running > 0 {
			who = fmt.Sprintf("the running heraldd (pid %d)", running)
		}
		return &problem{sevNote, key, fmt.Sprintf("%q: in use by %s of data_dir %s, which holds its lock; a restart frees it", addr, who, dataDir)}
	}
	return &p
}

// looksNumeric: host is made of digits and dots only, so it is meant as
// an IPv4 address and never looked up as a name.
func looksNumeric(host string) bool {
	return host != "" && strings.Trim(host, "0123456789.") == ""
}

func addrErrText(err error) string {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return ae.Err
	}
	return err.Error()
}

// bindProblem says why binding key's address addr failed, and what to do:
// the name does not resolve, the address is in use, the port is
// privileged, or the address is not one of this host's.
func bindProblem(key, addr string, err error) problem {
	var dns *net.DNSError
	_, port, _ := net.SplitHostPort(addr)
	switch {
	case errors.As(err, &dns):
		return problem{sevConfig, key, fmt.Sprintf("%q: cannot resolve %s (%s): use an IP address, or a name that /etc/hosts or DNS resolves", addr, dns.Name, dns.Err)}
	case errors.Is(err, syscall.EADDRINUSE):
		return problem{sevUnavailable, key, fmt.Sprintf("%q: address already in use by another program (find it with: ss -ltnp 'sport = :%s'): stop it or choose another port", addr, port)}
	case errors.Is(err, syscall.EACCES):
		return problem{sevConfig, key, fmt.Sprintf("%q: permission denied: ports below 1024 need root or CAP_NET_BIND_SERVICE (systemd: AmbientCapabilities=CAP_NET_BIND_SERVICE); or use a port from 1024 up", addr)}
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		host, _, _ := net.SplitHostPort(addr)
		return problem{sevConfig, key, fmt.Sprintf("%q: %s is not an address of this host: use one of its addresses (ip -br addr), 127.0.0.1 for local clients only, or 0.0.0.0 for all", addr, host)}
	}
	return problem{sevConfig, key, fmt.Sprintf("%q: %v", addr, err)}
}

// maxSocketPath: a unix socket path holds at most 107 bytes, and the admin
// API binds DIR/.hNNNNNNNNNN/s first and renames it (admin.TempSocketLen).
const maxSocketPath = 107

// checkSocketPath checks the admin socket's path: its length, that it is
// a socket if anything, its directory, and who holds its lock (PATH.lock):
// the heraldd running on dataDir (running, as lockHolder returns it) is a
// note, any other daemon a problem.
func checkSocketPath(key, path string, running int, dataDir string) []problem {
	var ps []problem
	if held, pid := admin.SocketLockHolder(path); held {
		lp := admin.SocketLockPath(path)
		switch {
		case pid > 0 && pid == running, running < 0, pid <= 0 && running != 0:
			// This data directory's daemon, or one whose pid is unknown
			// while a daemon runs on it (it refuses the start anyway).
			who := "the running heraldd"
			if running > 0 {
				who = fmt.Sprintf("the running heraldd (pid %d)", running)
			}
			ps = append(ps, problem{sevNote, key, fmt.Sprintf("%q: in use by %s of data_dir %s, which holds its lock %s; a restart frees it", path, who, dataDir, lp)})
		default:
			who := "another heraldd"
			if pid > 0 {
				who = fmt.Sprintf("another heraldd (pid %d)", pid)
			}
			ps = append(ps, problem{sevUnavailable, key, fmt.Sprintf("%q: its lock %s is held by %s, not one running on data_dir %s: stop that daemon, or give this one another admin.socket (--admin-socket)", path, lp, who, dataDir)})
		}
	}
	if n := max(len(path), admin.TempSocketLen(path)); n > maxSocketPath {
		ps = append(ps, problem{sevConfig, key, fmt.Sprintf("%q: %d bytes with the temporary name it is bound under first (%s/.hNNNNNNNNNN/s), longer than the %d a unix socket path may have: choose a shorter path", path, n, filepath.Dir(path), maxSocketPath)})
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket == 0 {
		ps = append(ps, problem{sevConfig, key, fmt.Sprintf("%s exists and is not a socket: move it away or choose another admin.socket", path)})
	}
	if p := checkDir(key, filepath.Dir(path), true); p != nil {
		ps = append(ps, *p)
	}
	return ps
}

// checkDir checks that dir is a directory the daemon can write to, or can
// be created (its nearest existing parent is writable). runtime: a missing
// directory that cannot be created is only a note, since systemd creates
// the runtime directory (RuntimeDirectory=herald) as the service starts.
func checkDir(key, dir string, runtime bool) *problem {
	dir = filepath.Clean(dir)
	d := dir
	for {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return &problem{sevConfig, key, fmt.Sprintf("%s is not a directory: %s must be one", d, dir)}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return &problem{sevConfig, key, fmt.Sprintf("%s: %v", d, err)}
		}
		up := filepath.Dir(d)
		if up == d {
			break
		}
		d = up
	}
	if err := syscall.Access(d, 2|1); err != nil { // W_OK|X_OK
		switch {
		case d == dir:
			return &problem{sevConfig, key, fmt.Sprintf("%s: not writable by uid %d (%v): chown it to the daemon's user, or choose another", dir, os.Geteuid(), err)}
		case runtime:
			return &problem{sevNote, key, fmt.Sprintf("%s does not exist and uid %d cannot create it in %s; systemd creates it as the service starts (RuntimeDirectory=herald), else create it", dir, os.Geteuid(), d)}
		default:
			return &problem{sevConfig, key, fmt.Sprintf("%s does not exist and uid %d cannot create it (%s: %v): create it for the daemon's user, or choose another", dir, os.Geteuid(), d, err)}
		}
	}
	return nil
}

// checkDiskFloor: the free space below which SENDs are refused
// (journal.min_free_bytes plus journal.wal_limit_bytes) must fit in the data
// directory's filesystem, or no SEND is ever accepted.
func checkDiskFloor(cfg appliance.Config) *problem {
	if cfg.Journal.MinFreeBytes <= 0 {
		return nil
	}
	d := filepath.Clean(cfg.DataDir)
	var st syscall.Statfs_t
	for syscall.Statfs(d, &st) != nil {
		up := filepath.Dir(d)
		if up == d {
			return nil
		}
		d = up
	}
	floor := cfg.Journal.MinFreeBytes + cfg.Journal.WALLimitBytes
	total := int64(st.Blocks) * int64(st.Bsize)
	free := int64(st.Bavail) * int64(st.Bsize)
	switch {
	case floor >= total:
		return &problem{sevConfig, "journal.min_free_bytes", fmt.Sprintf("%d plus journal.wal_limit_bytes %d is more than the whole filesystem of %s (%d bytes): every queue SEND would be refused; lower them", cfg.Journal.MinFreeBytes, cfg.Journal.WALLimitBytes, d, total)}
	case free < floor:
		return &problem{sevNote, "journal.min_free_bytes", fmt.Sprintf("%s has %d bytes free, below the floor of %d (min_free_bytes plus wal_limit_bytes): queue SENDs are refused until space is freed", d, free, floor)}
	}
	return nil
}

func checkInterface(key, name string) *problem {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return &problem{sevConfig, key, fmt.Sprintf("%q: no such network interface (list them with: ip -br link), or leave it empty for the interface of the route to the group", name)}
	}
	if ifi.Flags&net.FlagUp == 0 {
		return &problem{sevNote, key, fmt.Sprintf("%q is down: nothing is sent until it is up (ip link set %s up)", name, name)}
	}
	if ifi.Flags&(net.FlagMulticast|net.FlagLoopback) == 0 {
		return &problem{sevNote, key, fmt.Sprintf("%q does not have the MULTICAST flag: its datagrams may go nowhere (ip link set %s multicast on)", name, name)}
	}
	return nil
}
