package journal

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/herald-mq/herald/appliance"
)

var _ appliance.StreamJournal = (*Store)(nil)

// streamW is the writer's view of one stream: its id, the offset of the
// next append and the timestamp of the last one (timestamps never go back
// within a stream, so that a time maps to an offset by binary search).
type streamW struct {
	id     int64
	next   uint64
	lastTS int64
}

// stream returns the writer's view of stream name, creating the stream.
func (s *Store) stream(ctx context.Context, name string) (*streamW, error) {
	if w, ok := s.sids[name]; ok {
		return w, nil
	}
	w := &streamW{}
	var trimmed int64
	err := s.wc.QueryRowContext(ctx, `SELECT id, trimmed FROM streams WHERE name=?`, name).Scan(&w.id, &trimmed)
	if err == sql.ErrNoRows {
		res, err := s.wc.ExecContext(ctx, `INSERT INTO streams(name) VALUES(?)`, name)
		if err != nil {
			return nil, err
		}
		if w.id, err = res.LastInsertId(); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	} else {
		var last, ts sql.NullInt64
		err := s.wc.QueryRowContext(ctx, `SELECT off, ts FROM stream_messages WHERE sid=? ORDER BY off DESC LIMIT 1`, w.id).Scan(&last, &ts)
		if err != nil && err != sql.ErrNoRows {
			return nil, err
		}
		w.next = uint64(trimmed)
		if last.Valid && uint64(last.Int64)+1 > w.next {
			w.next = uint64(last.Int64) + 1
			w.lastTS = ts.Int64
		}
	}
	s.sids[name] = w
	return w, nil
}

func (s *Store) applyStream(ctx context.Context, op *appliance.Op, now int64, hbuf *[]byte) error {
	so := op.Stream
	if so == nil {
		return fmt.Errorf("journal: stream op %d without its stream", op.Kind)
	}
	w, err := s.stream(ctx, so.Name)
	if err != nil {
		return err
	}
	// Outputs are set afresh: a group commit with a failing batch is
	// applied twice (store.go, commit), and the counts below add up.
	op.Duplicate, op.DupOf, op.Affected, op.Bytes = false, 0, 0, 0
	switch op.Kind {
	case appliance.OpAppend:
		m := op.Msg
		if m.DedupID != "" {
			var first, at int64
			// Streams share the dedup table with queues under negative ids.
			err := s.st.dedupGet.QueryRowContext(ctx, -w.id, m.DedupID).Scan(&first, &at)
			if err == nil && at >= now-s.cfg.DedupWindow.Milliseconds() {
				op.Duplicate, op.DupOf = true, uint64(first)
				return nil
			} else if err != nil && err != sql.ErrNoRows {
				return err
			}
		}
		ts := max(now, w.lastTS)
		*hbuf = encodeHeaders((*hbuf)[:0], m.Headers)
		body, flags := m.Body, 0
		if s.zip != nil && len(body) >= s.cfg.CompressMin {
			if z, ok := s.zip.compress(body); ok {
				body, flags = z, flagZstd
			}
		}
		off := w.next
		if s.streamInsert == nil {
			if s.streamInsert, err = s.wc.PrepareContext(ctx, `INSERT INTO stream_messages(sid, off, ts, flags, size, headers, body) VALUES(?,?,?,?,?,?,?)`); err != nil {
				return err
			}
		}
		if _, err := s.streamInsert.ExecContext(ctx, w.id, int64(off), ts, flags, m.Size(), *hbuf, body); err != nil {
			return err
		}
		if m.DedupID != "" {
			if _, err := s.st.dedupPut.ExecContext(ctx, -w.id, m.DedupID, int64(off), now); err != nil {
				return err
			}
		}
		w.next, w.lastTS = off+1, ts
		m.ID, m.Enqueued = off, ts
	case appliance.OpTrim:
		// The oldest Limit offsets below Offset: by the primary key, from
		// the first held.
		var head sql.NullInt64
		if err := s.wc.QueryRowContext(ctx, `SELECT min(off) FROM stream_messages WHERE sid=?`, w.id).Scan(&head); err != nil {
			return err
		}
		hi := min(so.Offset, uint64(head.Int64)+uint64(max(so.Limit, 1)))
		rows, err := s.wc.QueryContext(ctx, `DELETE FROM stream_messages WHERE sid=? AND off<? RETURNING size`, w.id, int64(hi))
		if err != nil {
			return err
		}
		for rows.Next() {
			var size int64
			if err := rows.Scan(&size); err != nil {
				rows.Close()
				return err
			}
			op.Affected++
			op.Bytes += size
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var first sql.NullInt64
		if err := s.wc.QueryRowContext(ctx, `SELECT min(off) FROM stream_messages WHERE sid=?`, w.id).Scan(&first); err != nil {
			return err
		}
		so.First = w.next
		if first.Valid {
			so.First = uint64(first.Int64)
		}
		if _, err := s.wc.ExecContext(ctx, `UPDATE streams SET trimmed=max(trimmed, ?) WHERE id=?`, int64(so.First), w.id); err != nil {
			return err
		}
	case appliance.OpCursor:
		if _, err := s.wc.ExecContext(ctx, `INSERT INTO stream_cursors(sid, name, next) VALUES(?,?,?)
			ON CONFLICT(sid, name) DO UPDATE SET next=max(next, excluded.next)`, w.id, so.Cursor, int64(so.Offset)); err != nil {
			return err
		}
	case appliance.OpCursorSet:
		if _, err := s.wc.ExecContext(ctx, `INSERT INTO stream_cursors(sid, name, next) VALUES(?,?,?)
			ON CONFLICT(sid, name) DO UPDATE SET next=excluded.next`, w.id, so.Cursor, int64(so.Offset)); err != nil {
			return err
		}
	case appliance.OpStreamDelete:
		if so.Limit > 0 {
			res, err := s.wc.ExecContext(ctx, `DELETE FROM stream_messages WHERE sid=? AND off IN
				(SELECT off FROM stream_messages WHERE sid=? ORDER BY off LIMIT ?)`, w.id, w.id, so.Limit)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			op.Affected = int(n)
			if op.Affected == so.Limit {
				return nil
			}
		}
		for _, q := range []string{
			`DELETE FROM stream_messages WHERE sid=?`,
			`DELETE FROM stream_cursors WHERE sid=?`,
			`DELETE FROM streams WHERE id=?`,
		} {
			res, err := s.wc.ExecContext(ctx, q, w.id)
			if err != nil {
				return err
			}
			if q == `DELETE FROM stream_messages WHERE sid=?` {
				n, _ := res.RowsAffected()
				op.Affected += int(n)
			}
		}
		// Dedup ids of the stream (under its negative id): a new stream of
		// the name may get the same id.
		if _, err := s.wc.ExecContext(ctx, `DELETE FROM dedup WHERE qid=?`, -w.id); err != nil {
			return err
		}
		delete(s.sids, so.Name)
	}
	return nil
}

// Streams lists every stream with its offsets, size and cursors.
func (s *Store) Streams(ctx context.Context) ([]appliance.StreamState, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT s.id, s.name, s.trimmed,
			(SELECT min(off) FROM stream_messages WHERE sid=s.id), (SELECT max(off) FROM stream_messages WHERE sid=s.id),
			(SELECT count(*) FROM stream_messages WHERE sid=s.id), (SELECT coalesce(sum(size),0) FROM stream_messages WHERE sid=s.id)
		FROM streams s ORDER BY s.name`)
	if err != nil {
		return nil, fmt.Errorf("journal: list streams: %w", err)
	}
	var out []appliance.StreamState
	var ids []int64
	for rows.Next() {
		var st appliance.StreamState
		var id, trimmed int64
		var lo, hi sql.NullInt64
		if err := rows.Scan(&id, &st.Name, &trimmed, &lo, &hi, &st.Count, &st.Bytes); err != nil {
			rows.Close()
			return nil, fmt.Errorf("journal: list streams: %w", err)
		}
		st.Next = uint64(trimmed)
		if hi.Valid && uint64(hi.Int64)+1 > st.Next {
			st.Next = uint64(hi.Int64) + 1
		}
		st.First = st.Next
		if lo.Valid {
			st.First = uint64(lo.Int64)
		}
		st.Cursors = map[string]uint64{}
		out = append(out, st)
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("journal: list streams: %w", err)
	}
	for i, id := range ids {
		crows, err := s.db.QueryContext(ctx, `SELECT name, next FROM stream_cursors WHERE sid=?`, id)
		if err != nil {
			return nil, fmt.Errorf("journal: list stream cursors: %w", err)
		}
		for crows.Next() {
			var name string
			var next int64
			if err := crows.Scan(&name, &next); err != nil {
				crows.Close()
				return nil, fmt.Errorf("journal: list stream cursors: %w", err)
			}
			out[i].Cursors[name] = uint64(next)
		}
		crows.Close()
	}
	return out, nil
}

// StreamRead pages a stream's messages from offset from, bounded in count
// and bytes (by the size column: rows past the budget are never read).
func (s *Store) StreamRead(ctx context.Context, name string, from uint64, limit int, maxBytes int64) ([]*appliance.Message, error) {
	s.streamReadOnce.Do(func() {
		// Prepared once on the reader pool (database/sql prepares it on
		// each connection as it is used): a replay runs it per page.
		s.streamReadStmt, s.streamReadErr = s.db.PrepareContext(context.Background(), `SELECT m.off, m.ts, m.flags, m.size, m.headers, m.body FROM stream_messages m
		WHERE m.sid = (SELECT id FROM streams WHERE name=?) AND m.off >= ? ORDER BY m.off LIMIT ?`)
	})
	if s.streamReadErr != nil {
		return nil, fmt.Errorf("journal: read stream %s: %w", name, s.streamReadErr)
	}
	rows, err := s.streamReadStmt.QueryContext(ctx, name, int64(from), limit)
	if err != nil {
		return nil, fmt.Errorf("journal: read stream %s: %w", name, err)
	}
	defer rows.Close()
	out := make([]*appliance.Message, 0, min(limit, 1024))
	var total int64
	var hb sql.RawBytes // decodeHeaders copies what it keeps
	for rows.Next() {
		if maxBytes > 0 && total >= maxBytes {
			break
		}
		m := &appliance.Message{Queue: name}
		var off, size int64
		var flags int
		if err := rows.Scan(&off, &m.Enqueued, &flags, &size, &hb, &m.Body); err != nil {
			return nil, fmt.Errorf("journal: read stream %s: %w", name, err)
		}
		total += size
		m.ID = uint64(off)
		if m.Headers, err = decodeHeaders(hb); err != nil {
			return nil, fmt.Errorf("journal: read stream %s offset %d: %w", name, off, err)
		}
		if flags&flagZstd != 0 {
			if m.Body, err = decompress(m.Body); err != nil {
				return nil, fmt.Errorf("journal: read stream %s offset %d: %w", name, off, err)
			}
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// StreamEntries lists offsets, times and sizes from offset from.
func (s *Store) StreamEntries(ctx context.Context, name string, from uint64, limit int) ([]appliance.StreamEntry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT off, ts, size FROM stream_messages
		WHERE sid = (SELECT id FROM streams WHERE name=?) AND off >= ? ORDER BY off LIMIT ?`, name, int64(from), limit)
	if err != nil {
		return nil, fmt.Errorf("journal: read stream %s: %w", name, err)
	}
	defer rows.Close()
	var out []appliance.StreamEntry
	for rows.Next() {
		var e appliance.StreamEntry
		var off int64
		if err := rows.Scan(&off, &e.TS, &e.Size); err != nil {
			return nil, fmt.Errorf("journal: read stream %s: %w", name, err)
		}
		e.Offset = uint64(off)
		out = append(out, e)
	}
	return out, rows.Err()
}

// StreamOffsetAt finds the first offset with a timestamp >= ts by binary
// search (timestamps never decrease along a stream's offsets).
func (s *Store) StreamOffsetAt(ctx context.Context, name string, ts int64) (uint64, error) {
	var sid int64
	var lo, hi sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT s.id, (SELECT min(off) FROM stream_messages WHERE sid=s.id), (SELECT max(off) FROM stream_messages WHERE sid=s.id) FROM streams s WHERE s.name=?`, name).Scan(&sid, &lo, &hi)
	if err == sql.ErrNoRows {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("journal: stream %s offset at %d: %w", name, ts, err)
	}
	if !lo.Valid {
		sts, err := s.Streams(ctx)
		if err != nil {
			return 0, err
		}
		for _, st := range sts {
			if st.Name == name {
				return st.Next, nil
			}
		}
		return 0, nil
	}
	// First offset >= a with ts >= T, searching [a, b]; b+1 if none.
	a, b := lo.Int64, hi.Int64+1
	for a < b {
		mid := a + (b-a)/2
		var off, t int64
		err := s.db.QueryRowContext(ctx, `SELECT off, ts FROM stream_messages WHERE sid=? AND off>=? ORDER BY off LIMIT 1`, sid, mid).Scan(&off, &t)
		if err == sql.ErrNoRows {
			b = mid
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("journal: stream %s offset at %d: %w", name, ts, err)
		}
		if t >= ts {
			b = mid
		} else {
			a = off + 1
		}
	}
	return uint64(a), nil
}
