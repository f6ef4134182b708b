package journal

// Review tests: durability claims of the journal checked where a group
// commit is redone with a savepoint per batch (a batch of the group
// failed) and where an upgrade of an older data directory is interrupted.
// Real SQLite files; failures are real SQL failures (a move of a missing
// message, a trigger), as in the other tests of this package.

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/kvcore"
)

// failingBatch fails deterministically: a move of a message that does not
// exist (as TestStore_FailedBatchFailsAlone).
func failingBatch() *appliance.Batch {
	return &appliance.Batch{Ops: []appliance.Op{{Kind: appliance.OpMove, ID: 999999, Queue: "x"}}}
}

// Claim: an enqueue that a committed batch reports as Duplicate stored
// nothing (appliance.OpEnqueue: "nothing is inserted and Duplicate is
// set"; the broker answers RECEIPT duplicate:true and never tells its
// queue about the message).
//
// A group commit in which one batch fails is run twice: once without
// savepoints (it fails), then with a savepoint per batch, at a later
// clock reading. The outputs of the first run stay on the ops: an enqueue
// seen as a duplicate at the first clock reading and as new at the second
// (its dedup id's window ended in between) is inserted by the second run
// and still reported Duplicate.
func TestReview_RetryKeepsStaleDuplicate(t *testing.T) {
	ctx := context.Background()
	const window = time.Minute
	base := time.UnixMilli(2_000_000_000)
	var mu sync.Mutex
	now := base
	var script []time.Time // readings to hand out first, one per call
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if len(script) > 0 {
			now, script = script[0], script[1:]
		}
		return now
	}
	s := mustOpen(t, Config{DedupWindow: window, Now: clock})
	orig := enq("q", "original")
	orig.Msg.DedupID = "X"
	b, err := apply(t, s, orig)
	if err != nil || b.Ops[0].Duplicate {
		t.Fatalf("original: %+v %v", b.Ops[0], err)
	}
	origID := b.Ops[0].Msg.ID

	retry := enq("q", "resent after the window")
	retry.Msg.DedupID = "X"
	rb := &appliance.Batch{Ops: []appliance.Op{retry}}
	// The first run of the group reads the clock at the last instant of the
	// window, the savepoint run one millisecond after it.
	mu.Lock()
	script = []time.Time{base.Add(window), base.Add(window + time.Millisecond)}
	mu.Unlock()
	s.wmu.Lock()
	errs := s.commit([]*appliance.Batch{rb, failingBatch()}, 2)
	s.wmu.Unlock()
	if errs[0] != nil || errs[1] == nil {
		t.Fatalf("errs %v, want the second batch alone to fail", errs)
	}
	ms, err := s.Load(ctx, "q", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, m := range ms {
		stored = append(stored, string(m.Body))
	}
	op := rb.Ops[0]
	if op.Duplicate && len(ms) != 1 {
		t.Fatalf("the enqueue is reported Duplicate (DupOf %d, original %d), yet the queue holds %q: "+
			"the broker would answer duplicate:true and never deliver the stored message until a restart",
			op.DupOf, origID, stored)
	}
	if !op.Duplicate && len(ms) != 2 {
		t.Fatalf("the enqueue is reported new (id %d), yet the queue holds %q", op.Msg.ID, stored)
	}
}

// Claim: a stream trim reports in Affected and Bytes what it deleted
// (appliance.StreamOp, OpTrim; the stream's core subtracts them from its
// count and bytes, which retention by max_messages / max_bytes plans
// from).
//
// In a group commit with a failing batch the trim runs twice (without,
// then with savepoints); its counters are added to, not set, so it
// reports twice what it deleted.
func TestReview_RetryDoublesTrimCount(t *testing.T) {
	s := mustOpen(t, Config{})
	var ops []appliance.Op
	for range 10 {
		ops = append(ops, appendOp("s", "0123456789"))
	}
	if _, err := apply(t, s, ops...); err != nil {
		t.Fatal(err)
	}
	before := streamState(t, s, "s")
	trim := &appliance.Batch{Ops: []appliance.Op{{Kind: appliance.OpTrim, Stream: &appliance.StreamOp{Name: "s", Offset: 5, Limit: 100}}}}
	s.wmu.Lock()
	errs := s.commit([]*appliance.Batch{trim, failingBatch()}, 2)
	s.wmu.Unlock()
	if errs[0] != nil || errs[1] == nil {
		t.Fatalf("errs %v, want the second batch alone to fail", errs)
	}
	after := streamState(t, s, "s")
	deleted, freed := before.Count-after.Count, before.Bytes-after.Bytes
	if deleted != 5 {
		t.Fatalf("trim deleted %d messages, want 5", deleted)
	}
	if op := trim.Ops[0]; int64(op.Affected) != deleted || op.Bytes != freed {
		t.Fatalf("trim reports %d messages / %d bytes deleted; the journal lost %d / %d", op.Affected, op.Bytes, deleted, freed)
	}
}

// Claim: opening a data directory made before kv_history.older existed
// counts its older revisions (TestStore_KVMigratesOlderBytes), also when
// the first attempt at the upgrade stopped half-way (a full disk, a crash
// or kill during the upgrade; here a trigger fails the migration's UPDATE,
// as SQLITE_FULL would). The migration adds the column in one statement
// and fills it in another, and decides whether to fill it by whether the
// column exists: a second start after an interrupted one never fills it,
// so the bucket's older revisions are never counted against its byte
// bound.
func TestReview_InterruptedKVMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	s := mustOpen(t, Config{Path: path})
	for i := uint64(1); i <= 5; i++ {
		op := kvOp("b", "k", kvcore.Put, i, "0123456789")
		op.KV.ContentType = ""
		op.KV.History = 10
		if _, err := apply(t, s, op); err != nil {
			t.Fatal(err)
		}
	}
	s.Close(context.Background())
	side := func(qs ...string) {
		t.Helper()
		db, err := sql.Open("sqlite3", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, q := range qs {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	// The data directory of the release before kv_history.older.
	side(`DROP INDEX kv_history_older`,
		`ALTER TABLE kv_history DROP COLUMN older`,
		`ALTER TABLE kv_history DROP COLUMN expires`,
		`ALTER TABLE kv_buckets DROP COLUMN older_bytes`,
		// The upgrade's first start fails at its first UPDATE.
		`CREATE TRIGGER review_fail BEFORE UPDATE ON kv_history BEGIN SELECT RAISE(ABORT, 'injected: database or disk is full'); END`)
	s1 := New(Config{Path: path})
	err := s1.Open(context.Background())
	if err == nil {
		s1.Close(context.Background())
		t.Fatal("open with the failing trigger succeeded")
	}
	if !strings.Contains(err.Error(), "injected") {
		t.Fatalf("open failed otherwise: %v", err)
	}
	side(`DROP TRIGGER review_fail`) // space freed: start again
	s = mustOpen(t, Config{Path: path})
	if counted, held := olderBytes(t, s, "b"); counted != 4*11 || held != counted {
		t.Fatalf("after an interrupted upgrade and a restart: older bytes counted %d, held %d, want %d", counted, held, 4*11)
	}
}

// Claim: past DedupMax, the prune drops "the oldest beyond DedupMax"
// (pruneDedup) and the others are still remembered: "Dedup ids remembered
// at most" dedup_max (packaging/herald.toml).
//
// The prune deletes every id recorded at or before the time of the
// (n-DedupMax+1)-th oldest; the ids of one group commit share one time, so
// one id over the bound drops the whole commit's ids, the newest included:
// their SENDs, retried within the window, are stored again.
func TestReview_DedupMaxForgetsTooMany(t *testing.T) {
	ctx := context.Background()
	clock := time.UnixMilli(3_000_000_000)
	s := mustOpen(t, Config{DedupMax: 3, Now: func() time.Time { return clock }})
	var ops []appliance.Op
	for _, id := range []string{"a", "b", "c", "d"} {
		op := enq("q", "first "+id)
		op.Msg.DedupID = id
		ops = append(ops, op)
	}
	if _, err := apply(t, s, ops...); err != nil { // one group commit
		t.Fatal(err)
	}
	s.wmu.Lock()
	s.pruneDedup()
	s.wmu.Unlock()
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM dedup`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	retry := enq("q", "retry d")
	retry.Msg.DedupID = "d"
	b, err := apply(t, s, retry)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || !b.Ops[0].Duplicate {
		t.Fatalf("dedup_max 3, 4 ids recorded: %d remembered after the prune; a retry of the newest (d) duplicate=%v, want 3 and true", n, b.Ops[0].Duplicate)
	}
}
