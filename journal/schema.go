package journal

import (
	"context"
	"database/sql"
	"fmt"
)

// schemaVersion 2 added the stream tables (streams, stream_messages,
// stream_cursors); a version 1 database gets them when opened. Version 3
// added claims (delivery counts recorded apart from the message rows): an
// older heraldd, which would not read it, refuses the database. Version 4
// added the delivered mark of each queue (queues.mark, below).
const schemaVersion = 4

var schema = []string{
	`CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
	// mark (version 4): the queue's delivered mark. A message of the
	// queue with no claims row counts at least one delivery if its ID is
	// at or below it: a first delivery in queue order raises the mark
	// (one row per queue and commit) instead of writing a claims row
	// before the MESSAGE and deleting it with the message. The queue's
	// core raises it only past messages that are delivered, gone or have
	// a claims row of their own (appliance/queuecore, Core.markHi).
	`CREATE TABLE IF NOT EXISTS queues(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, mark INTEGER NOT NULL DEFAULT 0)`,
	`CREATE TABLE IF NOT EXISTS messages(
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		qid INTEGER NOT NULL,
		enqueued INTEGER NOT NULL,
		deliveries INTEGER NOT NULL DEFAULT 0,
		not_before INTEGER NOT NULL DEFAULT 0,
		expires INTEGER NOT NULL DEFAULT 0,
		grp TEXT NOT NULL DEFAULT '',
		flags INTEGER NOT NULL DEFAULT 0,
		size INTEGER NOT NULL,
		headers BLOB NOT NULL,
		body BLOB NOT NULL)`,
	`CREATE INDEX IF NOT EXISTS messages_qid ON messages(qid, id)`,
	// Rescans of a parked message group (appliance/queuecore): grouped
	// messages only, so ungrouped enqueues pay nothing for it.
	`CREATE INDEX IF NOT EXISTS messages_grp ON messages(qid, grp, id) WHERE grp != ''`,
	// Delivery counts (version 3): a claim before a MESSAGE writes this
	// narrow row instead of rewriting the message's row (its body
	// included), which halved the pages an acked drain writes. A message's
	// delivery count is the larger of messages.deliveries (set by enqueue
	// and move) and its claims row, or, without a claims row, the larger
	// of messages.deliveries and 1 at or below its queue's mark; a delete
	// removes both rows.
	`CREATE TABLE IF NOT EXISTS claims(id INTEGER PRIMARY KEY, deliveries INTEGER NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS dedup(
		qid INTEGER NOT NULL,
		key TEXT NOT NULL,
		msg_id INTEGER NOT NULL,
		at INTEGER NOT NULL,
		PRIMARY KEY(qid, key)) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS dedup_at ON dedup(at)`,
	// Streams (version 2). trimmed: every offset below it was removed by
	// retention, so that the next offset survives a stream trimmed empty.
	`CREATE TABLE IF NOT EXISTS streams(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, trimmed INTEGER NOT NULL DEFAULT 0)`,
	`CREATE TABLE IF NOT EXISTS stream_messages(
		sid INTEGER NOT NULL,
		off INTEGER NOT NULL,
		ts INTEGER NOT NULL,
		flags INTEGER NOT NULL DEFAULT 0,
		size INTEGER NOT NULL,
		headers BLOB NOT NULL,
		body BLOB NOT NULL,
		PRIMARY KEY(sid, off))`,
	// A durable cursor: next is the first offset its consumer has not
	// acknowledged.
	`CREATE TABLE IF NOT EXISTS stream_cursors(
		sid INTEGER NOT NULL,
		name TEXT NOT NULL,
		next INTEGER NOT NULL,
		PRIMARY KEY(sid, name)) WITHOUT ROWID`,
}

// migrateTx runs migrate in one transaction: an upgrade that stops
// half-way (a full disk, a crash) leaves the data directory as it was, so
// the next start does all of it again (migrateKV decides by whether a
// column exists), and a newer data directory refused is left untouched.
func migrateTx(ctx context.Context, c *sql.Conn) error {
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migrate: begin: %w", err)
	}
	if err := migrate(ctx, c); err != nil {
		c.ExecContext(ctx, "ROLLBACK")
		return err
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		c.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

func migrate(ctx context.Context, c *sql.Conn) error {
	for _, q := range append(schema[:len(schema):len(schema)], kvSchema...) {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	if err := migrateKV(ctx, c); err != nil {
		return err
	}
	if err := addColumn(ctx, c, "queues", "mark", "INTEGER NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	var v int
	err := c.QueryRowContext(ctx, `SELECT CAST(value AS INTEGER) FROM meta WHERE key='schema_version'`).Scan(&v)
	switch {
	case err == sql.ErrNoRows:
		_, err = c.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES('schema_version', ?)`, fmt.Sprint(schemaVersion))
		return err
	case err != nil:
		return err
	case v > schemaVersion:
		return fmt.Errorf("journal schema version %d is newer than this heraldd understands (%d): upgrade herald", v, schemaVersion)
	case v < schemaVersion:
		// The CREATE ... IF NOT EXISTS above added what v lacked.
		_, err = c.ExecContext(ctx, `UPDATE meta SET value=? WHERE key='schema_version'`, fmt.Sprint(schemaVersion))
		return err
	}
	return nil
}

// addColumn adds column col (of type typ) to table unless it has it: for
// data directories made by earlier versions.
func addColumn(ctx context.Context, c *sql.Conn, table, col, typ string) error {
	has, err := hasColumn(ctx, c, table, col)
	if err != nil {
		return err
	}
	if !has {
		if _, err := c.ExecContext(ctx, `ALTER TABLE `+table+` ADD COLUMN `+col+` `+typ); err != nil {
			return fmt.Errorf("%s schema: add %s: %w", table, col, err)
		}
	}
	return nil
}

type stmts struct {
	insertQueue, selectQueue      *sql.Stmt
	insert, delete, release, move *sql.Stmt
	unclaim, raiseMark            *sql.Stmt
	dedupGet, dedupPut            *sql.Stmt
}

func prepare(ctx context.Context, c *sql.Conn) (*stmts, error) {
	st := &stmts{}
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&st.insertQueue, `INSERT INTO queues(name) VALUES(?)`},
		{&st.selectQueue, `SELECT id FROM queues WHERE name=?`},
		{&st.insert, `INSERT INTO messages(qid, enqueued, deliveries, not_before, expires, grp, flags, size, headers, body) VALUES(?,?,?,?,?,?,?,?,?,?)`},
		{&st.delete, `DELETE FROM messages WHERE id=?`},
		{&st.unclaim, `DELETE FROM claims WHERE id=?`},
		{&st.raiseMark, `UPDATE queues SET mark = max(mark, ?) WHERE id=?`},
		{&st.release, `UPDATE messages SET not_before=? WHERE id=?`},
		{&st.move, `INSERT INTO messages(qid, enqueued, deliveries, not_before, expires, grp, flags, size, headers, body) SELECT ?, enqueued, ?, 0, 0, grp, flags, coalesce(?, size), coalesce(?, headers), body FROM messages WHERE id=?`},
		{&st.dedupGet, `SELECT msg_id, at FROM dedup WHERE qid=? AND key=?`},
		{&st.dedupPut, `INSERT OR REPLACE INTO dedup(qid, key, msg_id, at) VALUES(?,?,?,?)`},
	} {
		s, err := c.PrepareContext(ctx, p.q)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("prepare %q: %w", p.q, err)
		}
		*p.dst = s
	}
	return st, nil
}

func (st *stmts) close() {
	for _, s := range []*sql.Stmt{st.insertQueue, st.selectQueue, st.insert, st.delete, st.unclaim, st.raiseMark, st.release, st.move, st.dedupGet, st.dedupPut} {
		if s != nil {
			s.Close()
		}
	}
}

// hasColumn reports whether table has column col.
func hasColumn(ctx context.Context, c *sql.Conn, table, col string) (bool, error) {
	rows, err := c.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
	if err != nil {
		return false, fmt.Errorf("%s schema: %w", table, err)
	}
	defer rows.Close()
	has := false
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return false, fmt.Errorf("%s schema: %w", table, err)
		}
		has = has || n == col
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("%s schema: %w", table, err)
	}
	return has, nil
}
