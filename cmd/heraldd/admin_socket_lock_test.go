package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	// It claims the admin socket before it listens: it must never serve.
	code, out := startRefused(t, addrB, "a second heraldd took the admin.socket of one starting",
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

// A daemon refused on the admin socket (another daemon holds PATH.lock)
// must be refused before it opens anything or accepts a client: it
// listened on STOMP (and opened its journal, and recovered it) and only
// then, taking the admin socket, learned it could not run, so clients
// were accepted by a daemon about to exit. Here the second daemon passes
// preflight while the path is free, pauses (HERALDD_TEST_START_PAUSE),
// and the first takes the path meanwhile; clients then connect to the
// second's STOMP port in a loop until it has exited. None may get a TCP
// accept (let alone CONNECTED), and the second's data directory must hold
// no journal.
func TestAdminSocket_RefusedBeforeListening(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "admin.sock")
	dirB, addrB := t.TempDir(), freeAddr(t)
	b := exec.Command(os.Args[0], "--data-dir", dirB, "--stomp-listen", addrB, "--admin-socket", sock, "--log-level", "warn")
	b.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1", "HERALDD_TEST_START_PAUSE=3s")
	var outB logBuf
	b.Stdout, b.Stderr = &outB, &outB
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	doneB := make(chan error, 1)
	go func() { doneB <- b.Wait() }()
	t.Cleanup(func() {
		b.Process.Kill()
		<-doneB
	})
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(outB.String(), "test: recovering the journal"); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-doneB:
			doneB <- err
			t.Fatalf("second heraldd exited before its start pause: %v\n%s", err, outB.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("second heraldd did not reach its start pause within 30s\n%s", outB.String())
		}
	}
	// The first takes the admin socket while the second pauses.
	a := startChild(t, t.TempDir(), freeAddr(t), "--admin-socket", sock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for admin.NewClient(sock).Ready(ctx) != nil {
		if ctx.Err() != nil {
			t.Fatalf("first heraldd's admin socket %s not ready in 30s", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-doneB:
		doneB <- err
		t.Fatalf("second heraldd exited during its start pause: %v\n%s", err, outB.String())
	default:
	}
	// Clients connect to the second's STOMP port until it exits.
	var accepted, connected atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addrB, 100*time.Millisecond)
				if err != nil {
					continue
				}
				accepted.Add(1)
				c.SetDeadline(time.Now().Add(2 * time.Second))
				fmt.Fprintf(c, "CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
				buf := make([]byte, 9)
				if n, _ := io.ReadFull(c, buf); n == len(buf) && string(buf) == "CONNECTED" {
					connected.Add(1)
				}
				c.Close()
			}
		}()
	}
	var err error
	select {
	case err = <-doneB:
		doneB <- err
	case <-time.After(30 * time.Second):
		t.Fatalf("second heraldd still runs 30s after the first took its admin socket\n%s", outB.String())
	}
	close(stop)
	wg.Wait()
	var ee *exec.ExitError
	pid := fmt.Sprintf("pid %d", a.cmd.Process.Pid)
	if !errors.As(err, &ee) || ee.ExitCode() != 69 || !strings.Contains(outB.String(), "admin.socket") || !strings.Contains(outB.String(), pid) {
		t.Errorf("second heraldd, its admin.socket taken during its start: %v, want exit 69 naming admin.socket and %s\n%s", err, pid, outB.String())
	}
	if n := accepted.Load(); n > 0 {
		t.Errorf("the refused heraldd accepted %d TCP connections on %s (%d got CONNECTED): it listened before it had claimed its admin socket", n, addrB, connected.Load())
	}
	if _, err := os.Stat(filepath.Join(dirB, "herald.db")); err == nil {
		t.Errorf("the refused heraldd created its journal %s: it opened it before it had claimed its admin socket", filepath.Join(dirB, "herald.db"))
	}
}
