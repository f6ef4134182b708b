package journal

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/kvcore"
)

func kvOp(bucket, key string, op kvcore.Op, rev uint64, value string) appliance.Op {
	return appliance.Op{Kind: appliance.OpKV, KV: &appliance.KVEntry{Bucket: bucket, Key: key, Op: op, Revision: rev, ContentType: "text/plain", Value: []byte(value)}}
}

func kvLoad(t *testing.T, s *Store) (revs map[string]uint64, keys map[string]appliance.KVEntry) {
	t.Helper()
	revs, keys = map[string]uint64{}, map[string]appliance.KVEntry{}
	err := s.KVLoad(context.Background(), func(e appliance.KVEntry) error {
		if e.Op == 0 {
			revs[e.Bucket] = e.Revision
		} else {
			keys[e.Bucket+"."+e.Key] = e
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return revs, keys
}

func TestStore_KVPutDeleteReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	s := mustOpen(t, Config{Path: path})
	for _, op := range []appliance.Op{
		kvOp("config", "site1.a", kvcore.Put, 1, "one"),
		kvOp("config", "site1.b", kvcore.Put, 2, "two"),
		kvOp("config", "site1.a", kvcore.Put, 3, "three"),
		kvOp("config", "site1.b", kvcore.Delete, 4, ""),
		kvOp("other", "x", kvcore.Put, 1, ""),
	} {
		if _, err := apply(t, s, op); err != nil {
			t.Fatal(err)
		}
	}
	// A reused revision is refused and changes nothing.
	if _, err := apply(t, s, kvOp("config", "site1.c", kvcore.Put, 4, "again")); err == nil || !strings.Contains(err.Error(), "reused") {
		t.Fatalf("revision 4 stored twice: %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Config{Path: path})
	revs, keys := kvLoad(t, s)
	if revs["config"] != 4 || revs["other"] != 1 || len(revs) != 2 {
		t.Errorf("bucket revisions after reopen: %v, want config 4 other 1", revs)
	}
	if len(keys) != 2 {
		t.Fatalf("keys after reopen: %v", keys)
	}
	if e := keys["config.site1.a"]; e.Revision != 3 || string(e.Value) != "three" || e.ContentType != "text/plain" || e.Op != kvcore.Put {
		t.Errorf("config.site1.a = %+v", e)
	}
	if e, ok := keys["other.x"]; !ok || e.Value == nil || len(e.Value) != 0 {
		t.Errorf("empty value: %+v %v", e, ok)
	}
}

// A data directory made before the key-value store (no kv tables) opens,
// keeps its messages and gains the tables.
func TestStore_KVMigratesOlderDataDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	s := mustOpen(t, Config{Path: path})
	if _, err := apply(t, s, enq("q", "kept")); err != nil {
		t.Fatal(err)
	}
	s.Close(context.Background())
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE kv`, `DROP TABLE kv_buckets`, `DROP TABLE kv_history`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s = mustOpen(t, Config{Path: path})
	if ms, err := s.Load(context.Background(), "q", 0, 10); err != nil || len(ms) != 1 || string(ms[0].Body) != "kept" {
		t.Fatalf("queue after migration: %v %v", ms, err)
	}
	if _, err := apply(t, s, kvOp("b", "k", kvcore.Put, 1, "v")); err != nil {
		t.Fatalf("kv after migration: %v", err)
	}
	if _, keys := kvLoad(t, s); len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
}

func kvHistory(t *testing.T, s *Store, bucket, key string) (out []string) {
	t.Helper()
	err := s.KVHistory(context.Background(), bucket, key, func(e appliance.KVEntry) error {
		out = append(out, fmt.Sprintf("%d:%s", e.Revision, e.Value))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Each put keeps the newest History revisions of its key; a delete drops
// them all; other keys keep theirs.
func TestStore_KVHistory(t *testing.T) {
	s := mustOpen(t, Config{})
	put := func(key string, rev uint64, val string, keep int) {
		op := kvOp("b", key, kvcore.Put, rev, val)
		op.KV.History = keep
		if _, err := apply(t, s, op); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 5; i++ {
		put("k", uint64(i), "v"+strconv.Itoa(i), 3)
	}
	put("other", 6, "o", 3)
	if h := kvHistory(t, s, "b", "k"); strings.Join(h, " ") != "3:v3 4:v4 5:v5" {
		t.Fatalf("history of k: %v, want the newest 3", h)
	}
	put("k", 7, "v7", 1) // history lowered: trims to 1
	if h := kvHistory(t, s, "b", "k"); strings.Join(h, " ") != "7:v7" {
		t.Fatalf("history of k after history 1: %v", h)
	}
	if _, err := apply(t, s, kvOp("b", "k", kvcore.Delete, 8, "")); err != nil {
		t.Fatal(err)
	}
	if h := kvHistory(t, s, "b", "k"); len(h) != 0 {
		t.Fatalf("history after delete: %v", h)
	}
	if h := kvHistory(t, s, "b", "other"); strings.Join(h, " ") != "6:o" {
		t.Fatalf("history of other: %v", h)
	}
}

// A data directory made by the first key-value version (kv without the
// expires column, no lock_tokens) gains both: its keys are kept, without
// expiry, and new puts store theirs.
func TestStore_KVMigratesExpiresAndLockTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	s := mustOpen(t, Config{Path: path})
	s.Close(context.Background())
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE kv`, `DROP TABLE lock_tokens`,
		`CREATE TABLE kv(bucket TEXT NOT NULL, key TEXT NOT NULL, revision INTEGER NOT NULL, ctype TEXT NOT NULL DEFAULT '', value BLOB NOT NULL, PRIMARY KEY(bucket, key)) WITHOUT ROWID`,
		`INSERT INTO kv VALUES('b', 'old', 1, '', x'6f6c64')`,
		`INSERT INTO kv_buckets(name, revision) VALUES('b', 1)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s = mustOpen(t, Config{Path: path})
	op := kvOp("b", "new", kvcore.Put, 2, "v")
	op.KV.Expires = 1234
	if _, err := apply(t, s, op); err != nil {
		t.Fatalf("put with expiry after migration: %v", err)
	}
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpLock, Lock: &appliance.LockToken{Name: "deploy", Token: 3}}); err != nil {
		t.Fatalf("lock token after migration: %v", err)
	}
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpLock, Lock: &appliance.LockToken{Name: "deploy", Token: 3}}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Fatalf("token 3 stored twice: %v", err)
	}
	_, keys := kvLoad(t, s)
	if e := keys["b.old"]; string(e.Value) != "old" || e.Expires != 0 {
		t.Errorf("old key %+v", e)
	}
	if e := keys["b.new"]; e.Expires != 1234 {
		t.Errorf("new key's expiry %+v", e)
	}
	var toks []string
	s.LockLoad(context.Background(), func(l appliance.LockToken) error {
		toks = append(toks, l.Name+"="+strconv.FormatUint(l.Token, 10))
		return nil
	})
	if fmt.Sprint(toks) != "[deploy=3]" {
		t.Errorf("lock tokens %v", toks)
	}
}

// olderBytes is what the journal counts for bucket's older revisions.
func olderBytes(t *testing.T, s *Store, bucket string) (counted, held int64) {
	t.Helper()
	if err := s.db.QueryRow(`SELECT older_bytes FROM kv_buckets WHERE name=?`, bucket).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`SELECT coalesce(sum(`+kvWeight+`), 0) FROM kv_history h WHERE bucket=? AND revision < (SELECT revision FROM kv WHERE kv.bucket=h.bucket AND kv.key=h.key)`, bucket).Scan(&held); err != nil {
		t.Fatal(err)
	}
	return counted, held
}

// A bucket's older revisions weigh at most HistoryBytes (its max_bytes):
// over it the oldest of the bucket go, whatever their key, never a key's
// current revision; a delete takes its key's older revisions off the
// count. The expiry of each revision is kept with it.
func TestStore_KVHistoryBytesBound(t *testing.T) {
	s := mustOpen(t, Config{})
	const bound = 1000
	rev := uint64(0)
	put := func(key string, size int) {
		rev++
		op := kvOp("b", key, kvcore.Put, rev, strings.Repeat("x", size))
		op.KV.ContentType = ""
		op.KV.History, op.KV.HistoryBytes = 64, bound
		op.KV.Expires = int64(rev) * 1000
		if _, err := apply(t, s, op); err != nil {
			t.Fatal(err)
		}
	}
	put("old", 99) // current for ever: never trimmed
	for range 50 {
		put("k", 100) // 101 bytes each with the key
	}
	if h := kvHistory(t, s, "b", "old"); len(h) != 1 || !strings.HasPrefix(h[0], "1:") {
		t.Fatalf("history of old: %v, want its one current revision", h)
	}
	h := kvHistory(t, s, "b", "k")
	// 9 older revisions (909 bytes) fit in 1000, a 10th would not.
	if len(h) != 10 || !strings.HasPrefix(h[len(h)-1], "51:") || !strings.HasPrefix(h[0], "42:") {
		t.Fatalf("history of k: %d revisions from %.3s to %.3s, want 42 to 51 (9 older ones within %d bytes, and the current)", len(h), h[0], h[len(h)-1], bound)
	}
	if counted, held := olderBytes(t, s, "b"); counted != held || held != 9*101 {
		t.Fatalf("older bytes counted %d, held %d, want %d", counted, held, 9*101)
	}
	err := s.KVHistory(context.Background(), "b", "k", func(e appliance.KVEntry) error {
		if e.Expires != int64(e.Revision)*1000 {
			return fmt.Errorf("revision %d expires %d, want %d", e.Revision, e.Expires, e.Revision*1000)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A second key's churn takes the oldest of the bucket first: k's.
	for range 5 {
		put("j", 100)
	}
	if h := kvHistory(t, s, "b", "k"); len(h) != 6 || !strings.HasPrefix(h[0], "46:") {
		t.Fatalf("history of k after j's puts: %v, want 46 to 51 (its 4 oldest gave way to j's 4 older ones)", h)
	}
	// history lowered to 1 for a put of j (the default's short path): j's
	// older revisions go, and off the count.
	rev++
	op := kvOp("b", "j", kvcore.Put, rev, "one")
	op.KV.History, op.KV.HistoryBytes = 1, bound
	if _, err := apply(t, s, op); err != nil {
		t.Fatal(err)
	}
	if h := kvHistory(t, s, "b", "j"); len(h) != 1 {
		t.Fatalf("history of j after a put with history 1: %v", h)
	}
	if counted, held := olderBytes(t, s, "b"); counted != held || held != 5*101 {
		t.Fatalf("older bytes after j's put with history 1: counted %d, held %d, want %d (k's)", counted, held, 5*101)
	}
	if _, err := apply(t, s, kvOp("b", "k", kvcore.Delete, rev+1, "")); err != nil {
		t.Fatal(err)
	}
	if counted, held := olderBytes(t, s, "b"); counted != held || held != 0 {
		t.Fatalf("older bytes after deleting k: counted %d, held %d, want 0", counted, held)
	}
}

// A data directory made before older revisions were counted gains the
// count (and the expiry column) from what it holds, and trims to it.
func TestStore_KVMigratesOlderBytes(t *testing.T) {
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
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP INDEX kv_history_older`,
		`ALTER TABLE kv_history DROP COLUMN older`,
		`ALTER TABLE kv_history DROP COLUMN expires`,
		`ALTER TABLE kv_buckets DROP COLUMN older_bytes`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s = mustOpen(t, Config{Path: path})
	if counted, held := olderBytes(t, s, "b"); counted != 4*11 || held != counted {
		t.Fatalf("after migration: older bytes counted %d, held %d, want %d", counted, held, 4*11)
	}
	op := kvOp("b", "k", kvcore.Put, 6, "0123456789")
	op.KV.ContentType = ""
	op.KV.History, op.KV.HistoryBytes = 10, 25
	if _, err := apply(t, s, op); err != nil {
		t.Fatal(err)
	}
	if h := kvHistory(t, s, "b", "k"); strings.Join(h, " ") != "4:0123456789 5:0123456789 6:0123456789" {
		t.Fatalf("history after a put with a 25-byte bound: %v, want revisions 4 to 6 (two older ones, 22 bytes)", h)
	}
}
