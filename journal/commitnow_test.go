package journal

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// TestStore_CommitNowKeepsOrder: batches committed by CommitNow on their
// submitters' goroutines and batches submitted to the writer complete in
// commit order (the IDs the journal gave their messages rise in the order
// the Done callbacks run), every one exactly once; CommitNow refuses while
// anything submitted before has not completed, and sets Lone.
func TestStore_CommitNowKeepsOrder(t *testing.T) {
	s := mustOpen(t, Config{Path: filepath.Join(t.TempDir(), "herald.db")})
	var mu sync.Mutex
	var ids []uint64
	done := func(b *appliance.Batch, err error) {
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		ids = append(ids, b.Ops[0].Msg.ID)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	const lone, flood, n = 1, 2, 300
	for g := 0; g < lone; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				ch := make(chan struct{})
				b := &appliance.Batch{Ops: []appliance.Op{enq("q", "x")}, Done: func(b *appliance.Batch, err error) {
					// A slow completion: a batch committed meanwhile must
					// not complete before it.
					time.Sleep(time.Millisecond)
					done(b, err)
					close(ch)
				}}
				if !s.CommitNow(b) {
					s.Submit(b)
				}
				<-ch // as a client waiting for each receipt
			}
		}()
	}
	for g := 0; g < flood; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Bursts of 5, waiting for the last: the journal goes idle
			// between them, so CommitNow often runs beside a burst.
			for i := 0; i < n; i += 5 {
				ch := make(chan struct{})
				for k := 0; k < 5; k++ {
					b := &appliance.Batch{Ops: []appliance.Op{enq("q", "y")}, Done: done}
					if k == 4 {
						b.Done = func(b *appliance.Batch, err error) {
							done(b, err)
							close(ch)
						}
					}
					s.Submit(b)
				}
				<-ch
			}
		}()
	}
	wg.Wait()
	s.Submit(&appliance.Batch{Ops: []appliance.Op{{Kind: appliance.OpBarrier}}, Done: func(*appliance.Batch, error) {}})
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(ids) != (lone+flood)*n {
		t.Fatalf("%d completions, want %d", len(ids), (lone+flood)*n)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("completion %d: message %d after %d: completions out of commit order", i, ids[i], ids[i-1])
		}
	}
	if s.Stats().Inline == 0 {
		t.Fatal("no batch committed by CommitNow")
	}
	t.Logf("%d of %d lone batches committed inline", s.Stats().Inline, lone*n)
}

// TestStore_CommitNowRefusesBehindQueued: with a batch submitted and not
// yet completed, CommitNow leaves its batch alone; once everything
// completed, it commits, runs Done with Lone set, and the batch is stored.
func TestStore_CommitNowRefusesBehindQueued(t *testing.T) {
	s := mustOpen(t, Config{Path: filepath.Join(t.TempDir(), "herald.db")})
	release := make(chan struct{})
	completed := make(chan struct{})
	s.Submit(&appliance.Batch{Ops: []appliance.Op{enq("q", "a")}, Done: func(*appliance.Batch, error) {
		<-release // its completion has not run yet
		close(completed)
	}})
	var ran bool
	b := &appliance.Batch{Ops: []appliance.Op{enq("q", "b")}, Done: func(b *appliance.Batch, err error) { ran = err == nil && b.Lone }}
	if s.CommitNow(b) {
		t.Fatal("CommitNow committed while an earlier batch had not completed")
	}
	close(release)
	<-completed
	for !s.CommitNow(b) {
		// The writer returns its lock and counts the completion just after
		// it ran: wait for that.
	}
	if !ran {
		t.Fatal("CommitNow: Done not run with Lone set")
	}
	ms, err := s.Load(context.Background(), "q", 0, 10)
	if err != nil || len(ms) != 2 {
		t.Fatalf("loaded %d messages (%v), want 2", len(ms), err)
	}
}
