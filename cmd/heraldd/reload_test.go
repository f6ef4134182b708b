package main

import (
	"context"
	"fmt"
	"github.com/herald-mq/herald/admin"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/internal/testenv"
)

// logBuf collects a child's standard error.
type logBuf struct{ testenv.LogBuffer }

// waitLog waits until the log holds want after offset from, and returns
// the offset past it.
func (l *logBuf) waitLog(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := l.String()
		if i := strings.Index(s[from:], want); i >= 0 {
			return from + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("heraldd did not log %q within 15s; its log since the last step:\n%s", want, s[from:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startWithConfig runs heraldd --config path (no other flag: the file
// decides, the log level too) and waits until it listens on addr.
func startWithConfig(t *testing.T, path, addr string) (*child, *logBuf) {
	t.Helper()
	log := &logBuf{}
	cmd := exec.Command(os.Args[0], "--config", path)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	cmd.Stderr = testenv.RaceWatch(t, log)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, addr: addr}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("heraldd log:\n%s", log)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			conn.Close()
			return c, log
		}
		if time.Now().After(deadline) {
			t.Fatalf("heraldd did not listen on %s within 30s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const reloadConfig = `data_dir = %q
[stomp]
listen = %q
max_body_bytes = %d
[journal]
sync = %q
[[queues.policy]]
match = "lim"
max_messages = %d
full_policy = "reject"
[admin]
socket = %q
[log]
level = %q
`

// TestReload_SIGHUP: a SIGHUP applies the reloadable keys to a client that
// stays connected (a lower stomp.max_body_bytes refuses its next large SEND
// naming the setting; a higher max_messages of a queue policy takes a SEND
// the old one refused; the log level changes), logs the changed
// restart-only keys by name, and refuses an invalid file with the running
// config intact.
func TestReload_SIGHUP(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	path := filepath.Join(dir, "herald.toml")
	write := func(maxBody, maxMsgs int, sync, level string) {
		src := fmt.Sprintf(reloadConfig, filepath.Join(dir, "data"), addr, maxBody, sync, maxMsgs, filepath.Join(dir, "admin.sock"), level)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(1000, 1, "full", "info")
	ch, log := startWithConfig(t, path, addr)
	hup := func() {
		if err := ch.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	c := dial2(t, addr) // stays connected throughout
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.SendReceipt(ctx, "/queue/lim", []byte("one")); err != nil {
		t.Fatal(err)
	}
	// The policy's max_messages = 1 refuses a second (reject: ERROR).
	p := dial2(t, addr)
	if _, err := p.SendReceipt(ctx, "/queue/lim", []byte("two")); err == nil || !strings.Contains(err.Error(), "max_messages=1") {
		t.Fatalf("second SEND to /queue/lim at max_messages=1: %v, want refused by max_messages=1", err)
	}
	p.Close()

	// Reload: lower max_body_bytes, raise max_messages, debug logs, and a
	// restart-only change.
	write(100, 5, "normal", "debug")
	hup()
	at := log.waitLog(t, 0, "SIGHUP: configuration reloaded")
	line := log.String()[at:]
	line = line[:strings.IndexByte(line, '\n')]
	for _, k := range []string{"log.level", "queues.policy", "stomp.max_body_bytes"} {
		if !strings.Contains(line, k) {
			t.Errorf("reload log line %q does not name the applied key %s", line, k)
		}
	}
	log.waitLog(t, at, `need a restart (systemctl restart herald); until then they keep their old values" keys=journal.sync`)
	// The admin API serves the configuration in force: reloaded keys new,
	// restart-only keys old.
	ac := admin.NewClient(filepath.Join(dir, "admin.sock"))
	defer ac.Close()
	cur, err := ac.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ac.Status(ctx); err != nil {
		t.Error(err)
	} else if len(st.RestartNeeded) != 1 || st.RestartNeeded[0] != "journal.sync" {
		t.Errorf("status after the reload: restart_needed %v, want [journal.sync]", st.RestartNeeded)
	}
	if cur.Stomp.MaxBodyBytes != 100 || cur.Journal.Sync != "full" {
		t.Errorf("GET /v1/config after the reload: max_body_bytes %d (want 100, reloaded), journal.sync %q (want the old \"full\": restart-only)", cur.Stomp.MaxBodyBytes, cur.Journal.Sync)
	}

	if _, err := c.SendReceipt(ctx, "/queue/lim", []byte("two")); err != nil {
		t.Errorf("SEND to /queue/lim after max_messages was raised to 5 by SIGHUP: %v", err)
	}
	// Debug now: a new connection is logged at debug.
	d := dial2(t, addr)
	d.Close()
	at = log.waitLog(t, at, "client connected")

	// An invalid file: refused, the old config entirely in force.
	if err := os.WriteFile(path, []byte(strings.Replace(fmt.Sprintf(reloadConfig, filepath.Join(dir, "data"), addr, 10, "normal", 1, filepath.Join(dir, "admin.sock"), "error"), `full_policy = "reject"`, `full_policy = "sometimes"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	hup()
	at = log.waitLog(t, at, "SIGHUP: configuration not reloaded; the running one stays in force, unchanged")
	at = log.waitLog(t, at, `queues.policy[0].full_policy: \"sometimes\"`)
	// Still debug (the invalid file said error).
	d = dial2(t, addr)
	d.Close()
	log.waitLog(t, at, "client connected")
	// max_body_bytes stayed 100 (not 10), max_messages 5 (not 1), debug.
	if _, err := c.SendReceipt(ctx, "/queue/lim", []byte(strings.Repeat("x", 50))); err != nil {
		t.Errorf("SEND of 50 bytes (third message) after the invalid reload: %v; want the old max_body_bytes 100 and max_messages 5 in force", err)
	}
	// And the lower max_body_bytes holds for the connection opened before
	// the first reload: ERROR naming the setting.
	_, err = c.SendReceipt(ctx, "/queue/r", []byte(strings.Repeat("x", 500)))
	if err == nil || !strings.Contains(err.Error(), "stomp.max_body_bytes") {
		t.Errorf("SEND of 500 bytes after max_body_bytes=100: %v, want an ERROR naming stomp.max_body_bytes", err)
	}
}
