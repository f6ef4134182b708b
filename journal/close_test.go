package journal

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// closeWithin runs s.Close(ctx) and fails the test if it does not return
// within limit (Close ignoring its context would hang here).
func closeWithin(t *testing.T, s *Store, ctx context.Context, limit time.Duration) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- s.Close(ctx) }()
	select {
	case err := <-res:
		return err
	case <-time.After(limit):
		t.Fatalf("Close did not return within %s", limit)
	}
	return nil
}

// A writer that cannot finish (here: stuck in the commit hook) must not
// hold Close past its context: Close says the journal did not flush, the
// batches still queued fail instead of being stored, and the database is
// released once the writer is free.
func TestStore_CloseHonoursContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s := New(Config{Path: path, Sync: "normal"})
	entered, unblock := make(chan struct{}), make(chan struct{})
	var hooked atomic.Bool
	s.SetCommitHook(func(int, time.Duration) {
		if hooked.CompareAndSwap(false, true) {
			close(entered)
			<-unblock
		}
	})
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	var (
		wg              sync.WaitGroup
		stored, refused atomic.Int64
		other           = make(chan error, 1)
		submitters      sync.WaitGroup
	)
	submit := func() {
		wg.Add(1)
		var once atomic.Bool
		s.Submit(&appliance.Batch{Ops: []appliance.Op{enq("q", "x")}, Done: func(_ *appliance.Batch, err error) {
			if !once.CompareAndSwap(false, true) {
				select {
				case other <- errors.New("Done called twice"):
				default:
				}
				return
			}
			defer wg.Done()
			switch {
			case err == nil:
				stored.Add(1)
			case errors.Is(err, ErrClosed):
				refused.Add(1)
			default:
				select {
				case other <- err:
				default:
				}
			}
		}})
	}
	submit()
	<-entered // the first batch is committed; the writer is stuck after it
	// Fill the intake and one more: that Submit blocks for room.
	extra := DefaultIntake + 1
	submitters.Add(1)
	go func() {
		defer submitters.Done()
		for i := 0; i < extra; i++ {
			submit()
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); len(s.in) < cap(s.in); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("intake holds %d of %d", len(s.in), cap(s.in))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := closeWithin(t, s, ctx, 5*time.Second)
	if !errors.Is(err, ErrNotFlushed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: got %v, want ErrNotFlushed and context.DeadlineExceeded", err)
	}
	submitters.Wait() // the blocked Submit gave up
	select {
	case <-s.released:
		t.Fatal("database released while the writer is still inside a commit")
	default:
	}

	close(unblock)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := closeWithin(t, s, ctx2, 15*time.Second); err != nil {
		t.Fatalf("second Close, writer free: %v", err)
	}
	wg.Wait()
	select {
	case err := <-other:
		t.Fatalf("unexpected batch outcome: %v", err)
	default:
	}
	if stored.Load() != 1 || refused.Load() != int64(extra) {
		t.Fatalf("%d batches stored, %d refused; want 1 stored (committed before Close) and %d refused", stored.Load(), refused.Load(), extra)
	}

	// What the batches were told is what the database holds.
	r := mustOpen(t, Config{Path: path})
	ms, err := r.Load(context.Background(), "q", 0, 10)
	if err != nil || len(ms) != 1 {
		t.Fatalf("reopened: %d messages (err %v), want 1", len(ms), err)
	}
}

// With time enough, Close commits everything submitted before it.
func TestStore_CloseFlushes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	s := New(Config{Path: path, Sync: "normal"})
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	const n = 500
	var wg sync.WaitGroup
	var failed atomic.Int64
	wg.Add(n)
	for i := 0; i < n; i++ {
		s.Submit(&appliance.Batch{Ops: []appliance.Op{enq("q", "x")}, Done: func(_ *appliance.Batch, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := closeWithin(t, s, ctx, 35*time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d batches failed", failed.Load())
	}
	r := mustOpen(t, Config{Path: path})
	ms, err := r.Load(context.Background(), "q", 0, n+1)
	if err != nil || len(ms) != n {
		t.Fatalf("reopened: %d messages (err %v), want %d", len(ms), err, n)
	}
}
