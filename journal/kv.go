package journal

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/kvcore"
)

// kvSchema holds the key-value buckets (appliance/kv.go): one counter row
// per bucket, one row per live key (a delete removes it; the counter keeps
// the revision it used, so no revision is ever reused). CREATE ... IF NOT
// EXISTS: a data directory made before the key-value store gains the
// tables when it is opened.
var kvSchema = []string{
	`CREATE TABLE IF NOT EXISTS kv_buckets(
		name TEXT PRIMARY KEY,
		revision INTEGER NOT NULL) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS kv(
		bucket TEXT NOT NULL,
		key TEXT NOT NULL,
		revision INTEGER NOT NULL,
		ctype TEXT NOT NULL DEFAULT '',
		value BLOB NOT NULL,
		PRIMARY KEY(bucket, key)) WITHOUT ROWID`,
	// The kept revisions of each live key (KVEntry.History of its last
	// write), the current one included.
	`CREATE TABLE IF NOT EXISTS kv_history(
		bucket TEXT NOT NULL,
		key TEXT NOT NULL,
		revision INTEGER NOT NULL,
		ctype TEXT NOT NULL DEFAULT '',
		value BLOB NOT NULL,
		PRIMARY KEY(bucket, key, revision)) WITHOUT ROWID`,
	// The last fencing token of each advisory lock (appliance/lock.go).
	`CREATE TABLE IF NOT EXISTS lock_tokens(
		name TEXT PRIMARY KEY,
		token INTEGER NOT NULL) WITHOUT ROWID`,
}

// kvWeight is a kv_history row's weight in SQL: kvcore.Entry.Size.
const kvWeight = `length(CAST(key AS BLOB)) + length(CAST(ctype AS BLOB)) + length(value)`

// migrateKV adds what data directories made by earlier versions lack: the
// expiry time of a key's value (0: never); which kept revisions are older
// ones (not a key's current revision), with their weight per bucket and
// an index to find a bucket's oldest.
func migrateKV(ctx context.Context, c *sql.Conn) error {
	if err := addColumn(ctx, c, "kv", "expires", "INTEGER NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	had, err := hasColumn(ctx, c, "kv_history", "older")
	if err != nil {
		return err
	}
	if err := addColumn(ctx, c, "kv_history", "older", "INTEGER NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	if err := addColumn(ctx, c, "kv_buckets", "older_bytes", "INTEGER NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	// A kept revision's expiry time (0: never), for kv-history frames.
	if err := addColumn(ctx, c, "kv_history", "expires", "INTEGER NOT NULL DEFAULT 0"); err != nil {
		return err
	}
	if !had {
		for _, q := range []string{
			`UPDATE kv_history SET older = 1 WHERE revision < coalesce(
				(SELECT kv.revision FROM kv WHERE kv.bucket = kv_history.bucket AND kv.key = kv_history.key), revision + 1)`,
			`UPDATE kv_buckets SET older_bytes = (SELECT coalesce(sum(` + kvWeight + `), 0) FROM kv_history WHERE bucket = kv_buckets.name AND older = 1)`,
		} {
			if _, err := c.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("kv_history schema: %w", err)
			}
		}
	}
	if _, err := c.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS kv_history_older ON kv_history(bucket, revision) WHERE older = 1`); err != nil {
		return fmt.Errorf("kv_history schema: %w", err)
	}
	return nil
}

// sumRows runs a statement RETURNING one integer per row and sums them.
func (s *Store) sumRows(ctx context.Context, q string, args ...any) (int64, error) {
	rows, err := s.wc.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, rows.Err()
}

// kvOlder adds delta to bucket's older revisions' weight and, when it is
// then over bound (0: none), deletes the bucket's oldest older revisions
// until it is not.
func (s *Store) kvOlder(ctx context.Context, bucket string, delta, bound int64) error {
	if delta == 0 {
		return nil // within the bound before, within it still (a lowered bound trims at the next growth)
	}
	var total int64
	if err := s.wc.QueryRowContext(ctx, `UPDATE kv_buckets SET older_bytes = older_bytes + ? WHERE name = ? RETURNING older_bytes`, delta, bucket).Scan(&total); err != nil {
		return err
	}
	if bound <= 0 || total <= bound {
		return nil
	}
	for total > bound {
		// The oldest, as few as bring the total within the bound.
		rows, err := s.wc.QueryContext(ctx, `SELECT key, revision, `+kvWeight+` FROM kv_history WHERE bucket = ? AND older = 1 ORDER BY revision LIMIT 64`, bucket)
		if err != nil {
			return err
		}
		type row struct {
			key    string
			rev, w int64
		}
		var old []row
		left := total
		for left > bound && rows.Next() {
			var r row
			if err := rows.Scan(&r.key, &r.rev, &r.w); err != nil {
				rows.Close()
				return err
			}
			old = append(old, r)
			left -= r.w
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(old) == 0 {
			return fmt.Errorf("journal: kv: bucket %s counts %d bytes of older revisions but holds none", bucket, total)
		}
		for _, r := range old {
			if _, err := s.wc.ExecContext(ctx, `DELETE FROM kv_history WHERE bucket = ? AND key = ? AND revision = ?`, bucket, r.key, r.rev); err != nil {
				return err
			}
		}
		total = left
	}
	_, err := s.wc.ExecContext(ctx, `UPDATE kv_buckets SET older_bytes = ? WHERE name = ?`, total, bucket)
	return err
}

// applyLock stores a lock's new fencing token inside the current
// transaction; a token not above the stored one is refused (it would go
// back or be given twice).
func (s *Store) applyLock(ctx context.Context, t *appliance.LockToken) error {
	if t == nil || t.Name == "" || t.Token == 0 {
		return fmt.Errorf("journal: lock: incomplete token %+v", t)
	}
	var cur int64
	err := s.wc.QueryRowContext(ctx, `SELECT token FROM lock_tokens WHERE name=?`, t.Name).Scan(&cur)
	if err == nil && uint64(cur) >= t.Token {
		return fmt.Errorf("journal: lock %s is at token %d; token %d would be given twice", t.Name, cur, t.Token)
	}
	_, err = s.wc.ExecContext(ctx, `INSERT INTO lock_tokens(name, token) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET token=excluded.token`, t.Name, int64(t.Token))
	return err
}

// LockLoad calls fn with every lock's last token.
func (s *Store) LockLoad(ctx context.Context, fn func(t appliance.LockToken) error) error {
	rows, err := s.db.QueryContext(ctx, `SELECT name, token FROM lock_tokens ORDER BY name`)
	if err != nil {
		return fmt.Errorf("journal: load lock tokens: %w", err)
	}
	var ts []appliance.LockToken
	for rows.Next() {
		var t appliance.LockToken
		var tok int64
		if err := rows.Scan(&t.Name, &tok); err != nil {
			rows.Close()
			return fmt.Errorf("journal: load lock tokens: %w", err)
		}
		t.Token = uint64(tok)
		ts = append(ts, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("journal: load lock tokens: %w", err)
	}
	for _, t := range ts {
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

var _ appliance.LockJournal = (*Store)(nil)

// applyKV stores one key-value change inside the current transaction.
func (s *Store) applyKV(ctx context.Context, e *appliance.KVEntry) error {
	if e == nil || e.Bucket == "" || e.Key == "" || e.Revision == 0 {
		return fmt.Errorf("journal: kv: incomplete change %+v", e)
	}
	var cur int64
	err := s.wc.QueryRowContext(ctx, `SELECT revision FROM kv_buckets WHERE name=?`, e.Bucket).Scan(&cur)
	if err == nil && uint64(cur) >= e.Revision {
		return fmt.Errorf("journal: kv: bucket %s is at revision %d; revision %d would be reused", e.Bucket, cur, e.Revision)
	}
	if _, err := s.wc.ExecContext(ctx, `INSERT INTO kv_buckets(name, revision) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET revision=excluded.revision`, e.Bucket, int64(e.Revision)); err != nil {
		return err
	}
	switch e.Op {
	case kvcore.Put:
		v := e.Value
		if v == nil {
			v = []byte{}
		}
		if _, err = s.wc.ExecContext(ctx, `INSERT OR REPLACE INTO kv(bucket, key, revision, ctype, value, expires) VALUES(?,?,?,?,?,?)`, e.Bucket, e.Key, int64(e.Revision), e.ContentType, v, e.Expires); err != nil {
			return err
		}
		if max(e.History, 1) == 1 {
			// Only the new revision is kept (the default): the key's
			// others go, older ones (from a larger history before)
			// taken off the bucket's count. Two statements, as before
			// the count, and no churn in the older rows' index.
			gone, err := s.sumRows(ctx, `DELETE FROM kv_history WHERE bucket=? AND key=? RETURNING older * (`+kvWeight+`)`, e.Bucket, e.Key)
			if err != nil {
				return err
			}
			if _, err = s.wc.ExecContext(ctx, `INSERT INTO kv_history(bucket, key, revision, ctype, value, expires) VALUES(?,?,?,?,?,?)`, e.Bucket, e.Key, int64(e.Revision), e.ContentType, v, e.Expires); err != nil {
				return err
			}
			return s.kvOlder(ctx, e.Bucket, -gone, 0)
		}
		// The key's current revision becomes an older one.
		aged, err := s.sumRows(ctx, `UPDATE kv_history SET older = 1 WHERE bucket=? AND key=? AND older = 0 RETURNING `+kvWeight, e.Bucket, e.Key)
		if err != nil {
			return err
		}
		if _, err = s.wc.ExecContext(ctx, `INSERT INTO kv_history(bucket, key, revision, ctype, value, expires) VALUES(?,?,?,?,?,?)`, e.Bucket, e.Key, int64(e.Revision), e.ContentType, v, e.Expires); err != nil {
			return err
		}
		// Keep the newest max(History, 1).
		trimmed, err := s.sumRows(ctx, `DELETE FROM kv_history WHERE bucket=?1 AND key=?2 AND revision <= coalesce(
			(SELECT revision FROM kv_history WHERE bucket=?1 AND key=?2 ORDER BY revision DESC LIMIT 1 OFFSET ?3), 0) RETURNING `+kvWeight,
			e.Bucket, e.Key, max(e.History, 1))
		if err != nil {
			return err
		}
		err = s.kvOlder(ctx, e.Bucket, aged-trimmed, e.HistoryBytes)
	case kvcore.Delete:
		if _, err = s.wc.ExecContext(ctx, `DELETE FROM kv WHERE bucket=? AND key=?`, e.Bucket, e.Key); err != nil {
			return err
		}
		gone, err := s.sumRows(ctx, `DELETE FROM kv_history WHERE bucket=? AND key=? RETURNING older * (`+kvWeight+`)`, e.Bucket, e.Key)
		if err != nil {
			return err
		}
		err = s.kvOlder(ctx, e.Bucket, -gone, 0)
	default:
		err = fmt.Errorf("journal: kv: unknown operation %d", e.Op)
	}
	return err
}

// KVLoad calls fn with every bucket's revision counter (Op 0, no key), then
// every live key.
func (s *Store) KVLoad(ctx context.Context, fn func(e appliance.KVEntry) error) error {
	rows, err := s.db.QueryContext(ctx, `SELECT name, revision FROM kv_buckets ORDER BY name`)
	if err != nil {
		return fmt.Errorf("journal: load kv buckets: %w", err)
	}
	var buckets []appliance.KVEntry
	for rows.Next() {
		var e appliance.KVEntry
		var rev int64
		if err := rows.Scan(&e.Bucket, &rev); err != nil {
			rows.Close()
			return fmt.Errorf("journal: load kv buckets: %w", err)
		}
		e.Revision = uint64(rev)
		buckets = append(buckets, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("journal: load kv buckets: %w", err)
	}
	for _, e := range buckets {
		if err := fn(e); err != nil {
			return err
		}
	}
	rows, err = s.db.QueryContext(ctx, `SELECT bucket, key, revision, ctype, value, expires FROM kv ORDER BY bucket, key`)
	if err != nil {
		return fmt.Errorf("journal: load kv: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e := appliance.KVEntry{Op: kvcore.Put}
		var rev int64
		if err := rows.Scan(&e.Bucket, &e.Key, &rev, &e.ContentType, &e.Value, &e.Expires); err != nil {
			return fmt.Errorf("journal: load kv: %w", err)
		}
		e.Revision = uint64(rev)
		if err := fn(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

// KVHistory calls fn with the kept revisions of a key, oldest first.
func (s *Store) KVHistory(ctx context.Context, bucket, key string, fn func(e appliance.KVEntry) error) error {
	rows, err := s.db.QueryContext(ctx, `SELECT revision, ctype, value, expires FROM kv_history WHERE bucket=? AND key=? ORDER BY revision`, bucket, key)
	if err != nil {
		return fmt.Errorf("journal: kv history of %s.%s: %w", bucket, key, err)
	}
	defer rows.Close()
	for rows.Next() {
		e := appliance.KVEntry{Bucket: bucket, Key: key, Op: kvcore.Put}
		var rev int64
		if err := rows.Scan(&rev, &e.ContentType, &e.Value, &e.Expires); err != nil {
			return fmt.Errorf("journal: kv history of %s.%s: %w", bucket, key, err)
		}
		e.Revision = uint64(rev)
		if err := fn(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

var _ appliance.KVJournal = (*Store)(nil)
