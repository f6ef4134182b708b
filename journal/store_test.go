package journal

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

func mustOpen(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "herald.db")
	}
	s := New(cfg)
	if err := s.Open(context.Background()); err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// apply submits ops as one batch and waits.
func apply(t testing.TB, s *Store, ops ...appliance.Op) (*appliance.Batch, error) {
	t.Helper()
	done := make(chan error, 1)
	b := &appliance.Batch{Ops: ops, Done: func(_ *appliance.Batch, err error) { done <- err }}
	s.Submit(b)
	select {
	case err := <-done:
		return b, err
	case <-time.After(10 * time.Second):
		t.Fatal("batch not completed in 10s")
	}
	return nil, nil
}

func enq(queue, body string, hdrs ...stomp.Header) appliance.Op {
	return appliance.Op{Kind: appliance.OpEnqueue, Msg: &appliance.Message{Queue: queue, Body: []byte(body), Headers: hdrs}}
}

func TestStore_EnqueueLoadDelete(t *testing.T) {
	s := mustOpen(t, Config{})
	b, err := apply(t, s, enq("q", "a", stomp.Header{Key: "k", Value: "v:1\n"}), enq("q", "b"), enq("other", "c"))
	if err != nil {
		t.Fatal(err)
	}
	ids := []uint64{b.Ops[0].Msg.ID, b.Ops[1].Msg.ID, b.Ops[2].Msg.ID}
	if !(ids[0] < ids[1] && ids[1] < ids[2]) {
		t.Fatalf("ids not increasing: %v", ids)
	}
	ms, err := s.Load(context.Background(), "q", 0, 10)
	if err != nil || len(ms) != 2 {
		t.Fatalf("load: %d messages, err %v", len(ms), err)
	}
	if string(ms[0].Body) != "a" || ms[0].Headers.Get("k") != "v:1\n" || ms[0].Enqueued == 0 {
		t.Fatalf("message 0: %+v", ms[0])
	}
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpDelete, ID: ids[0]}, appliance.Op{Kind: appliance.OpClaim, ID: ids[1], Deliveries: 3}); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.Load(context.Background(), "q", 0, 10)
	if len(ms) != 1 || ms[0].Deliveries != 3 {
		t.Fatalf("after delete and claim: %+v", ms)
	}
	qs, err := s.Queues(context.Background())
	if err != nil || len(qs) != 2 || qs[0].Name != "other" || qs[1].Count != 1 || qs[1].MaxID != ids[1] {
		t.Fatalf("queues: %+v err %v", qs, err)
	}
}

func TestStore_GroupCommit(t *testing.T) {
	s := mustOpen(t, Config{Sync: "full"})
	const n = 2000
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < n/16; i++ {
				if _, err := apply(t, s, enq("gc", fmt.Sprint(w, i))); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	st := s.Stats()
	if st.Ops != n {
		t.Fatalf("ops %d, want %d", st.Ops, n)
	}
	if st.Commits >= n/2 {
		t.Fatalf("%d commits for %d ops from 16 writers: no group commit", st.Commits, n)
	}
	t.Logf("%d ops in %d commits", st.Ops, st.Commits)
}

func TestStore_FailedBatchFailsAlone(t *testing.T) {
	s := mustOpen(t, Config{})
	// Submit several batches at once so they share a transaction; the
	// middle one fails (move of a missing message).
	var wg sync.WaitGroup
	errs := make([]error, 3)
	batches := []*appliance.Batch{
		{Ops: []appliance.Op{enq("iso", "first")}},
		{Ops: []appliance.Op{enq("iso", "doomed"), {Kind: appliance.OpMove, ID: 999999, Queue: "x"}}},
		{Ops: []appliance.Op{enq("iso", "third")}},
	}
	for i, b := range batches {
		wg.Add(1)
		b.Done = func(_ *appliance.Batch, err error) { errs[i] = err; wg.Done() }
	}
	for _, b := range batches {
		s.Submit(b)
	}
	wg.Wait()
	if errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("errors %v, want only the middle batch to fail", errs)
	}
	ms, _ := s.Load(context.Background(), "iso", 0, 10)
	var got []string
	for _, m := range ms {
		got = append(got, string(m.Body))
	}
	if strings.Join(got, ",") != "first,third" {
		t.Fatalf("stored %v, want first,third (nothing of the failed batch)", got)
	}
}

func TestStore_Dedup(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := mustOpen(t, Config{DedupWindow: time.Minute, Now: clock})
	m := func() appliance.Op {
		op := enq("d", "x")
		op.Msg.DedupID = "id-1"
		return op
	}
	b1, _ := apply(t, s, m())
	b2, _ := apply(t, s, m())
	if b1.Ops[0].Duplicate || !b2.Ops[0].Duplicate || b2.Ops[0].DupOf != b1.Ops[0].Msg.ID {
		t.Fatalf("first dup=%v, second dup=%v of %d", b1.Ops[0].Duplicate, b2.Ops[0].Duplicate, b2.Ops[0].DupOf)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if b3, _ := apply(t, s, m()); b3.Ops[0].Duplicate {
		t.Fatal("dedup id remembered past its window")
	}
}

func TestStore_DedupSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	s := New(Config{Path: path})
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	op := enq("d", "x")
	op.Msg.DedupID = "vote-7"
	apply(t, s, op)
	s.Close(context.Background())
	s2 := mustOpen(t, Config{Path: path})
	op2 := enq("d", "x")
	op2.Msg.DedupID = "vote-7"
	if b, _ := apply(t, s2, op2); !b.Ops[0].Duplicate {
		t.Fatal("dedup id forgotten across reopen")
	}
}

func TestStore_Compression(t *testing.T) {
	s := mustOpen(t, Config{Compress: true, CompressMin: 1024})
	big := bytes.Repeat([]byte("compressible text "), 1000)
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(i*7919 + i*i*31)
	}
	if _, err := apply(t, s, enq("z", string(big)), enq("z", string(random)), enq("z", "small")); err != nil {
		t.Fatal(err)
	}
	var flags []int
	rows, _ := s.db.Query(`SELECT flags, length(body) FROM messages ORDER BY id`)
	for rows.Next() {
		var f, n int
		rows.Scan(&f, &n)
		flags = append(flags, f)
		if f&flagZstd != 0 && n >= len(big) {
			t.Fatalf("compressed body is %d bytes, original %d", n, len(big))
		}
	}
	rows.Close()
	if fmt.Sprint(flags) != "[1 0 0]" && fmt.Sprint(flags) != "[1 1 0]" {
		t.Fatalf("flags %v, want the large compressible body compressed and the small one not", flags)
	}
	ms, _ := s.Load(context.Background(), "z", 0, 10)
	if !bytes.Equal(ms[0].Body, big) || !bytes.Equal(ms[1].Body, random) || string(ms[2].Body) != "small" {
		t.Fatal("bodies differ after compression round trip")
	}
}

// churn enqueues n messages of body to queue in one batch, then deletes
// them in another: WAL traffic that leaves the database as it was.
func churn(t testing.TB, s *Store, queue, body string, n int) error {
	ops := make([]appliance.Op, n)
	for i := range ops {
		ops[i] = enq(queue, body)
	}
	b, err := apply(t, s, ops...)
	if err != nil {
		return err
	}
	del := make([]appliance.Op, len(b.Ops))
	for i, op := range b.Ops {
		del[i] = appliance.Op{Kind: appliance.OpDelete, ID: op.Msg.ID}
	}
	_, err = apply(t, s, del...)
	return err
}

func TestStore_WALStaysBounded(t *testing.T) {
	s := mustOpen(t, Config{WALLimit: 2 << 20, CheckpointInterval: 20 * time.Millisecond})
	body := strings.Repeat("w", 1024)
	var maxWAL int64
	for round := 0; round < 60; round++ {
		if err := churn(t, s, "wal", body, 200); err != nil {
			t.Fatal(err)
		}
		_, wal := s.Sizes()
		maxWAL = max(maxWAL, wal)
	}
	if s.Stats().Checkpoints == 0 {
		t.Fatal("no checkpoint ran")
	}
	// 60 rounds wrote about 25 MB through the WAL; it must stay near the limit.
	if maxWAL > 12<<20 {
		t.Fatalf("WAL grew to %d bytes with a 2 MiB limit", maxWAL)
	}
	t.Logf("max WAL %d bytes, %d checkpoints", maxWAL, s.Stats().Checkpoints)
}

func TestStore_ClosedSubmitFails(t *testing.T) {
	s := New(Config{Path: filepath.Join(t.TempDir(), "c.db")})
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close(context.Background())
	s.Close(context.Background()) // idempotent
	done := make(chan error, 1)
	s.Submit(&appliance.Batch{Ops: []appliance.Op{enq("q", "x")}, Done: func(_ *appliance.Batch, err error) { done <- err }})
	if err := <-done; err != ErrClosed {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

func TestHeaders_RoundTrip(t *testing.T) {
	h := stomp.Headers{{Key: "a", Value: ""}, {Key: "", Value: "b"}, {Key: "k\x00", Value: strings.Repeat("v", 300)}}
	got, err := decodeHeaders(encodeHeaders(nil, h))
	if err != nil || fmt.Sprint(got) != fmt.Sprint(h) {
		t.Fatalf("got %v %v, want %v", got, err, h)
	}
	if _, err := decodeHeaders([]byte{5, 1}); err == nil {
		t.Fatal("truncated blob decoded")
	}
}

func FuzzDecodeHeaders(f *testing.F) {
	f.Add(encodeHeaders(nil, stomp.Headers{{Key: "content-type", Value: "text/plain"}, {Key: "dedup-id", Value: "x"}}))
	f.Add([]byte{0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeaders(b)
		if err != nil {
			return
		}
		again, err := decodeHeaders(encodeHeaders(nil, h))
		if err != nil || fmt.Sprint(again) != fmt.Sprint(h) {
			t.Fatalf("re-encode changed %v to %v (%v)", h, again, err)
		}
	})
}

func TestStore_PageGroup(t *testing.T) {
	s := mustOpen(t, Config{})
	var ops []appliance.Op
	for i := range 30 {
		op := enq("q", fmt.Sprint(i))
		op.Msg.Group = []string{"", "a", "b"}[i%3]
		ops = append(ops, op)
	}
	ops = append(ops, appliance.Op{Kind: appliance.OpEnqueue, Msg: &appliance.Message{Queue: "other", Body: []byte("x"), Group: "a"}})
	b, err := apply(t, s, ops...)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s.Page(context.Background(), appliance.PageRequest{Queue: "q", Group: "a", After: b.Ops[4].Msg.ID, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, string(m.Body)+"/"+m.Group)
	}
	if strings.Join(got, " ") != "7/a 10/a 13/a" {
		t.Fatalf("Page(q, group a, after message 4, 3): got %v, want [7/a 10/a 13/a]", got)
	}
	// The rescan reads the group's index, not every message of the queue.
	var plan strings.Builder
	rows, err := s.db.Query(`EXPLAIN QUERY PLAN SELECT m.id FROM messages m WHERE m.qid = 1 AND m.grp = 'a' AND m.grp != '' AND m.id > 0 ORDER BY m.id LIMIT 3`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "; ")
	}
	if !strings.Contains(plan.String(), "messages_grp") {
		t.Fatalf("query plan %q does not use index messages_grp", plan.String())
	}
}

// Batch.Lone is set only for a batch committed alone whose completion the
// writer runs itself with nothing waiting behind it: not for a batch that
// others queued behind, nor for the batches of a group commit.
func TestStore_LoneOnlyForABatchAlone(t *testing.T) {
	s := mustOpen(t, Config{})
	hold, entered := make(chan struct{}), make(chan struct{})
	first := true
	s.SetCommitHook(func(int, time.Duration) {
		if first {
			first = false
			close(entered)
			<-hold // the next batches queue behind this commit
		}
	})
	type result struct {
		name string
		lone bool
	}
	done := make(chan result, 4)
	mk := func(name string) *appliance.Batch {
		return &appliance.Batch{Ops: []appliance.Op{enq("q", name)}, Done: func(b *appliance.Batch, err error) {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			done <- result{name, b.Lone}
		}}
	}
	s.Submit(mk("held"))
	<-entered // "held" is committed alone; the writer waits in the hook
	s.Submit(mk("b"))
	s.Submit(mk("c"))
	close(hold)
	got := map[string]bool{}
	for range 3 {
		r := <-done
		got[r.name] = r.lone
	}
	if got["held"] || got["b"] || got["c"] {
		t.Fatalf("Lone %v: want none (held had batches waiting behind it; b and c were committed together)", got)
	}
	if b, err := apply(t, s, enq("q", "alone")); err != nil || !b.Lone {
		t.Fatalf("a batch alone: Lone %v (%v), want true", b != nil && b.Lone, err)
	}
}
