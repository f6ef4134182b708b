package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/internal/testenv"
)

// The back-off doubles from min to max, jittered into [d/2, d], and starts
// over after reset. Seeded, so the sequence is the same every run.
func TestBackoff(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		b := backoff{min: 100 * time.Millisecond, max: 10 * time.Second}
		ceil := b.min
		for i := 0; i < 20; i++ {
			d := b.next(r)
			if d < ceil/2 || d > ceil {
				t.Fatalf("seed %d attempt %d: %v outside [%v, %v]", seed, i, d, ceil/2, ceil)
			}
			ceil = min(2*ceil, b.max)
		}
		if ceil != b.max {
			t.Fatalf("seed %d: ceiling %v after 20 attempts, want the cap %v", seed, ceil, b.max)
		}
		b.reset()
		if d := b.next(r); d > b.min {
			t.Fatalf("seed %d: %v after reset, want at most %v", seed, d, b.min)
		}
	}
}

var (
	daemonOnce sync.Once
	daemonPath string
	daemonErr  error
)

// buildHeraldd builds the daemon once per test run.
func buildHeraldd(t *testing.T) string {
	t.Helper()
	daemonOnce.Do(func() {
		dir, err := os.MkdirTemp("", "heraldd-bin-")
		if err != nil {
			daemonErr = err
			return
		}
		daemonPath = filepath.Join(dir, "heraldd")
		args := append(append([]string{"build"}, testenv.GoBuildFlags()...), "-o", daemonPath, "../heraldd")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			daemonErr = fmt.Errorf("go build heraldd: %v: %s", err, out)
		}
	})
	if daemonErr != nil {
		t.Fatal(daemonErr)
	}
	return daemonPath
}

// startHeraldd runs the real daemon on dir and addr until the test ends
// (or the returned stop kills it with SIGKILL: a crash).
func startHeraldd(t *testing.T, bin, dir, addr string) (stop func()) {
	t.Helper()
	cmd := exec.Command(bin, "--data-dir", dir, "--stomp-listen", addr, "--log-level", "warn",
		"--admin-socket", filepath.Join(dir, "admin.sock"))
	cmd.Stderr = testenv.RaceWatch(t, os.Stderr)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start heraldd: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("heraldd did not listen on %s within 30s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReceive_ReconnectAcrossRestart: herald receive --reconnect with client
// acks under a heraldd that crashes (SIGKILL) and comes back on the same
// data directory. The receiver is held with messages delivered and not yet
// acknowledged (its stdout is not read, so it blocks writing them); after
// the restart it reconnects, resubscribes, and every message, those sent
// before the crash and those sent after the restart, is printed at least
// once.
func TestReceive_ReconnectAcrossRestart(t *testing.T) {
	daemon := buildHeraldd(t)
	cli := buildHerald(t)
	dir := t.TempDir()
	addr := closedAddr(t)
	stop := startHeraldd(t, daemon, dir, addr)

	pad := strings.Repeat("x", 16<<10) // 16 KiB bodies: a few fill the stdout pipe
	send := func(from, to int) {
		t.Helper()
		var in strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&in, "msg-%03d %s\n", i, pad)
		}
		if code, _, stderr := runCLI(t, in.String(), "--server", addr, "send", "--receipt", "/queue/rc"); code != 0 {
			t.Fatalf("send %d..%d: exit %d: %s", from, to, code, stderr)
		}
	}
	send(0, 30)

	recv := exec.Command(cli, "--server", addr, "receive", "--reconnect", "--ack", "client-individual", "--prefetch", "10", "/queue/rc")
	stdout, err := recv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	recv.Stderr = testenv.RaceWatch(t, &stderr)
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Process.Kill(); recv.Wait() })

	// Wait until the receiver holds unacknowledged messages: it is blocked
	// on its full stdout pipe with more prefetched.
	ac := admin.NewClient(filepath.Join(dir, "admin.sock"))
	defer ac.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		q, err := ac.Queue(ctx, "rc")
		cancel()
		if err == nil && q.InFlight > 0 {
			time.Sleep(300 * time.Millisecond) // let it settle blocked
			if q2, err := ac.Queue(context.Background(), "rc"); err == nil && q2.InFlight > 0 && q2.Acked == q.Acked {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver never held messages in flight (last: %+v, %v)", q, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	stop() // crash, with deliveries unacknowledged
	startHeraldd(t, daemon, dir, addr)
	send(30, 40)

	seen := map[string]int{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(60 * time.Second)
	for len(seen) < 40 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("receiver ended early, %d of 40 seen; stderr: %s", len(seen), stderr.String())
			}
			id, body, _ := strings.Cut(l, " ")
			if body != pad {
				t.Fatalf("bad line %.40q", l)
			}
			seen[id]++
		case <-timeout:
			t.Fatalf("after 60s %d of 40 messages seen; stderr: %s", len(seen), stderr.String())
		}
	}
	for i := 0; i < 40; i++ {
		if seen[fmt.Sprintf("msg-%03d", i)] == 0 {
			t.Errorf("msg-%03d lost", i)
		}
	}
	recv.Process.Signal(syscall.SIGTERM)
	go func() {
		for range lines {
		}
	}()
	if err := recv.Wait(); err != nil {
		t.Errorf("receiver after SIGTERM: %v; stderr: %s", err, stderr.String())
	}
	mustContain(t, "receiver stderr", stderr.String(), "reconnecting in", "reconnected to "+addr)
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("40 messages, %d printed again after the crash (at least once: redelivered, not lost)", dups)
}
