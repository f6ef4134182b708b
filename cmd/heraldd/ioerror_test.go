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
