package main

import (
	"errors"
	"fmt"
	"github.com/herald-mq/herald/internal/testcert"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// web.tls = true with certificate files that do not exist: --check-config
// runs every check the daemon runs before serving, and a start refused by
// them exits as the check does, 78 for a configuration problem. The check
// passed (exit 0) and the start exited 69, which means a port held by
// another program.
func TestCheckConfig_WebTLSCertChecked(t *testing.T) {
	dir := t.TempDir()
	src := fmt.Sprintf(`data_dir = %q
[stomp]
listen = %q
tls_cert = %q
tls_key = %q
[web]
listen = %q
tls = true
[admin]
socket = %q
`, filepath.Join(dir, "data"), freeAddr(t), filepath.Join(dir, "missing.crt"), filepath.Join(dir, "missing.key"), freeAddr(t), filepath.Join(dir, "admin.sock"))
	path := filepath.Join(dir, "herald.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := checkConfig(t, path, "")
	if code != 78 || !strings.Contains(out, "missing.crt") {
		t.Errorf("heraldd --check-config with web.tls and a missing stomp.tls_cert: exit %d, output %q; want 78 naming the certificate", code, out)
	}
	cmd := exec.Command(os.Args[0], "--config", path)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	sout, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 78 {
		t.Errorf("heraldd start with web.tls and a missing stomp.tls_cert: %v, want exit 78 (a configuration problem; 69 means a port held by another program)\n%s", err, lastLines(string(sout), 3))
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// SIGHUP means "reload" (README, man heraldd). One that arrives while
// heraldd is still starting (recovering its journal: seconds on a large
// one, here a pause of 500 ms as the recovery begins) does not kill it:
// signal.Notify came only after READY, so until then SIGHUP's default
// action ended the process.
func TestStartup_SIGHUPWhileStarting(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "--data-dir", dir, "--stomp-listen", addr, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1", "HERALDD_TEST_START_PAUSE=500ms")
	var out logBuf
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { cmd.Process.Kill(); <-done }()
	for !strings.Contains(out.String(), "test: recovering the journal") {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("heraldd ended before recovering its journal: %v\n%s", err, out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("heraldd ended on a SIGHUP received while starting: %v\n%s", err, out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("heraldd did not listen within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The operator turns the TLS listener off in the file (stomp.tls_listen,
// tls_cert and tls_key removed) and raises log.level: --check-config says
// "configuration ok", and SIGHUP applies log.level, the TLS keys waiting
// for a restart. The whole reload was refused (the running listener's
// certificate was looked for at the new, empty paths) with advice to fix
// the file and check it, which the check then passed: a loop.
func TestReload_TLSTurnedOffInTheFile(t *testing.T) {
	dir := t.TempDir()
	certs := testcert.New(t)
	addr, tlsAddr := freeAddr(t), freeAddr(t)
	path := filepath.Join(dir, "herald.toml")
	base := fmt.Sprintf("data_dir = %q\n[admin]\nsocket = %q\n", filepath.Join(dir, "data"), filepath.Join(dir, "admin.sock"))
	write := func(s string) {
		if err := os.WriteFile(path, []byte(base+s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("[stomp]\nlisten = %q\ntls_listen = %q\ntls_cert = %q\ntls_key = %q\n[log]\nlevel = \"info\"\n", addr, tlsAddr, certs.ServerCert, certs.ServerKey))
	ch, log := startWithConfig(t, path, addr)
	write(fmt.Sprintf("[stomp]\nlisten = %q\n[log]\nlevel = \"debug\"\n", addr))
	if code, out := checkConfig(t, path, ""); code != 0 {
		t.Fatalf("--check-config of the new file: exit %d\n%s", code, out)
	}
	mark := len(log.String())
	ch.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := log.String()[mark:]
		if strings.Contains(s, "configuration reloaded") {
			return
		}
		if i := strings.Index(s, "configuration not reloaded"); i >= 0 {
			t.Fatalf("SIGHUP of a file --check-config accepts was refused whole:\n%s", lastLines(s[i:], 2))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged:\n%s", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A [[bridge]] whose tls_ca holds no certificate: --check-config reports it
// (exit 78), and a start is refused by the same check before it listens.
// Before, the check passed, and the daemon listened, accepted clients,
// then exited 78 when it made the bridge.
func TestCheckConfig_BridgeTLSFilesChecked(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`data_dir = %q
[stomp]
listen = %q
[admin]
socket = %q
[[bridge]]
name = "backbone"
kind = "jetstream"
direction = "out"
urls = ["nats://127.0.0.1:4222"]
stream = "HERALD"
appliance_id = "site-a"
tls = true
tls_ca = %q
[[bridge.map]]
local = "/queue/orders"
remote = "sites.a.orders"
`, filepath.Join(dir, "data"), freeAddr(t), filepath.Join(dir, "admin.sock"), ca)
	path := filepath.Join(dir, "herald.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := checkConfig(t, path, "")
	if code != 78 || !strings.Contains(out, "tls_ca") || !strings.Contains(out, "bridge[0] (backbone)") {
		t.Errorf("heraldd --check-config with a bridge tls_ca holding no certificate: exit %d, output %q; want 78 naming bridge[0] and tls_ca", code, out)
	}
	cmd := exec.Command(os.Args[0], "--config", path)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	sout, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 78 {
		t.Errorf("heraldd start with a bad bridge tls_ca: %v, want exit 78\n%s", err, lastLines(string(sout), 3))
	}
	if strings.Contains(string(sout), "journal") || strings.Contains(string(sout), "heraldd ready") {
		t.Errorf("heraldd start with a bad bridge tls_ca got past the checks before it was refused:\n%s", lastLines(string(sout), 5))
	}
}
