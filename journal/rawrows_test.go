package journal

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRawQuery_DropsConnectionAfterReadFailure: a read that fails with an
// I/O error or a corruption report does not return its connection to the
// pool. SQLite keeps the pages a connection read in its cache, and drops
// them only once the database changed: the connection would report the
// same damage at the next page-in however well the disk reads by then
// (an appliance test saw page-ins fail again, "malformed", after lazyfs
// read again, until a commit). Here a page of the file is damaged on
// disk, read, and mended: the next read, through the same pool of one
// connection, must see the mended file.
func TestRawQuery_DropsConnectionAfterReadFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	fill, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fill.Exec(`PRAGMA page_size = 4096; CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB)`); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := fill.Exec(`INSERT INTO t (id, b) VALUES (?, ?)`, i, []byte(strings.Repeat("b", 1000))); err != nil {
			t.Fatal(err)
		}
	}
	fill.Close()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const page = 10 // a leaf of t (about 50 of them, 4 rows each)
	if len(good) < page*4096 {
		t.Fatalf("the database has %d bytes, want more than %d pages", len(good), page)
	}
	bad := append([]byte(nil), good...)
	bad[(page-1)*4096] = 0xff // no such page type
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	rows := 0
	read := func() error {
		rows = 0
		return s.rawQuery(context.Background(), `SELECT id, b FROM t ORDER BY id`, nil, 2, func([]driver.Value) error {
			rows++
			return nil
		})
	}
	err = read()
	if !ioFailure(err) {
		t.Fatalf("reading a damaged page: %v, want SQLite's corruption report", err)
	}
	t.Logf("damaged: %v", err)
	if n := db.Stats().OpenConnections; n != 0 {
		t.Errorf("after the failed read the pool holds %d connections, want 0 (the failed one closed)", n)
	}

	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := read(); err != nil || rows != 200 {
		t.Fatalf("after the page was mended: %d rows, %v; want 200 and no error (the connection that read the damage was reused)", rows, err)
	}
}
