package journal

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// TestStore_PurgeInParts: a purge operation deletes at most PurgeRows
// messages (and past the first at most PurgeBytes of them), in ID order,
// and reports how far it got; a run of them, each from where the last
// stopped, deletes exactly the range but the kept messages, with their
// claim rows, and nothing of another queue or past the range. A stretch
// of kept messages longer than PurgeRows still moves the run on.
func TestStore_PurgeInParts(t *testing.T) {
	s := mustOpen(t, Config{PurgeRows: 3})
	var ops []appliance.Op
	for i := 0; i < 15; i++ {
		q := "q"
		if i%5 == 4 {
			q = "p"
		}
		ops = append(ops, enq(q, strings.Repeat("x", 10+i)))
	}
	b, err := apply(t, s, ops...)
	if err != nil {
		t.Fatal(err)
	}
	var qids, pids []uint64
	for _, op := range b.Ops {
		if op.Msg.Queue == "q" {
			qids = append(qids, op.Msg.ID)
		} else {
			pids = append(pids, op.Msg.ID)
		}
	}
	// Claims on every message; kept: a run of three (qids[1..3]) and the
	// last of the range.
	var claims []appliance.Op
	for _, op := range b.Ops {
		claims = append(claims, appliance.Op{Kind: appliance.OpClaim, ID: op.Msg.ID, Deliveries: 1})
	}
	if _, err := apply(t, s, claims...); err != nil {
		t.Fatal(err)
	}
	upTo := qids[len(qids)-2] // the newest message of q is past the range
	keep := []uint64{qids[1], qids[2], qids[3], upTo}
	kept := map[uint64]bool{}
	for _, id := range keep {
		kept[id] = true
	}
	var wantBytes int64
	want := 0
	for _, op := range b.Ops {
		if id := op.Msg.ID; op.Msg.Queue == "q" && id <= upTo && !kept[id] {
			want++
			wantBytes += int64(op.Msg.Size())
		}
	}

	after, got, gotBytes, parts := uint64(0), 0, int64(0), 0
	for after < upTo {
		parts++
		if parts > 20 {
			t.Fatalf("purge not done after %d operations (at %d of %d)", parts-1, after, upTo)
		}
		var k []uint64
		for _, id := range keep {
			if id > after {
				k = append(k, id)
			}
		}
		pb, err := apply(t, s, appliance.Op{Kind: appliance.OpPurge, Queue: "q", After: after, ID: upTo, Keep: k})
		if err != nil {
			t.Fatal(err)
		}
		op := pb.Ops[0]
		if op.Affected > 3 || op.PurgedTo <= after || op.PurgedTo > upTo {
			t.Fatalf("purge after %d up to %d: %d messages, to %d: want at most 3, and progress within the range", after, upTo, op.Affected, op.PurgedTo)
		}
		// Every message of q up to PurgedTo is gone but the kept ones.
		ms, err := s.Load(context.Background(), "q", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.ID <= op.PurgedTo && !kept[m.ID] {
				t.Fatalf("after a purge to %d, message %d is still there", op.PurgedTo, m.ID)
			}
		}
		after = op.PurgedTo
		got += op.Affected
		gotBytes += op.Bytes
	}
	if got != want || gotBytes != wantBytes {
		t.Fatalf("purged %d messages (%d bytes), want %d (%d bytes)", got, gotBytes, want, wantBytes)
	}
	if parts < 4 {
		t.Fatalf("%d messages purged in %d operations of at most 3", got, parts)
	}
	ms, err := s.Load(context.Background(), "q", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var left []uint64
	for _, m := range ms {
		left = append(left, m.ID)
	}
	wantLeft := []uint64{qids[1], qids[2], qids[3], upTo, qids[len(qids)-1]}
	if len(left) != len(wantLeft) {
		t.Fatalf("q holds %v, want %v", left, wantLeft)
	}
	for i := range left {
		if left[i] != wantLeft[i] {
			t.Fatalf("q holds %v, want %v", left, wantLeft)
		}
	}
	if ps, err := s.Load(context.Background(), "p", 0, 100); err != nil || len(ps) != len(pids) {
		t.Fatalf("p holds %d messages (%v), want %d", len(ps), err, len(pids))
	}
	var claimRows int
	if err := s.db.QueryRow(`SELECT count(*) FROM claims`).Scan(&claimRows); err != nil {
		t.Fatal(err)
	}
	if claimRows != len(wantLeft)+len(pids) {
		t.Fatalf("%d claim rows left, want %d (the messages left)", claimRows, len(wantLeft)+len(pids))
	}
}

// TestStore_PurgeBytesBound: past its first message, a purge operation
// stops before PurgeBytes; a message larger than the bound alone is
// deleted on its own.
func TestStore_PurgeBytesBound(t *testing.T) {
	s := mustOpen(t, Config{PurgeBytes: 2500})
	b, err := apply(t, s, enq("q", strings.Repeat("a", 1000)), enq("q", strings.Repeat("b", 1000)),
		enq("q", strings.Repeat("c", 5000)), enq("q", strings.Repeat("d", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	upTo := b.Ops[3].Msg.ID
	var counts []int
	for after := uint64(0); after < upTo; {
		pb, err := apply(t, s, appliance.Op{Kind: appliance.OpPurge, Queue: "q", After: after, ID: upTo})
		if err != nil {
			t.Fatal(err)
		}
		if pb.Ops[0].PurgedTo <= after || len(counts) > 4 {
			t.Fatalf("no progress: %+v after %v", pb.Ops[0], counts)
		}
		counts = append(counts, pb.Ops[0].Affected)
		after = pb.Ops[0].PurgedTo
	}
	if len(counts) != 3 || counts[0] != 2 || counts[1] != 1 || counts[2] != 1 {
		t.Fatalf("messages per purge operation %v, want [2 1 1]", counts)
	}
}

// TestStore_ReusableAfterPurge: the pages of purged messages stay in the
// file as free pages, and Reusable counts them (the disk floor and the
// status report them).
func TestStore_ReusableAfterPurge(t *testing.T) {
	s := mustOpen(t, Config{})
	last := enqueueN(t, s, "q", 100, 4000)
	before, _, err := s.Reusable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	purgeAll(t, s, "q", last)
	free, _, err := s.Reusable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	db, _ := s.Sizes()
	if free-before < 100*4000*9/10 {
		t.Fatalf("free bytes %d before the purge of 400 kB of messages, %d after (file %d bytes); want the purged pages counted", before, free, db)
	}
}

// TestStore_ReclaimWhenIdle: a new journal gives the pages of deleted
// messages back to the filesystem once idle (incremental auto-vacuum, then
// the idle TRUNCATE): the file shrinks to a fraction of its size after a
// purge, what is left reads back, and the space is counted.
func TestStore_ReclaimWhenIdle(t *testing.T) {
	s := mustOpen(t, Config{CheckpointInterval: 50 * time.Millisecond, ReclaimMin: 1 << 20})
	last := enqueueN(t, s, "q", 2000, 4000)
	if _, err := apply(t, s, enq("kept", "still here")); err != nil {
		t.Fatal(err)
	}
	s.TruncateNow()
	full, _ := s.Sizes()
	if full < 8_000_000 {
		t.Fatalf("file of %d bytes after 8 MB of messages", full)
	}
	purgeAll(t, s, "q", last)
	deadline := time.Now().Add(10 * time.Second)
	for {
		db, wal := s.Sizes()
		if db < full/4 && wal == 0 {
			break
		}
		if time.Now().After(deadline) {
			free, _, _ := s.Reusable(context.Background())
			t.Fatalf("10 s after the purge the file is %d bytes (%d before, %d free in it), the WAL %d", db, full, free, wal)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := s.ReclaimedBytes(); got < full/2 {
		t.Fatalf("%d bytes counted as reclaimed; the file went from %d", got, full)
	}
	ms, err := s.Load(context.Background(), "kept", 0, 10)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "still here" {
		t.Fatalf("the message left: %v, %v", ms, err)
	}
}

// TestStore_OldDatabaseKeepsFreePages: a database made before incremental
// auto-vacuum (chosen only when the file is new) opens as before: the
// journal does not try to reclaim, and its free pages are counted for reuse.
func TestStore_OldDatabaseKeepsFreePages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	old, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec("CREATE TABLE made_before(x)"); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s := mustOpen(t, Config{Path: path, CheckpointInterval: 20 * time.Millisecond, ReclaimMin: 1 << 20})
	if s.reclaims {
		t.Fatal("a database made without auto-vacuum is taken for one with it")
	}
	last := enqueueN(t, s, "q", 500, 4000)
	purgeAll(t, s, "q", last)
	time.Sleep(300 * time.Millisecond) // idle: truncated, nothing reclaimed
	db, wal := s.Sizes()
	free, _, err := s.Reusable(context.Background())
	if err != nil || wal != 0 || free < 500*4000*9/10 || db < free || s.ReclaimedBytes() != 0 {
		t.Fatalf("idle old database: file %d, WAL %d, free %d (%v), reclaimed %d; want the free pages kept and counted", db, wal, free, err, s.ReclaimedBytes())
	}
}

// purgeAll purges queue up to upTo with a run of purge operations, as the
// queue core does, and returns how many messages they deleted.
func purgeAll(t *testing.T, s *Store, queue string, upTo uint64) int {
	t.Helper()
	n := 0
	for after := uint64(0); after < upTo; {
		pb, err := apply(t, s, appliance.Op{Kind: appliance.OpPurge, Queue: queue, After: after, ID: upTo})
		if err != nil {
			t.Fatal(err)
		}
		if pb.Ops[0].PurgedTo <= after {
			t.Fatalf("a purge operation after %d up to %d made no progress", after, upTo)
		}
		after = pb.Ops[0].PurgedTo
		n += pb.Ops[0].Affected
	}
	return n
}

// enqueueN commits n messages of size bytes to queue in one batch and
// returns the last one's ID.
func enqueueN(t *testing.T, s *Store, queue string, n, size int) uint64 {
	t.Helper()
	ops := make([]appliance.Op, n)
	for i := range ops {
		ops[i] = enq(queue, strings.Repeat("x", size))
	}
	b, err := apply(t, s, ops...)
	if err != nil {
		t.Fatal(err)
	}
	return b.Ops[n-1].Msg.ID
}
