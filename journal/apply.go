package journal

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/herald-mq/herald/appliance"
)

// flags column bits.
const flagZstd = 1

// qidIfAny is qid for operations that only remove (a purge, a forget of
// dedup ids): 0 and no row made when the journal never held the queue.
func (s *Store) qidIfAny(ctx context.Context, name string) (int64, error) {
	if id, ok := s.qids[name]; ok {
		return id, nil
	}
	var id int64
	err := s.st.selectQueue.QueryRowContext(ctx, name).Scan(&id)
	if err == sql.ErrNoRows {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s.qids[name] = id
	return id, nil
}

func (s *Store) qid(ctx context.Context, name string) (int64, error) {
	if id, ok := s.qids[name]; ok {
		return id, nil
	}
	var id int64
	err := s.st.selectQueue.QueryRowContext(ctx, name).Scan(&id)
	if err == sql.ErrNoRows {
		res, err := s.st.insertQueue.ExecContext(ctx, name)
		if err != nil {
			return 0, err
		}
		id, err = res.LastInsertId()
		if err != nil {
			return 0, err
		}
	} else if err != nil {
		return 0, err
	}
	s.qids[name] = id
	return id, nil
}

// apply applies the ops of b in order.
func (s *Store) apply(ctx context.Context, b *appliance.Batch, now int64) error {
	r := s.newRun()
	if err := s.applyOps(ctx, r, b, now); err != nil {
		return err
	}
	return r.flush(ctx)
}

// applyOps applies b's ops in order through r: deletes and claims join r's
// run of their kind, any other op first flushes the run. The caller
// flushes r at the end.
func (s *Store) applyOps(ctx context.Context, r *run, b *appliance.Batch, now int64) error {
	for i := range b.Ops {
		op := &b.Ops[i]
		switch op.Kind {
		case appliance.OpDelete:
			if err := r.del(ctx, op.ID, !op.NoClaim); err != nil {
				return err
			}
			continue
		case appliance.OpClaim:
			if op.Mark {
				if op.Queue == "" {
					return fmt.Errorf("journal: claim of message %d raises the mark of no queue", op.ID)
				}
				q, err := s.qid(ctx, op.Queue)
				if err != nil {
					return err
				}
				r.mark(q, op.ID)
				continue
			}
			if err := r.add(ctx, runClaim, op.ID, op.Deliveries); err != nil {
				return err
			}
			continue
		}
		if err := r.flush(ctx); err != nil {
			return err
		}
		if err := s.applyOp(ctx, op, now, &r.hbuf); err != nil {
			return err
		}
	}
	return nil
}

// applyOp applies one op other than a delete or claim.
func (s *Store) applyOp(ctx context.Context, op *appliance.Op, now int64, hb *[]byte) error {
	hbuf := *hb
	defer func() { *hb = hbuf }()
	{
		switch op.Kind {
		case appliance.OpEnqueue:
			m := op.Msg
			// Outputs are set afresh: a group commit with a failing batch
			// is applied twice (store.go, commit), the second time at a
			// later clock reading.
			op.Duplicate, op.DupOf = false, 0
			q, err := s.qid(ctx, m.Queue)
			if err != nil {
				return err
			}
			if m.DedupID != "" {
				var first, at int64
				err := s.st.dedupGet.QueryRowContext(ctx, q, m.DedupID).Scan(&first, &at)
				if err == nil && at >= now-s.cfg.DedupWindow.Milliseconds() {
					op.Duplicate, op.DupOf = true, uint64(first)
					return nil
				} else if err != nil && err != sql.ErrNoRows {
					return err
				}
			}
			if m.Enqueued == 0 {
				m.Enqueued = now
			}
			hbuf = encodeHeaders(hbuf[:0], m.Headers)
			body, flags := m.Body, 0
			if s.zip != nil && len(body) >= s.cfg.CompressMin {
				if z, ok := s.zip.compress(body); ok {
					body, flags = z, flagZstd
				}
			}
			res, err := s.st.insert.ExecContext(ctx, q, m.Enqueued, m.Deliveries, m.NotBefore, m.Expires, m.Group, flags, m.Size(), hbuf, body)
			if err != nil {
				return err
			}
			id, err := res.LastInsertId()
			if err != nil {
				return err
			}
			m.ID = uint64(id)
			if m.DedupID != "" {
				if _, err := s.st.dedupPut.ExecContext(ctx, q, m.DedupID, id, now); err != nil {
					return err
				}
			}
		case appliance.OpRelease:
			if _, err := s.st.release.ExecContext(ctx, op.NotBefore, int64(op.ID)); err != nil {
				return err
			}
		case appliance.OpMove:
			q, err := s.qid(ctx, op.Queue)
			if err != nil {
				return err
			}
			var hb any
			if op.Headers != nil {
				hbuf = encodeHeaders(hbuf[:0], op.Headers)
				hb = hbuf
			}
			var size any
			if op.Size > 0 {
				size = op.Size
			}
			res, err := s.st.move.ExecContext(ctx, q, op.Deliveries, size, hb, int64(op.ID))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return fmt.Errorf("journal: move: message %d not found", op.ID)
			}
			id, err := res.LastInsertId()
			if err != nil {
				return err
			}
			op.NewID = uint64(id)
			if err := s.deleteMsg(ctx, op.ID); err != nil {
				return err
			}
		case appliance.OpPurge:
			if err := s.purge(ctx, op); err != nil {
				return err
			}
		case appliance.OpBarrier:
		case appliance.OpAppend, appliance.OpTrim, appliance.OpCursor, appliance.OpStreamDelete, appliance.OpCursorSet:
			if err := s.applyStream(ctx, op, now, &hbuf); err != nil {
				return err
			}
		case appliance.OpKV:
			if err := s.applyKV(ctx, op.KV); err != nil {
				return err
			}
		case appliance.OpLock:
			if err := s.applyLock(ctx, op.Lock); err != nil {
				return err
			}
		case appliance.OpForgetDedup:
			q, err := s.qidIfAny(ctx, op.Queue)
			if err != nil {
				return err
			}
			if q == 0 {
				break // no row: no dedup id either
			}
			if _, err := s.wc.ExecContext(ctx, "DELETE FROM dedup WHERE qid=?", q); err != nil {
				return err
			}
		default:
			return fmt.Errorf("journal: unknown op kind %d", op.Kind)
		}
	}
	return nil
}

// deleteMsg deletes message id and its claims row.
func (s *Store) deleteMsg(ctx context.Context, id uint64) error {
	if _, err := s.st.delete.ExecContext(ctx, int64(id)); err != nil {
		return err
	}
	_, err := s.st.unclaim.ExecContext(ctx, int64(id))
	return err
}

// purge deletes the next messages of op.Queue in (op.After, op.ID] except
// op.Keep, in ID order: at most PurgeRows, and past the first at most
// PurgeBytes of them, so that a purge of millions of messages is a run of
// short transactions, not one that holds up every other writer (and
// grows the WAL by the size of the queue) for seconds.
func (s *Store) purge(ctx context.Context, op *appliance.Op) error {
	op.Affected, op.Bytes, op.PurgedTo = 0, 0, op.ID
	q, err := s.qidIfAny(ctx, op.Queue)
	if err != nil || q == 0 {
		return err // no row: nothing to purge, and none made for it
	}
	keep := make(map[uint64]bool, len(op.Keep))
	for _, id := range op.Keep {
		keep[id] = true
	}
	// The rows of the range in ID order, kept ones too: a run of kept rows
	// longer than the limit still moves the purge on.
	rows, err := s.wc.QueryContext(ctx, "SELECT id, size FROM messages WHERE qid=? AND id>? AND id<=? ORDER BY id LIMIT ?",
		q, int64(op.After), int64(op.ID), s.cfg.PurgeRows)
	if err != nil {
		return err
	}
	var last uint64
	seen, full := 0, false
	for rows.Next() {
		var id, size int64
		if err := rows.Scan(&id, &size); err != nil {
			rows.Close()
			return err
		}
		if op.Affected > 0 && op.Bytes+size > s.cfg.PurgeBytes {
			full = true
			break
		}
		seen++
		last = uint64(id)
		if !keep[uint64(id)] {
			op.Affected++
			op.Bytes += size
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if full || seen == s.cfg.PurgeRows {
		op.PurgedTo = last // rows past it may be left
	}
	if op.Affected == 0 {
		return nil
	}
	lit := "-1"
	for _, id := range op.Keep {
		if id > op.After && id <= op.PurgedTo {
			lit += "," + strconv.FormatUint(id, 10)
		}
	}
	where := "qid=? AND id>? AND id<=? AND id NOT IN (" + lit + ")"
	args := []any{q, int64(op.After), int64(op.PurgedTo)}
	if _, err := s.wc.ExecContext(ctx, "DELETE FROM claims WHERE id IN (SELECT id FROM messages WHERE "+where+")", args...); err != nil {
		return err
	}
	res, err := s.wc.ExecContext(ctx, "DELETE FROM messages WHERE "+where, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n != int64(op.Affected) {
		return fmt.Errorf("journal: purge of %s deleted %d messages, %d counted", op.Queue, n, op.Affected)
	}
	return nil
}
