package journal

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

func appendOp(stream, body string, hdrs ...stomp.Header) appliance.Op {
	m := &appliance.Message{Queue: stream, Body: []byte(body), Headers: hdrs}
	for _, h := range hdrs {
		if h.Key == "dedup-id" {
			m.DedupID = h.Value
		}
	}
	return appliance.Op{Kind: appliance.OpAppend, Msg: m, Stream: &appliance.StreamOp{Name: stream}}
}

func streamState(t *testing.T, s *Store, name string) appliance.StreamState {
	t.Helper()
	sts, err := s.Streams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("stream %s not listed in %+v", name, sts)
	return appliance.StreamState{}
}

func TestStream_AppendDedupTrimCursor(t *testing.T) {
	clock := time.UnixMilli(1_000_000)
	path := filepath.Join(t.TempDir(), "herald.db")
	s := mustOpen(t, Config{Path: path, Now: func() time.Time { return clock }})
	ctx := context.Background()
	b, err := apply(t, s, appendOp("s", "a"), appendOp("s", "b", stomp.Header{Key: "dedup-id", Value: "x"}), appendOp("other", "z"))
	if err != nil {
		t.Fatal(err)
	}
	if b.Ops[0].Msg.ID != 0 || b.Ops[1].Msg.ID != 1 || b.Ops[2].Msg.ID != 0 {
		t.Fatalf("offsets %d %d %d, want 0 1 0 (per stream, from 0)", b.Ops[0].Msg.ID, b.Ops[1].Msg.ID, b.Ops[2].Msg.ID)
	}
	b, err = apply(t, s, appendOp("s", "b again", stomp.Header{Key: "dedup-id", Value: "x"}))
	if err != nil || !b.Ops[0].Duplicate || b.Ops[0].DupOf != 1 {
		t.Fatalf("duplicate not detected: %+v %v", b.Ops[0], err)
	}
	for i := range 8 {
		clock = clock.Add(time.Second)
		if _, err := apply(t, s, appendOp("s", fmt.Sprint("m", i))); err != nil {
			t.Fatal(err)
		}
	}
	st := streamState(t, s, "s")
	if st.First != 0 || st.Next != 10 || st.Count != 10 {
		t.Fatalf("state %+v, want first 0 next 10 count 10", st)
	}
	ms, err := s.StreamRead(ctx, "s", 2, 100, 0)
	if err != nil || len(ms) != 8 || ms[0].ID != 2 || string(ms[0].Body) != "m0" || ms[0].Enqueued != 1_001_000 {
		t.Fatalf("read from 2: %d messages, err %v, first %+v", len(ms), err, ms[0])
	}
	// Bounded by bytes: each message is 66 bytes or so; 100 bytes -> 2.
	if ms, _ := s.StreamRead(ctx, "s", 0, 100, 100); len(ms) != 2 {
		t.Fatalf("byte-bounded read returned %d messages, want 2", len(ms))
	}
	if off, err := s.StreamOffsetAt(ctx, "s", 1_004_500); err != nil || off != 6 {
		t.Fatalf("offset at ts: %d %v, want 6", off, err)
	}
	if off, _ := s.StreamOffsetAt(ctx, "s", 9_000_000); off != 10 {
		t.Fatalf("offset after the end: %d, want 10", off)
	}
	// Trim in small steps.
	b, err = apply(t, s, appliance.Op{Kind: appliance.OpTrim, Stream: &appliance.StreamOp{Name: "s", Offset: 7, Limit: 4}})
	if err != nil || b.Ops[0].Affected != 4 || b.Ops[0].Stream.First != 4 {
		t.Fatalf("trim: affected %d first %d err %v, want 4 and 4", b.Ops[0].Affected, b.Ops[0].Stream.First, err)
	}
	// Cursor moves forward only.
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpCursor, Stream: &appliance.StreamOp{Name: "s", Cursor: "c", Offset: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpCursor, Stream: &appliance.StreamOp{Name: "s", Cursor: "c", Offset: 3}}); err != nil {
		t.Fatal(err)
	}
	// Trim everything: the next offset survives a restart.
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpTrim, Stream: &appliance.StreamOp{Name: "s", Offset: 100, Limit: 100}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, Config{Path: path, Now: func() time.Time { return clock }})
	st = streamState(t, s, "s")
	if st.First != 10 || st.Next != 10 || st.Count != 0 || st.Cursors["c"] != 5 {
		t.Fatalf("after restart %+v, want first=next=10, empty, cursor c at 5", st)
	}
	b, err = apply(t, s, appendOp("s", "after"))
	if err != nil || b.Ops[0].Msg.ID != 10 {
		t.Fatalf("append after a full trim got offset %d (%v), want 10: offsets are never reused", b.Ops[0].Msg.ID, err)
	}
}

// A data directory written before streams existed (schema version 1)
// opens, keeps its queue messages and gains the stream tables.
func TestStream_MigratesVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herald.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	v1 := []string{
		`CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`CREATE TABLE queues(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)`,
		`CREATE TABLE messages(id INTEGER PRIMARY KEY AUTOINCREMENT, qid INTEGER NOT NULL, enqueued INTEGER NOT NULL,
			deliveries INTEGER NOT NULL DEFAULT 0, not_before INTEGER NOT NULL DEFAULT 0, expires INTEGER NOT NULL DEFAULT 0,
			grp TEXT NOT NULL DEFAULT '', flags INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL, headers BLOB NOT NULL, body BLOB NOT NULL)`,
		`CREATE INDEX messages_qid ON messages(qid, id)`,
		`CREATE TABLE dedup(qid INTEGER NOT NULL, key TEXT NOT NULL, msg_id INTEGER NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(qid, key)) WITHOUT ROWID`,
		`CREATE INDEX dedup_at ON dedup(at)`,
		`INSERT INTO meta VALUES('schema_version', '1')`,
		`INSERT INTO queues VALUES(1, 'old')`,
		`INSERT INTO messages(qid, enqueued, size, headers, body) VALUES(1, 1, 67, x'00', x'6f6c64')`,
	}
	for _, q := range v1 {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s := mustOpen(t, Config{Path: path})
	ms, err := s.Load(context.Background(), "old", 0, 10)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "old" {
		t.Fatalf("queue message of the version 1 database: %v %v", ms, err)
	}
	if b, err := apply(t, s, appendOp("s", "new")); err != nil || b.Ops[0].Msg.ID != 0 {
		t.Fatalf("append after migration: %v", err)
	}
	var v string
	if err := s.db.QueryRow(`SELECT value FROM meta WHERE key='schema_version'`).Scan(&v); err != nil || v != fmt.Sprint(schemaVersion) {
		t.Fatalf("schema_version %q %v, want %d", v, err, schemaVersion)
	}
}
