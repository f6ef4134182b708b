package journal_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/journal"
)

func openStore(t *testing.T, path string) *journal.Store {
	t.Helper()
	s := journal.New(journal.Config{Path: path, Sync: "normal", CheckpointInterval: 20 * time.Millisecond})
	if err := s.Open(context.Background()); err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// enqueue commits one message and waits for it.
func enqueue(s *journal.Store, queue, body string) error {
	done := make(chan error, 1)
	s.Submit(&appliance.Batch{
		Ops:  []appliance.Op{{Kind: appliance.OpEnqueue, Msg: &appliance.Message{Queue: queue, Body: []byte(body)}}},
		Done: func(_ *appliance.Batch, err error) { done <- err },
	})
	return <-done
}

// TestStore_BackupUnderLoad: every message committed before Backup began is
// in the copy, which opens as a journal, while writers keep committing.
func TestStore_BackupUnderLoad(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "herald.db"))
	const pre = 8000 // about 4 MiB: several backup steps
	for i := 0; i < pre; i += 500 {
		done := make(chan error, 1)
		b := &appliance.Batch{Done: func(_ *appliance.Batch, err error) { done <- err }}
		for j := i; j < i+500; j++ {
			b.Ops = append(b.Ops, appliance.Op{Kind: appliance.OpEnqueue, Msg: &appliance.Message{Queue: "pre", Body: fmt.Appendf(nil, "pre-%d-%0400d", j, j)}})
		}
		s.Submit(b)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Writers run during the whole backup; committed counts what finished
	// before Backup was called.
	var committed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := enqueue(s, fmt.Sprintf("load%d", w), fmt.Sprintf("%d", i)); err != nil {
					t.Errorf("enqueue: %v", err)
					return
				}
				committed.Add(1)
			}
		}()
	}
	// The writers are under way: some of their commits precede the backup.
	for deadline := time.Now().Add(10 * time.Second); committed.Load() < 20; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("writers committed %d messages in 10s, want at least 20 before the backup", committed.Load())
		}
	}
	before := committed.Load()
	dest := filepath.Join(dir, "backup.db")
	var steps, lastDone, lastTotal int
	err := s.Backup(context.Background(), dest, func(done, total int) {
		steps++
		if done < lastDone {
			t.Errorf("progress went back: %d after %d", done, lastDone)
		}
		lastDone, lastTotal = done, total
	})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	if lastDone != lastTotal || steps < 2 {
		t.Errorf("progress: got %d steps ending %d/%d, want several ending complete", steps, lastDone, lastTotal)
	}

	b := openStore(t, dest)
	qs, err := b.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	total := 0
	for _, q := range qs {
		counts[q.Name] = q.Count
		if q.Name != "pre" {
			total += q.Count
		}
	}
	if counts["pre"] != pre {
		t.Errorf("queue pre: got %d messages, want %d", counts["pre"], pre)
	}
	if int64(total) < before {
		t.Errorf("load queues: got %d messages, want at least the %d committed before the backup", total, before)
	}
	msgs, err := b.Load(context.Background(), "pre", 0, 1)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body[:6]) != "pre-0-" {
		t.Errorf("first message: got %v %v, want pre-0-...", msgs, err)
	}
	t.Logf("backup: %d pages in %d steps; %d messages under load (%d before)", lastTotal, steps, total, before)

	if err := s.Backup(context.Background(), dest, nil); !errors.Is(err, journal.ErrBackupExists) {
		t.Errorf("backup over an existing file: got %v, want ErrBackupExists", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Backup(ctx, filepath.Join(dir, "cancelled.db"), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled backup: got %v, want context.Canceled", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*partial*")); len(m) > 0 {
		t.Errorf("left behind: %v", m)
	}
}
