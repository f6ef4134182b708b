package journal

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStore_WALUnderContinuousLoad: with batches always queued (the writer
// never idle), the WAL still starts over and stays within its limit; once
// the load stops, the idle writer truncates it to nothing.
func TestStore_WALUnderContinuousLoad(t *testing.T) {
	const limit = 4 << 20
	s := mustOpen(t, Config{WALLimit: limit, CheckpointInterval: 200 * time.Millisecond})
	body := strings.Repeat("w", 1024)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	var written int
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := churn(t, s, "cont", body, 100)
				mu.Lock()
				written += 100
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	var maxWAL int64
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		_, wal := s.Sizes()
		maxWAL = max(maxWAL, wal)
		mu.Lock()
		enough := written >= 60000 // about 4 x 60 MB through the WAL... at least 60 MB
		mu.Unlock()
		if enough && time.Now().After(deadline.Add(-2*time.Second)) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	mu.Lock()
	n := written
	mu.Unlock()
	if int64(n)*1024 < 4*limit {
		t.Skipf("only %d messages written in 3 s: too few to fill the WAL several times on this machine", n)
	}
	if maxWAL > 2*limit {
		t.Fatalf("WAL grew to %d bytes under continuous load (%d messages written) with a %d byte limit", maxWAL, n, limit)
	}
	// Idle: truncated to nothing within a few checkpoint intervals.
	var wal int64
	for i := 0; i < 100; i++ {
		if _, wal = s.Sizes(); wal == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if wal != 0 {
		t.Fatalf("WAL still %d bytes 2 s after the load stopped; want it truncated while idle", wal)
	}
	ms, err := s.Load(context.Background(), "cont", 0, 10)
	if err != nil || len(ms) != 0 {
		t.Fatalf("queue after the run: %d messages (%v), want none", len(ms), err)
	}
	t.Logf("%d messages through the WAL, max WAL %d bytes, %d checkpoints", n, maxWAL, s.Stats().Checkpoints)
}

// TestStore_WALBoundWithoutCheckpointer: with the checkpointer starved (held
// here; on a host short of CPU it ran too late), the WAL grew with every
// commit: 9-14 MB against a 4 MiB limit in TestStore_WALUnderContinuousLoad
// at a load of 10-14 on 2 cores, without bound in principle. The writer now
// copies it back itself once it passes the limit.
func TestStore_WALBoundWithoutCheckpointer(t *testing.T) {
	const limit = 4 << 20
	s := New(Config{Path: t.TempDir() + "/herald.db", WALLimit: limit, CheckpointInterval: 200 * time.Millisecond})
	s.ckHold = make(chan struct{}) // never closed: Close stops it
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	body := strings.Repeat("w", 1024)
	var maxWAL int64
	for written := 0; written < 6*limit/1024; written += 100 {
		if err := churn(t, s, "held", body, 100); err != nil {
			t.Fatal(err)
		}
		_, wal := s.Sizes()
		maxWAL = max(maxWAL, wal)
	}
	if maxWAL > limit+limit/4 {
		t.Fatalf("WAL grew to %d bytes with the checkpointer held, limit %d", maxWAL, limit)
	}
	if n := s.Stats().WALBackstops; n == 0 {
		t.Fatalf("the writer never copied the WAL back (max %d bytes)", maxWAL)
	}
	t.Logf("WAL at most %d bytes, %d writer copies", maxWAL, s.Stats().WALBackstops)
}
