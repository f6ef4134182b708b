package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holdShared takes a shared flock on each path, as heraldd --check-config
// does for a moment to learn whether a daemon holds it (lockHolder, and
// admin.SocketLockHolder for the admin socket's lock file), and releases
// them after d.
func holdShared(t *testing.T, d time.Duration, paths ...string) {
	t.Helper()
	var fs []*os.File
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
			t.Fatalf("shared lock on %s: %v", p, err)
		}
		fs = append(fs, f)
	}
	time.AfterFunc(d, func() {
		for _, f := range fs {
			f.Close()
		}
	})
}

// startThrough starts heraldd with args and expects it to serve on addr
// within 30 s; an exit first fails the test with why.
func startThrough(t *testing.T, addr, why string, args ...string) {
	t.Helper()
	_, out, done := startWatched(t, args...)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("%s: heraldd exited: %v\n%s", why, err, out.String())
		case <-deadline:
			t.Fatalf("%s: heraldd did not listen on %s within 30s\n%s", why, addr, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if c, err := dialTCP(addr); err == nil {
			c.Close()
			return
		}
	}
}

// heraldd --check-config takes a shared lock on the data directory and on
// heraldd.lock for a moment; a daemon starting in that moment was refused
// with exit 75 ("locked by another heraldd") although no daemon ran. It
// must wait that moment out and start.
func TestDataDirLock_CheckHoldingItDoesNotRefuse(t *testing.T) {
	dir := t.TempDir()
	lf := filepath.Join(dir, "heraldd.lock")
	if err := os.WriteFile(lf, nil, 0o640); err != nil { // left by an earlier run
		t.Fatal(err)
	}
	holdShared(t, 400*time.Millisecond, dir, lf)
	addr := freeAddr(t)
	startThrough(t, addr, "a check held the data directory's lock as heraldd started",
		"--data-dir", dir, "--stomp-listen", addr, "--log-level", "warn")
}

// The same for the admin socket's lock file, which --check-config locks
// shared for a moment (admin.SocketLockHolder) to tell whether another
// daemon holds it: the start was refused with exit 69.
func TestAdminSocket_CheckHoldingItsLockDoesNotRefuse(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	if err := os.WriteFile(sock+".lock", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	holdShared(t, 400*time.Millisecond, sock+".lock")
	addr := freeAddr(t)
	startThrough(t, addr, "a check held the admin socket's lock as heraldd started",
		"--data-dir", t.TempDir(), "--stomp-listen", addr, "--admin-socket", sock, "--log-level", "warn")
}

// A daemon that holds the locks still refuses a second one, with the same
// exit and message, within about a second of waiting.
func TestDataDirLock_RefusalStillPrompt(t *testing.T) {
	dir := t.TempDir()
	first := startChild(t, dir, freeAddr(t))
	addr := freeAddr(t)
	began := time.Now()
	code, out := startRefused(t, addr, "second heraldd on a locked data directory",
		"--data-dir", dir, "--stomp-listen", addr, "--admin-socket", filepath.Join(t.TempDir(), "b.sock"), "--log-level", "warn")
	took := time.Since(began)
	pid := fmt.Sprintf("pid %d", first.cmd.Process.Pid)
	if code != 75 || !strings.Contains(out, "locked by another heraldd") || !strings.Contains(out, pid) {
		t.Errorf("second heraldd on a locked data directory: exit %d, want 75 naming %s\n%s", code, pid, out)
	}
	if took > 5*time.Second {
		t.Errorf("second heraldd on a locked data directory refused after %v, want about a second", took)
	}
	t.Logf("refused after %v", took.Round(time.Millisecond))
}

func dialTCP(addr string) (interface{ Close() error }, error) {
	return net.DialTimeout("tcp", addr, 100*time.Millisecond)
}
