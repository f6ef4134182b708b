package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A disk that fails the WAL's fsync under a running heraldd: the client
// whose SEND's commit met the error gets an ERROR saying the message may or
// may not be stored (not "not stored": its commit record may be in the
// WAL), no RECEIPT; heraldd exits with 74 (EX_IOERR) instead of going on
// committing on a disk that failed (the unit restarts it); the next start
// recovers every receipted message, each once. Before, the ERROR said
// "message not stored" and heraldd went on.
func TestJournalFsyncErrorExits74(t *testing.T) {
	p := newPowerCut(t, "full", `checkpoint_interval = "50ms"`)
	const queue = "io-error"
	c := dial2(t, p.addr)
	var bodies []string
	for i := range 40 {
		bodies = append(bodies, fmt.Sprintf("m%d", i))
	}
	sendAll(t, c, queue, bodies, nil)
	// Idle: the checkpointer truncates the WAL, so that its own WAL sync
	// does not take the fault meant for the next commit.
	exited := p.idleAndWatchExit(t)
	p.fs.FailFsyncs("herald.db-wal", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.SendReceipt(ctx, "/queue/"+queue, []byte("failing"))
	if err == nil {
		t.Fatal("SEND whose commit's fsync failed got a RECEIPT")
	}
	if !strings.Contains(err.Error(), "may or may not be stored") {
		t.Fatalf("SEND whose commit's fsync failed: %v, want an ERROR saying it may or may not be stored", err)
	}
	if n := p.fs.FsyncFaults(); n != 1 {
		t.Fatalf("%d fsync faults returned, want 1", n)
	}
	select {
	case code := <-exited:
		if code != 74 {
			t.Fatalf("heraldd exited with %d after the journal's I/O error, want 74", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("heraldd still running 30 s after its journal's fsync failed")
	}
	p.start()
	c2 := dial2(t, p.addr)
	seen, _ := drainQueue(t, c2, queue, 200*time.Millisecond)
	for _, b := range bodies {
		if seen[b] != 1 {
			t.Errorf("receipted message %s delivered %d times after the restart, want once", b, seen[b])
		}
	}
	if n := seen["failing"]; n > 1 {
		t.Errorf("the failed SEND's message delivered %d times", n)
	}
	t.Logf("after the restart: %d receipted messages back; the failed one delivered %d times (0 or 1 are both right)", len(bodies), seen["failing"])
}

// After the journal's I/O error, heraldd exits promptly even with work in
// flight whose journaling now fails: a consumer holding unacknowledged
// messages (their return at session end), a lock holder with a waiter
// (the grant passed on at its end), a KV write. Each of those is refused
// by the stopped journal; none may hold the exit up (the shutdown's bound
// is 30 s).
func TestJournalIOErrorExitsPromptly(t *testing.T) {
	p := newPowerCut(t, "full", `checkpoint_interval = "50ms"`)
	const queue = "io-busy"
	c := dial2(t, p.addr)
	var bodies []string
	for i := range 40 {
		bodies = append(bodies, fmt.Sprintf("m%d", i))
	}
	sendAll(t, c, queue, bodies, nil)
	cons := dial2(t, p.addr)
	sub, err := cons.Subscribe("/queue/"+queue, "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		select {
		case <-sub.C():
		case <-time.After(10 * time.Second):
			t.Fatal("no MESSAGE within 10 s")
		}
	}
	holder, waiter := dial2(t, p.addr), dial2(t, p.addr)
	hs, err := holder.Subscribe("/lock/l", "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hs.C():
	case <-time.After(10 * time.Second):
		t.Fatal("lock not granted within 10 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := waiter.SubscribeReceipt(ctx, "/lock/l", ""); err != nil {
		t.Fatal(err)
	}
	exited := p.idleAndWatchExit(t)
	p.fs.FailFsyncs("herald.db-wal", 1)
	start := time.Now()
	if _, err := c.SendReceipt(ctx, "/queue/"+queue, []byte("failing")); err == nil {
		t.Fatal("SEND whose commit's fsync failed got a RECEIPT")
	}
	select {
	case code := <-exited:
		took := time.Since(start)
		t.Logf("heraldd exited %s after the I/O error", took.Round(time.Millisecond))
		if code != 74 {
			t.Fatalf("heraldd exited with %d, want 74", code)
		}
		if took > 5*time.Second {
			t.Fatalf("heraldd took %s to exit after the journal's I/O error, want under 5 s", took)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("heraldd still running 40 s after its journal's fsync failed")
	}
}

// idleAndWatchExit waits until heraldd, idle, has had its WAL truncated by
// the checkpointer (so that the checkpointer's own WAL sync does not take
// a fault meant for the next commit), then returns heraldd's exit code
// once it exits.
func (p *powerCut) idleAndWatchExit(t *testing.T) <-chan int {
	t.Helper()
	wal := filepath.Join(p.mnt, "data", "herald", "herald.db-wal")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(wal); err == nil && fi.Size() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WAL of an idle heraldd was not truncated within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(150 * time.Millisecond)
	exited := make(chan int, 1)
	go func() {
		p.d.cmd.Wait()
		exited <- p.d.cmd.ProcessState.ExitCode()
	}()
	return exited
}
