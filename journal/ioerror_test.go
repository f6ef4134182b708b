package journal_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/lazyfs"
	"github.com/herald-mq/herald/journal"
)

// A failed fsync of the WAL at a commit: the batch's outcome is unknown
// (its commit record may be in the WAL, written but not known durable), so
// its error says so (appliance.ErrOutcomeUnknown), not "not stored"; the
// journal stops (Stopped, Failure) and refuses every later batch with
// appliance.ErrJournalStopped, committing nothing more on a disk that
// failed; Close returns at once; what was committed before is there when
// the journal is opened again. Before, the error read "journal: commit:
// disk I/O error" and the journal went on committing.
func TestStore_FsyncErrorStopsJournal(t *testing.T) {
	backing, mnt := t.TempDir(), t.TempDir()
	fs, err := lazyfs.Mount(t, backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Unmount()
	path := filepath.Join(mnt, "herald.db")
	cfg := journal.Config{Path: path, Sync: "full", CheckpointInterval: 20 * time.Millisecond}
	s := journal.New(cfg)
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(s, "q", "before"); err != nil {
		t.Fatal(err)
	}
	// Let the checkpointer finish with that commit (an idle journal's WAL
	// is truncated): its own WAL sync must not take the fault.
	waitIdleWAL(t, s)
	select {
	case <-s.Stopped():
		t.Fatal("journal stopped before any fault")
	default:
	}
	fs.FailFsyncs("herald.db-wal", 1)
	err = enqueue(s, "q", "during")
	if !errors.Is(err, appliance.ErrOutcomeUnknown) {
		t.Fatalf("commit whose WAL fsync failed: error %v, want one wrapping ErrOutcomeUnknown", err)
	}
	if fs.FsyncFaults() != 1 {
		t.Fatalf("%d fsync faults returned, want 1", fs.FsyncFaults())
	}
	select {
	case <-s.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("journal not stopped after the I/O error")
	}
	if s.Failure() == nil {
		t.Fatal("Failure is nil after the journal stopped")
	}
	// The disk works again: the journal still takes nothing.
	err = enqueue(s, "q", "after")
	if !errors.Is(err, appliance.ErrJournalStopped) || errors.Is(err, appliance.ErrOutcomeUnknown) {
		t.Fatalf("batch after the stop: error %v, want ErrJournalStopped (nothing stored)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close after the stop: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %s", d)
	}

	r := journal.New(cfg)
	if err := r.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	msgs, err := r.Load(context.Background(), "q", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range msgs {
		bodies = append(bodies, string(m.Body))
	}
	if len(bodies) == 0 || bodies[0] != "before" {
		t.Fatalf("after reopening: %q, want \"before\" first", bodies)
	}
	for _, b := range bodies {
		if b == "after" {
			t.Fatalf("a batch refused after the stop is stored: %q", bodies)
		}
	}
	t.Logf("after reopening: %q (the one whose commit failed may or may not be there)", bodies)
}

// openOnLazyfs opens a journal on a lazyfs mount whose dedup ids are
// stale 1 ms after they are written, and waits until its WAL is empty
// after a first enqueue carrying a dedup id (so that the next WAL fsync
// is the one a fault is meant for).
func openOnLazyfs(t *testing.T) (*journal.Store, *lazyfs.FS) {
	t.Helper()
	backing, mnt := t.TempDir(), t.TempDir()
	fs, err := lazyfs.Mount(t, backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Unmount() })
	cfg := journal.Config{Path: filepath.Join(mnt, "herald.db"), Sync: "full", CheckpointInterval: 20 * time.Millisecond, DedupWindow: time.Millisecond}
	s := journal.New(cfg)
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	done := make(chan error, 1)
	s.Submit(&appliance.Batch{
		Ops:  []appliance.Op{{Kind: appliance.OpEnqueue, Msg: &appliance.Message{Queue: "q", Body: []byte("dedup"), DedupID: "d1"}}},
		Done: func(_ *appliance.Batch, err error) { done <- err },
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitIdleWAL(t, s)
	return s, fs
}

// The dedup prune is a write on the writer connection outside any batch:
// an I/O error in its commit stops the journal as one in a batch's does.
// Before, it was logged ("dedup prune failed") and the journal went on
// committing on the disk that failed.
func TestStore_PruneIOErrorStopsJournal(t *testing.T) {
	s, fs := openOnLazyfs(t)
	fs.FailFsyncs("herald.db-wal", 1)
	s.PruneDedupNow() // deletes the stale dedup id: a commit, a WAL fsync
	if n := fs.FsyncFaults(); n != 1 {
		t.Fatalf("%d fsync faults returned, want 1 (the prune's commit)", n)
	}
	select {
	case <-s.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("journal not stopped after an I/O error in the dedup prune")
	}
	if err := enqueue(s, "q", "after"); !errors.Is(err, appliance.ErrJournalStopped) {
		t.Fatalf("batch after the prune's I/O error: %v, want ErrJournalStopped", err)
	}
}

// A stopped journal writes nothing more: neither the dedup prune nor a
// checkpoint (PASSIVE on the pool, TRUNCATE on the writer) touches the
// files, which are left as the failure left them for the next start's
// recovery. Before, both went on (a TRUNCATE even dropped the WAL holding
// the commit whose outcome was unknown).
func TestStore_StoppedJournalWritesNothing(t *testing.T) {
	s, fs := openOnLazyfs(t)
	fs.FailFsyncs("herald.db-wal", 1)
	if err := enqueue(s, "q", "during"); !errors.Is(err, appliance.ErrOutcomeUnknown) {
		t.Fatalf("commit whose WAL fsync failed: %v, want ErrOutcomeUnknown", err)
	}
	select {
	case <-s.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("journal not stopped after the I/O error")
	}
	_, wal0 := s.Sizes()
	f0 := fs.Fsyncs()
	s.PruneDedupNow() // "d1" is stale: a DELETE to commit
	if n := fs.Fsyncs() - f0; n != 0 {
		t.Errorf("the dedup prune of a stopped journal made %d fsyncs, want none", n)
	}
	f0 = fs.Fsyncs()
	s.PassiveNow()
	s.TruncateNow()
	if n := fs.Fsyncs() - f0; n != 0 {
		t.Errorf("checkpoints of a stopped journal made %d fsyncs, want none", n)
	}
	if _, wal := s.Sizes(); wal != wal0 || wal0 == 0 {
		t.Errorf("WAL of the stopped journal: %d bytes, was %d after the failed commit (want it left as it was, not empty)", wal, wal0)
	}
}

// waitIdleWAL waits until the checkpointer has truncated the WAL of the
// idle journal s, and a little longer, so that the checkpointer's own WAL
// sync does not take a fault meant for the next commit.
func waitIdleWAL(t *testing.T, s *journal.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, wal := s.Sizes(); wal == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WAL of an idle journal was not truncated within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
}
