package journal

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// A run is a sequence of deletes or of claims, applied by a few statements
// naming many messages each (DELETE ... WHERE id IN (...), a multi-row
// INSERT) instead of one statement per message: an acked drain journals a
// claim and a delete per message, and the per-statement cost (binding,
// cgo crossings, database/sql bookkeeping) was a third of the writer's
// time. Only ops of one kind join a run, and any other op flushes it
// first, so the order of effects on each message is kept. Raises of
// delivered marks join the run too, whatever its kind: a mark only grows,
// so their order does not matter; they are applied with the run, one
// UPDATE per queue.
type runKind uint8

const (
	runNone runKind = iota
	runDelete
	runClaim
)

// runChunks are the statement sizes a run is cut into (largest first).
var runChunks = [...]int{256, 64, 16, 4, 1}

// runMax is how many ops a run holds before it is flushed.
const runMax = 1024

type run struct {
	s    *Store
	kind runKind
	ids  []int64
	dels []int64 // claims: the deliveries of ids[i]
	cids []int64 // deletes: the ids with a claims row (the others have none)
	// claimAt: claims: the index in ids of each message's claim. A later
	// claim of the same message replaces the earlier one in place, so the
	// last count given wins (a revert after an abandoned delivery lowers
	// it) whatever order the rows of one statement go in.
	claimAt map[int64]int
	// marks: queue ID -> the highest mark raise of the run.
	marks map[int64]int64
	args  []any
	hbuf  []byte
}

func (s *Store) newRun() *run {
	if s.run == nil {
		s.run = &run{s: s}
	}
	r := s.run
	r.kind, r.ids, r.dels, r.cids = runNone, r.ids[:0], r.dels[:0], r.cids[:0]
	clear(r.marks)
	clear(r.claimAt)
	return r
}

// mark raises queue qid's delivered mark to id with the run.
func (r *run) mark(qid int64, id uint64) {
	if r.marks == nil {
		r.marks = map[int64]int64{}
	}
	r.marks[qid] = max(r.marks[qid], int64(id))
}

// del adds the delete of message id; claim says it may have a claims row.
func (r *run) del(ctx context.Context, id uint64, claim bool) error {
	if err := r.add(ctx, runDelete, id, 0); err != nil {
		return err
	}
	if claim {
		r.cids = append(r.cids, int64(id))
	}
	return nil
}

func (r *run) add(ctx context.Context, k runKind, id uint64, deliveries int) error {
	if r.kind != k || len(r.ids) >= runMax {
		if err := r.flush(ctx); err != nil {
			return err
		}
		r.kind = k
	}
	if k == runClaim {
		if i, ok := r.claimAt[int64(id)]; ok {
			r.dels[i] = int64(deliveries)
			return nil
		}
		if r.claimAt == nil {
			r.claimAt = map[int64]int{}
		}
		r.claimAt[int64(id)] = len(r.ids)
		r.dels = append(r.dels, int64(deliveries))
	}
	r.ids = append(r.ids, int64(id))
	return nil
}

// flush applies the run and empties it.
func (r *run) flush(ctx context.Context) error {
	for q, id := range r.marks {
		if _, err := r.s.st.raiseMark.ExecContext(ctx, id, q); err != nil {
			return err
		}
	}
	clear(r.marks)
	ids, dels, cids, k := r.ids, r.dels, r.cids, r.kind
	r.ids, r.dels, r.cids, r.kind = r.ids[:0], r.dels[:0], r.cids[:0], runNone
	clear(r.claimAt)
	if k == runDelete {
		if err := r.exec(ctx, "DELETE FROM claims WHERE id IN (", cids); err != nil {
			return err
		}
		err := r.exec(ctx, "DELETE FROM messages WHERE id IN (", ids)
		clear(r.args)
		return err
	}
	for len(ids) > 0 {
		n := chunk(len(ids))
		r.args = r.args[:0]
		switch k {
		case runClaim:
			for i, id := range ids[:n] {
				r.args = append(r.args, id, dels[i])
			}
			// Only for messages still there (an UPDATE of a gone row did
			// nothing, and ids are never reused); one row per message
			// (claimAt), its count replacing the stored one.
			st, err := r.s.runStmt(ctx, "INSERT INTO claims(id, deliveries) SELECT v.column1, v.column2 FROM (VALUES ", "(?,?)", ",",
				") v JOIN messages m ON m.id = v.column1 WHERE true ON CONFLICT(id) DO UPDATE SET deliveries = excluded.deliveries", n)
			if err != nil {
				return err
			}
			if _, err := st.ExecContext(ctx, r.args...); err != nil {
				return err
			}
			dels = dels[n:]
		default:
			return fmt.Errorf("journal: run of unknown kind %d", k)
		}
		ids = ids[n:]
	}
	clear(r.args)
	return nil
}

// exec runs head + "?,...)" over ids, in chunks.
func (r *run) exec(ctx context.Context, head string, ids []int64) error {
	for len(ids) > 0 {
		n := chunk(len(ids))
		r.args = r.args[:0]
		for _, id := range ids[:n] {
			r.args = append(r.args, id)
		}
		st, err := r.s.runStmt(ctx, head, "?", ",", ")", n)
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(ctx, r.args...); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// chunk is the largest of runChunks that is at most n (1 for n < 1).
func chunk(n int) int {
	for _, c := range runChunks {
		if c <= n {
			return c
		}
	}
	return 1
}

// runStmt returns the statement head + n items + tail, prepared once on
// the writer connection.
func (s *Store) runStmt(ctx context.Context, head, item, sep, tail string, n int) (*sql.Stmt, error) {
	key := runKey{head, n}
	if st := s.runStmts[key]; st != nil {
		return st, nil
	}
	var b strings.Builder
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(item)
	}
	b.WriteString(tail)
	st, err := s.wc.PrepareContext(ctx, b.String())
	if err != nil {
		return nil, err
	}
	if s.runStmts == nil {
		s.runStmts = map[runKey]*sql.Stmt{}
	}
	s.runStmts[key] = st
	return st, nil
}

type runKey struct {
	head string
	n    int
}
