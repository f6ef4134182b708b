package journal

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Page returns every field as it was stored: headers, an empty body, a
// compressed body (decompressed), group, schedule and expiry, the enqueue
// time, the dedup id, and the delivery count a claim raised; it filters by
// group, starts after After, stops at Limit and at MaxBytes (the message
// that reaches it included).
func TestStore_PageFields(t *testing.T) {
	s := mustOpen(t, Config{Compress: true, CompressMin: 64})
	big := strings.Repeat("compressible ", 400)
	msgs := []*appliance.Message{
		{Queue: "pf", Body: []byte("plain"), Headers: []stomp.Header{{Key: "k", Value: "v:1"}, {Key: "dedup-id", Value: "d-1"}}, Enqueued: 1000},
		{Queue: "pf", Body: []byte{}, Group: "g", NotBefore: 2000, Expires: 9000, Enqueued: 1001},
		{Queue: "pf", Body: []byte(big), Group: "g", Enqueued: 1002},
		{Queue: "pf", Body: []byte{0, 1, 2, 0}, Headers: []stomp.Header{{Key: "empty", Value: ""}}, Enqueued: 1003},
	}
	var ops []appliance.Op
	for _, m := range msgs {
		ops = append(ops, appliance.Op{Kind: appliance.OpEnqueue, Msg: m})
	}
	if _, err := apply(t, s, ops...); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(t, s, appliance.Op{Kind: appliance.OpClaim, ID: msgs[2].ID, Deliveries: 3}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var flags int
	if err := s.db.QueryRowContext(ctx, "SELECT flags FROM messages WHERE id = ?", int64(msgs[2].ID)).Scan(&flags); err != nil || flags&flagZstd == 0 {
		t.Fatalf("message 2 stored with flags %d (%v), want compressed", flags, err)
	}
	got, err := s.Page(ctx, appliance.PageRequest{Queue: "pf", Limit: 10})
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("Page: %d messages, %v; want %d", len(got), err, len(msgs))
	}
	for i, m := range got {
		w := msgs[i]
		wantDel := 0
		if i == 2 {
			wantDel = 3
		}
		if m.ID != w.ID || m.Queue != "pf" || !bytes.Equal(m.Body, w.Body) || m.Body == nil || m.Group != w.Group ||
			m.NotBefore != w.NotBefore || m.Expires != w.Expires || m.Enqueued != w.Enqueued || m.Deliveries != wantDel {
			t.Fatalf("message %d: got id %d body %.20q group %q nb %d exp %d enq %d del %d; want id %d body %.20q group %q nb %d exp %d enq %d del %d",
				i, m.ID, m.Body, m.Group, m.NotBefore, m.Expires, m.Enqueued, m.Deliveries, w.ID, w.Body, w.Group, w.NotBefore, w.Expires, w.Enqueued, wantDel)
		}
		if len(m.Headers) != len(w.Headers) {
			t.Fatalf("message %d: headers %v, want %v", i, m.Headers, w.Headers)
		}
		for j := range w.Headers {
			if m.Headers[j] != w.Headers[j] {
				t.Fatalf("message %d: headers %v, want %v", i, m.Headers, w.Headers)
			}
		}
	}
	if got[0].DedupID != "d-1" {
		t.Fatalf("dedup id %q, want d-1", got[0].DedupID)
	}
	if g, err := s.Page(ctx, appliance.PageRequest{Queue: "pf", Group: "g", Limit: 10}); err != nil || len(g) != 2 || g[0].ID != msgs[1].ID || g[1].ID != msgs[2].ID {
		t.Fatalf("group g: %d messages, %v; want messages 1 and 2", len(g), err)
	}
	if a, err := s.Page(ctx, appliance.PageRequest{Queue: "pf", After: msgs[1].ID, Limit: 1}); err != nil || len(a) != 1 || a[0].ID != msgs[2].ID {
		t.Fatalf("after message 1, limit 1: %d messages, %v; want message 2", len(a), err)
	}
	// MaxBytes counts the stored size: the first message reaches it.
	if b, err := s.Page(ctx, appliance.PageRequest{Queue: "pf", Limit: 10, MaxBytes: 1}); err != nil || len(b) != 1 {
		t.Fatalf("MaxBytes 1: %d messages, %v; want 1", len(b), err)
	}
	if b, err := s.Page(ctx, appliance.PageRequest{Queue: "pf", Limit: 10, MaxBytes: int64(msgs[0].Size() + msgs[1].Size() + 1)}); err != nil || len(b) != 3 {
		t.Fatalf("MaxBytes past two messages: %d messages, %v; want 3", len(b), err)
	}
	if n, err := s.Page(ctx, appliance.PageRequest{Queue: "nosuch", Limit: 10}); err != nil || len(n) != 0 {
		t.Fatalf("unknown queue: %d messages, %v; want none, no error", len(n), err)
	}
}

// MmapSize maps the database for the reader connections only: each pooled
// reader reports it (PRAGMA mmap_size), the writer 0; without it none maps.
// Page-ins read the same through the map.
func TestStore_MmapReaders(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int64{0, 8 << 20} {
		s := mustOpen(t, Config{MmapSize: size})
		if _, err := apply(t, s, enq("mm", "through the map")); err != nil {
			t.Fatal(err)
		}
		// Hold every reader at once, so that each pooled connection is seen.
		var conns []*sql.Conn
		for range 3 {
			c, err := s.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		for i, c := range conns {
			var got int64
			if err := c.QueryRowContext(ctx, "PRAGMA mmap_size").Scan(&got); err != nil || got != size {
				t.Fatalf("MmapSize %d: reader %d has mmap_size %d (%v), want %d", size, i, got, err, size)
			}
			c.Close()
		}
		var w int64
		if err := s.wc.QueryRowContext(ctx, "PRAGMA mmap_size").Scan(&w); err != nil || w != 0 {
			t.Fatalf("MmapSize %d: the writer has mmap_size %d (%v), want 0", size, w, err)
		}
		if ms, err := s.Page(ctx, appliance.PageRequest{Queue: "mm", Limit: 10}); err != nil || len(ms) != 1 || string(ms[0].Body) != "through the map" {
			t.Fatalf("MmapSize %d: Page got %d messages, %v", size, len(ms), err)
		}
	}
}
