package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/lazyfs"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestMain lets the test binary act as heraldd in a child process.
func TestMain(m *testing.M) {
	lazyfs.ChildMain() // a child serving a lazyfs mount (powercut_test.go)
	if os.Getenv("HERALDD_TEST_CHILD") == "1" {
		if d, err := time.ParseDuration(os.Getenv("HERALDD_TEST_START_PAUSE")); err == nil {
			// A start that takes its time (a long journal recovery): the
			// test learns it has begun from this line.
			startHook = func() {
				fmt.Fprintln(os.Stderr, "test: recovering the journal")
				time.Sleep(d)
			}
		}
		if d, err := time.ParseDuration(os.Getenv("HERALDD_TEST_ADMIN_BIND_PAUSE")); err == nil {
			// The admin socket bound, not yet in place: the test learns
			// it from this line.
			adminBindHook = func() {
				fmt.Fprintln(os.Stderr, "test: admin socket bound")
				time.Sleep(d)
			}
		}
		os.Exit(run(os.Args[1:]))
	}
	code := m.Run()
	if plainBin != "" {
		os.RemoveAll(filepath.Dir(plainBin))
	}
	os.Exit(code)
}

type child struct {
	cmd  *exec.Cmd
	addr string
}

func startChild(t *testing.T, dir, addr string, extra ...string) *child {
	t.Helper()
	return startChildLog(t, dir, addr, nil, extra...)
}

// startChildLog is startChild with the child's log (its stderr) also
// written to log, if not nil.
func startChildLog(t *testing.T, dir, addr string, log io.Writer, extra ...string) *child {
	t.Helper()
	args := append([]string{"--data-dir", dir, "--stomp-listen", addr, "--log-level", "warn"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	var stderr io.Writer = os.Stderr
	if log != nil {
		stderr = io.MultiWriter(os.Stderr, log)
	}
	// The child is this test binary: under -race its races fail the test.
	cmd.Stderr = testenv.RaceWatch(t, stderr)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start heraldd: %v", err)
	}
	c := &child{cmd: cmd, addr: addr}
	t.Cleanup(c.kill) // also when the test fails; before cleanups registered earlier (mounts)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			conn.Close()
			return c
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("heraldd did not listen on %s within 30s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dumpStacks has the child print every goroutine's stack to its stderr (the
// test's output) and exit (SIGQUIT, Go's runtime): for a child stuck in a
// way its logs do not show.
func (c *child) dumpStacks() {
	c.cmd.Process.Signal(syscall.SIGQUIT)
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// kill sends SIGKILL and reaps the child; harmless when it is gone.
func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func dial2(t *testing.T, addr string) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := client.Dial(ctx, addr, client.Options{})
		if err == nil {
			return c
		}
		if ctx.Err() != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
