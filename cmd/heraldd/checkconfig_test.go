package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// checkConfig runs heraldd --check-config on a file holding src (or on path
// when src is empty) and returns its exit code and output.
func checkConfig(t *testing.T, path, src string) (int, string) {
	t.Helper()
	if src != "" {
		path = filepath.Join(t.TempDir(), "herald.toml")
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "--check-config", "--config", path)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("run heraldd --check-config: %v", err)
	return 0, ""
}

// TestCheckConfig_ReportsBadValues: --check-config refuses (exit 78) the
// values that used to pass and then break the daemon, naming every key at
// once; it refuses a deeply nested file fast; it accepts the shipped file.
func TestCheckConfig_ReportsBadValues(t *testing.T) {
	code, out := checkConfig(t, "", `
[stomp]
connect_timeout = "0s"
write_timeout = "0s"
max_header_line = 1073741824
[[multicast.channel]]
name = "dash"
group = "239.255.0.1:7400"
topics = ["metrics.>"]
ttl = 1000
key_id = 300
`)
	if code != 78 {
		t.Errorf("exit code: got %d, want 78 (output %q)", code, out)
	}
	for _, want := range []string{
		"invalid configuration",
		"stomp.connect_timeout: must be positive",
		"stomp.write_timeout: must be positive",
		"stomp.max_header_line: at most 1048576 (1 MiB), got 1073741824",
		"multicast.channel[0].ttl: 1000: want 0 to 255",
		"multicast.channel[0].key_id: 300: want 0 to 255",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q: want it to contain %q", out, want)
		}
	}

	start := time.Now()
	code, out = checkConfig(t, "", "x = "+strings.Repeat("{a=", 8000)+"1"+strings.Repeat("}", 8000)+"\n")
	if want := "nested more than 32 deep"; code != 78 || !strings.Contains(out, want) {
		t.Errorf("8000-deep inline table: got exit %d and %q, want 78 and output containing %q", code, out, want)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("8000-deep inline table: --check-config took %s, want under 3s", took)
	}

	code, out = checkConfig(t, "../../packaging/herald.toml", "")
	if code != 0 || !strings.Contains(out, "configuration ok") {
		t.Errorf("shipped config: got exit %d and %q, want 0 and \"configuration ok\"", code, out)
	}
}

// occupy listens on a free port of 127.0.0.1 for the test's duration and
// returns its address: a port some other program holds.
func occupy(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// wantAll fails for each of wants that out does not contain.
func wantAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: output does not contain %q:\n%s", what, w, out)
		}
	}
}

// TestCheckConfig_Environment: --check-config runs the checks the daemon
// runs before serving (addresses resolved and bound, multicast group and
// interface, key files, directories) and reports every problem in one run,
// each with its key and what to do; a config the host can serve is ok.
func TestCheckConfig_Environment(t *testing.T) {
	dir := t.TempDir()
	keyDir := filepath.Join(dir, "keys") // a directory: not a readable key file
	if err := os.Mkdir(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.key")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	busy := occupy(t)
	bad := fmt.Sprintf(`
data_dir = %q
[stomp]
listen = "999.1.1.1:61613"
[admin]
socket = %q
metrics_listen = %q
[[multicast.channel]]
name = "notmc"
group = "198.18.0.1:7400"
topics = ["a.>"]
[[multicast.channel]]
name = "noif"
group = "239.255.0.9:7400"
interface = "nosuchif0"
topics = ["b.>"]
key_file = %q
[[multicast.channel]]
name = "dirkey"
group = "239.255.0.10:7400"
topics = ["c.>"]
key_file = %q
[[multicast.channel]]
name = "emptykey"
group = "239.255.0.11:7400"
topics = ["d.>"]
key_file = %q
`, filepath.Join(dir, "data"), filepath.Join(dir, "admin.sock"), busy,
		filepath.Join(dir, "missing.key"), keyDir, empty)
	code, out := checkConfig(t, "", bad)
	if code != 78 {
		t.Errorf("exit code: got %d, want 78\n%s", code, out)
	}
	wantAll(t, "bad config", out,
		`stomp.listen: "999.1.1.1:61613": 999.1.1.1 is not a valid IP address`,
		`multicast.channel[0].group: "198.18.0.1:7400": want an IPv4 multicast address`,
		`multicast.channel[1].interface: "nosuchif0": no such network interface`,
		`ip -br link`,
		`multicast.channel[1].key_file: `+filepath.Join(dir, "missing.key")+`: no such file`,
		`multicast.channel[2].key_file: `+keyDir+`: is a directory`,
		`multicast.channel[3].key_file: `+empty+`: empty`,
		`admin.metrics_listen: "`+busy+`": address already in use`,
		"7 problems",
	)
	if strings.Contains(out, "configuration ok") {
		t.Errorf("bad config: says ok:\n%s", out)
	}

	// An occupied STOMP port alone: the host cannot serve it (69, as the
	// daemon's start would be); a port below 1024 as a user without
	// CAP_NET_BIND_SERVICE and an address not on this host say so.
	busy2 := occupy(t)
	code, out = checkConfig(t, "", fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n[admin]\nsocket = %q\nmetrics_listen = \"198.51.100.7:9100\"\n",
		filepath.Join(dir, "data2"), busy2, filepath.Join(dir, "a2.sock")))
	if code != 78 {
		t.Errorf("occupied port: exit %d, want 78\n%s", code, out)
	}
	wantAll(t, "occupied port", out,
		`stomp.listen: "`+busy2+`": address already in use`,
		`ss -ltnp`,
		`admin.metrics_listen: "198.51.100.7:9100": 198.51.100.7 is not an address of this host`,
		"2 problems")

	// A config this host can serve.
	good := fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = \"127.0.0.1:0\"\n[admin]\nsocket = %q\nmetrics_listen = \"localhost:0\"\n[[multicast.channel]]\nname = \"ok\"\ngroup = \"239.255.0.12:7400\"\ninterface = \"lo\"\ntopics = [\"m.>\"]\nkey = \"k\"\n",
		filepath.Join(dir, "good", "data"), filepath.Join(dir, "good", "run", "admin.sock"))
	code, out = checkConfig(t, "", good)
	if code != 0 || !strings.Contains(out, "configuration ok") {
		t.Errorf("good config: exit %d, want 0 and \"configuration ok\"\n%s", code, out)
	}
	if os.Geteuid() == 0 && !strings.Contains(out, "note: checked as root") {
		t.Errorf("good config checked as root: no note that root's rights are not the service's:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "good")); err == nil {
		t.Errorf("--check-config created %s: a check must not change the host", filepath.Join(dir, "good"))
	}
}

// TestCheckConfig_RunningDaemon: "check, then restart" while the daemon
// runs: its own ports are in use by it, which is no problem (it holds the
// data directory's lock and frees them when it stops).
func TestCheckConfig_RunningDaemon(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	path := filepath.Join(dir, "herald.toml")
	src := fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	startChild(t, filepath.Join(dir, "data"), addr, "--config", path)
	code, out := checkConfig(t, path, "")
	if code != 0 || !strings.Contains(out, "configuration ok") {
		t.Errorf("check of the running daemon's config: exit %d, want 0 and \"configuration ok\"\n%s", code, out)
	}
	wantAll(t, "running daemon", out, `note: stomp.listen: "`+addr+`": in use by the running heraldd (pid`)
}

// TestStartup_BindFailureSaysWhy: the daemon refuses to start with the same
// report as --check-config: an occupied port says "address already in use"
// and how to find the holder, exit 69; an invalid address is a config error
// (78) naming the key.
func TestStartup_BindFailureSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name, listen string
		code         int
		wants        []string
	}{
		{"in use", "", 69, []string{"cannot serve this configuration now: 1 problem (not starting)", "address already in use", "ss -ltnp", "stomp.listen"}},
		{"not an IP", "999.1.1.1:61613", 78, []string{"invalid configuration: 1 problem (not starting)", "999.1.1.1 is not a valid IP address", "stomp.listen"}},
		{"lookup", "no-such-host.invalid:61613", 78, []string{"cannot resolve", "no-such-host.invalid", "stomp.listen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listen := tc.listen
			if listen == "" {
				listen = occupy(t)
			}
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "--data-dir", filepath.Join(dir, "data"), "--stomp-listen", listen)
			cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Fatalf("heraldd --stomp-listen %s: %v, want exit %d\n%s", listen, err, tc.code, out)
			}
			wantAll(t, tc.name, string(out), tc.wants...)
		})
	}
}

// TestBindProblem_PrivilegedPort: a bind refused with EACCES (a port below
// 1024 without CAP_NET_BIND_SERVICE; tests run as root, which may bind
// them, so the kernel's error is made here) names the capability and the
// alternative.
func TestBindProblem_PrivilegedPort(t *testing.T) {
	err := &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EACCES)}
	p := bindProblem("stomp.listen", "0.0.0.0:613", err)
	if p.sev != sevConfig || !strings.Contains(p.msg, "CAP_NET_BIND_SERVICE") || !strings.Contains(p.msg, "from 1024 up") {
		t.Errorf("EACCES: got %+v, want a config problem naming CAP_NET_BIND_SERVICE and ports from 1024", p)
	}
}

// A multicast channel's previous_key_file (a key rotation) is read by
// --check-config as key_file is: a missing one is reported, not found at the
// start.
func TestCheckConfig_PreviousKeyFile(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "new.key")
	if err := os.WriteFile(key, []byte("new-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = \"127.0.0.1:0\"\n[admin]\nsocket = %q\n[[multicast.channel]]\nname = \"rot\"\ngroup = \"239.255.0.13:7400\"\ninterface = \"lo\"\ntopics = [\"r.>\"]\nkey_file = %q\nkey_id = 2\nprevious_key_file = %q\nprevious_key_id = 1\n",
		filepath.Join(dir, "data"), filepath.Join(dir, "admin.sock"), key, filepath.Join(dir, "old.key"))
	code, out := checkConfig(t, "", src)
	if code != 78 || !strings.Contains(out, "multicast.channel[0].previous_key_file") || !strings.Contains(out, "old.key: no such file") {
		t.Fatalf("--check-config with a missing previous_key_file: exit %d\n%s", code, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "old.key"), []byte("old-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := checkConfig(t, "", src); code != 0 {
		t.Fatalf("--check-config with both keys: exit %d\n%s", code, out)
	}
}

// An admin socket path whose directory leaves no room for the temporary
// name the socket is bound under first (DIR/.hNNNNNNNNNN/s) is refused by
// --check-config, though the path itself fits in 107 bytes (the check
// still counted the old PATH.PID.tmp name: it passed, and the bind failed
// at start); one with room passes.
func TestCheckConfig_SocketPathWithTempName(t *testing.T) {
	base := t.TempDir()
	deep := filepath.Join(base, strings.Repeat("d", 92-len(base))) // 93 bytes
	if err := os.MkdirAll(deep, 0o750); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	src := func(sock string) string {
		return fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = \"127.0.0.1:0\"\n[admin]\nsocket = %q\n", data, sock)
	}
	sock := filepath.Join(deep, "s") // 95 bytes: fits, its temporary name (108) does not
	code, out := checkConfig(t, "", src(sock))
	if code != 78 || !strings.Contains(out, "temporary name") {
		t.Fatalf("socket %s (%d bytes, temporary name %d): exit %d, output:\n%s\nwant 78 naming the temporary name", sock, len(sock), len(deep)+len("/.h4294967295/s"), code, out)
	}
	short := filepath.Join(base, "admin.sock")
	if code, out := checkConfig(t, "", src(short)); strings.Contains(out, "temporary name") {
		t.Fatalf("socket %s: exit %d, output:\n%s", short, code, out)
	}
}

// TestCheckConfig_AdminSocketLocked: --check-config said "configuration
// ok" for an admin.socket whose lock (PATH.lock) a live daemon holds,
// and the start then failed with exit 69. The running daemon of the
// config's own data directory holding it is a note, as its ports are
// ("check, then restart"); another daemon holding it is a problem naming
// admin.socket and that daemon's pid, exit 69.
func TestCheckConfig_AdminSocketLocked(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	addr := freeAddr(t)
	own := filepath.Join(dir, "own.toml")
	src := fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n[admin]\nsocket = %q\n", filepath.Join(dir, "data"), addr, sock)
	if err := os.WriteFile(own, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startChild(t, filepath.Join(dir, "data"), addr, "--config", own)
	pid := fmt.Sprintf("pid %d", a.cmd.Process.Pid)

	code, out := checkConfig(t, own, "")
	if code != 0 || !strings.Contains(out, "configuration ok") {
		t.Errorf("check of the running daemon's own config: exit %d, want 0 and \"configuration ok\"\n%s", code, out)
	}
	wantAll(t, "running daemon's own admin.socket", out,
		`note: admin.socket: "`+sock+`": in use by the running heraldd (`+pid+`)`)

	// Another data directory and port, the same admin.socket.
	code, out = checkConfig(t, "", fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n[admin]\nsocket = %q\n",
		filepath.Join(dir, "other"), freeAddr(t), sock))
	if code != 69 || strings.Contains(out, "configuration ok") {
		t.Errorf("check of another config with the running daemon's admin.socket: exit %d, want 69\n%s", code, out)
	}
	wantAll(t, "another daemon's admin.socket", out, "cannot serve this configuration now",
		"admin.socket: ", sock+".lock", "held by another heraldd ("+pid+")")
}
