package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
)

// Two daemons with their own data directories and ports but the same
// admin.socket, started at once: each found the path free, bound its
// socket beside it and renamed it into place, and the second rename
// replaced the first's socket (herald then talks to the other daemon, and
// the first's shutdown removes the second's socket). Here the first pauses
// with its socket bound (HERALDD_TEST_ADMIN_BIND_PAUSE) and the second
// starts in that window: it must refuse, exit 69 naming admin.socket and
// the first's pid, and the socket must be the first's. Before the fix the
// second served.
func TestAdminSocket_TwoDaemonsAtOnce(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	addrA := freeAddr(t)
	a := exec.Command(os.Args[0], "--data-dir", t.TempDir(), "--stomp-listen", addrA, "--admin-socket", sock, "--log-level", "warn")
	a.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1", "HERALDD_TEST_ADMIN_BIND_PAUSE=5s")
	var outA logBuf
	a.Stderr = &outA
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	doneA := make(chan error, 1)
	go func() { doneA <- a.Wait() }()
	t.Cleanup(func() {
		a.Process.Kill()
		<-doneA
	})
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(outA.String(), "test: admin socket bound"); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-doneA:
			doneA <- err
			t.Fatalf("first heraldd exited: %v\n%s", err, outA.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("first heraldd did not bind its admin socket within 30s\n%s", outA.String())
		}
	}
	addrB := freeAddr(t)
	// It listens on STOMP before it opens the admin socket: only its exit tells.
	code, out := startRefused(t, "", "a second heraldd took the admin.socket of one starting",
		"--data-dir", t.TempDir(), "--stomp-listen", addrB, "--admin-socket", sock, "--log-level", "warn")
	pid := fmt.Sprintf("pid %d", a.Process.Pid)
	if code != 69 || !strings.Contains(out, "admin.socket") || !strings.Contains(out, pid) {
		t.Errorf("second heraldd on the admin.socket of one starting: exit %d, want 69 naming admin.socket and %s\n%s", code, pid, out)
	}
	t.Logf("the second heraldd, refused: %s", lastLines(out, 1))
	// The first goes on (its pause ends) and serves the socket.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for admin.NewClient(sock).Ready(ctx) != nil {
		if ctx.Err() != nil {
			t.Fatalf("first heraldd's admin socket %s not ready in 30s\n%s", sock, outA.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := admin.NewClient(sock).Status(ctx)
	if err != nil {
		t.Fatalf("status on %s: %v", sock, err)
	}
	if st.PID != a.Process.Pid {
		t.Errorf("%s is served by pid %d, want the first heraldd's %d", sock, st.PID, a.Process.Pid)
	}
}
