package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// runChild runs heraldd with args to its end (it must exit by itself) and
// returns its exit code and stderr.
func runChild(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), errb.String()
	}
	t.Fatalf("run heraldd: %v", err)
	return 0, ""
}

// Binding a non-loopback address without users or allow_anonymous refuses
// to start (and --check-config says so), with the way out in the message.
func TestAuth_RefusesExposedListenerWithoutUsers(t *testing.T) {
	dir := t.TempDir()
	code, out := runChild(t, "--data-dir", dir, "--stomp-listen", "0.0.0.0:0")
	if code != 78 || !strings.Contains(out, "auth.users_file") || !strings.Contains(out, "auth.allow_anonymous = true") {
		t.Fatalf("start on 0.0.0.0 without users: exit %d\n%s\nwant 78 naming auth.users_file and auth.allow_anonymous", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "herald.db")); err == nil {
		t.Fatal("the refused start opened the journal")
	}
	code, out = checkConfig(t, "", "[stomp]\nlisten = \"0.0.0.0:61613\"\n")
	if code != 78 || !strings.Contains(out, "stomp.listen") {
		t.Fatalf("--check-config: exit %d %s", code, out)
	}
	code, out = checkConfig(t, "", "[stomp]\nlisten = \"0.0.0.0:61613\"\n[auth]\nallow_anonymous = true\n")
	if code != 0 {
		t.Fatalf("--check-config with allow_anonymous: exit %d %s", code, out)
	}
	code, out = checkConfig(t, "", "[stomp]\ntls_listen = \"127.0.0.1:0\"\ntls_cert = \"/nonexistent/server.crt\"\ntls_key = \"/nonexistent/server.key\"\n")
	if code != 78 || !strings.Contains(out, "stomp.tls_cert") || !strings.Contains(out, "/nonexistent/server.crt") {
		t.Fatalf("--check-config with a certificate that does not exist: exit %d %s; want 78 naming it", code, out)
	}
	users := filepath.Join(dir, "users.toml")
	code, out = runChild(t, "--check-config", "--stomp-listen", "0.0.0.0:61613", "--users-file", users)
	if code != 78 || !strings.Contains(out, "users.toml: no such file") {
		t.Fatalf("--check-config with a users file that does not exist: exit %d %s; want 78 naming it (the start would fail)", code, out)
	}
	if err := os.WriteFile(users, []byte("[users.alice]\nread = [\"/topic/>\"]\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out = runChild(t, "--check-config", "--stomp-listen", "0.0.0.0:61613", "--users-file", users)
	if code != 0 {
		t.Fatalf("--check-config with --users-file: exit %d %s", code, out)
	}
}

// heraldd --users-file: logins are checked; a users file readable by others
// is warned about; a broken one refuses to start.
func TestAuth_UsersFileFlag(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.toml")
	h, err := auth.HashPassword("pw", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(users, []byte("[users.alice]\npassword = \""+h+"\"\nwrite = [\"/queue/jobs\"]\ncreate = [\"/queue/jobs\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	var errb bytes.Buffer
	c := startChildStderr(t, filepath.Join(dir, "data"), addr, &errb, "--users-file", users, "--log-level", "info")
	defer c.kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, addr, client.Options{Login: "alice", Passcode: "pw"})
	if err != nil {
		t.Fatalf("alice: %v", err)
	}
	if _, err := conn.SendReceipt(ctx, "/queue/jobs", []byte("x")); err != nil {
		t.Fatalf("alice may write /queue/jobs: %v", err)
	}
	conn.Close()
	if _, err := client.Dial(ctx, addr, client.Options{Login: "alice", Passcode: "nope"}); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("wrong password: %v", err)
	}
	c.kill()
	if !strings.Contains(errb.String(), "readable by every user") {
		t.Fatalf("no warning about a world-readable users file in:\n%s", errb.String())
	}
	os.WriteFile(users, []byte("[users.alice]\npassword = \"plain\"\n"), 0o640)
	code, out := runChild(t, "--data-dir", filepath.Join(dir, "data2"), "--stomp-listen", freeAddr(t), "--users-file", users)
	if code != 78 || !strings.Contains(out, "users.alice.password") {
		t.Fatalf("broken users file: exit %d\n%s", code, out)
	}
}

// startChildStderr is startChild with the child's stderr also copied to w.
func startChildStderr(t *testing.T, dir, addr string, w *bytes.Buffer, extra ...string) *child {
	t.Helper()
	args := append([]string{"--data-dir", dir, "--stomp-listen", addr}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	cmd.Stderr = &lockedWriter{w: w}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start heraldd: %v", err)
	}
	c := &child{cmd: cmd, addr: addr}
	t.Cleanup(c.kill)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			conn.Close()
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("heraldd did not listen on %s within 30s:\n%s", addr, w)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
