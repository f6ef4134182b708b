package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startWatched starts heraldd (the test binary as its child) with args,
// its output in out; done gets its exit (put it back once read, for the
// cleanup, which kills it and waits).
func startWatched(t *testing.T, args ...string) (*exec.Cmd, *logBuf, chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	out := &logBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return cmd, out, done
}

// startRefused starts heraldd with args and expects it to exit by itself
// within 30 s, and returns its exit code and combined output. If it
// listens on addr instead (it serves; addr "": not checked, for a daemon
// that fails only after it listens), or runs on after 30 s, the test fails
// with why: what it must not have done.
func startRefused(t *testing.T, addr, why string, args ...string) (int, string) {
	t.Helper()
	cmd, out, done := startWatched(t, args...)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err // for the cleanup
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("heraldd exited with %v, want a refusal (non-zero exit)\n%s", err, out.String())
			}
			return ee.ExitCode(), out.String()
		case <-deadline:
			t.Fatalf("%s: the second heraldd (pid %d) still runs after 30s\n%s", why, cmd.Process.Pid, out.String())
		case <-time.After(20 * time.Millisecond):
			if addr == "" {
				continue
			}
			if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
				c.Close()
				t.Fatalf("%s: the second heraldd (pid %d) serves on %s\n%s", why, cmd.Process.Pid, addr, out.String())
			}
		}
	}
}

// Deleting heraldd.lock under a running daemon (a clean-up of the data
// directory) must not let a second daemon open the same journal: the
// first holds its lock on the unlinked file, and the second made and
// locked a new one. The second must exit 75 (as with the file in place),
// naming the running daemon's pid. Before the fix it served: two daemons
// on one SQLite journal.
func TestDataDirLock_LockFileRemoved(t *testing.T) {
	dir := t.TempDir()
	first := startChild(t, dir, freeAddr(t))
	if err := os.Remove(filepath.Join(dir, "heraldd.lock")); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	// Its own port and admin socket: only the data directory is shared.
	code, out := startRefused(t, addr, "heraldd.lock deleted under a running heraldd",
		"--data-dir", dir, "--stomp-listen", addr, "--admin-socket", filepath.Join(t.TempDir(), "b.sock"), "--log-level", "warn")
	pid := fmt.Sprintf("pid %d", first.cmd.Process.Pid)
	if code != 75 || !strings.Contains(out, "locked by another heraldd") || !strings.Contains(out, pid) {
		t.Errorf("second heraldd on the data directory of a running one whose heraldd.lock was deleted: exit %d, want 75 saying it is locked by another heraldd (%s)\n%s", code, pid, out)
	}
	// The first still serves.
	dial2(t, first.addr).Close()
}

// With the lock file in place the refusal names the running daemon's pid
// too.
func TestDataDirLock_NamesPID(t *testing.T) {
	dir := t.TempDir()
	first := startChild(t, dir, freeAddr(t))
	addr := freeAddr(t)
	code, out := startRefused(t, addr, "second heraldd on a locked data directory",
		"--data-dir", dir, "--stomp-listen", addr, "--admin-socket", filepath.Join(t.TempDir(), "b.sock"), "--log-level", "warn")
	pid := fmt.Sprintf("pid %d", first.cmd.Process.Pid)
	if code != 75 || !strings.Contains(out, "locked by another heraldd") || !strings.Contains(out, pid) {
		t.Errorf("second heraldd on a locked data directory: exit %d, want 75 naming %s\n%s", code, pid, out)
	}
}
