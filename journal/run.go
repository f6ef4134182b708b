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
// first, so the order of effects on each message is kept.
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
	args []any
	hbuf []byte
}

func (s *Store) newRun() *run {
	if s.run == nil {
		s.run = &run{s: s}
	}
	r := s.run
	r.kind, r.ids, r.dels = runNone, r.ids[:0], r.dels[:0]
	return r
}

func (r *run) add(ctx context.Context, k runKind, id uint64, deliveries int) error {
	if r.kind != k || len(r.ids) >= runMax {
		if err := r.flush(ctx); err != nil {
			return err
		}
		r.kind = k
	}
	r.ids = append(r.ids, int64(id))
	if k == runClaim {
		r.dels = append(r.dels, int64(deliveries))
	}
	return nil
}

// flush applies the run and empties it.
func (r *run) flush(ctx context.Context) error {
	ids, dels, k := r.ids, r.dels, r.kind
	r.ids, r.dels, r.kind = r.ids[:0], r.dels[:0], runNone
	for len(ids) > 0 {
		n := runChunks[len(runChunks)-1]
		for _, c := range runChunks {
			if c <= len(ids) {
				n = c
				break
			}
		}
		r.args = r.args[:0]
		switch k {
		case runDelete:
			for _, id := range ids[:n] {
				r.args = append(r.args, id)
			}
			for _, t := range []string{"messages", "claims"} {
				st, err := r.s.runStmt(ctx, "DELETE FROM "+t+" WHERE id IN (", "?", ",", ")", n)
				if err != nil {
					return err
				}
				if _, err := st.ExecContext(ctx, r.args...); err != nil {
					return err
				}
			}
		case runClaim:
			for i, id := range ids[:n] {
				r.args = append(r.args, id, dels[i])
			}
			// Only for messages still there (an UPDATE of a gone row did
			// nothing, and ids are never reused); the higher count wins, in
			// whatever order the rows of one statement go in.
			st, err := r.s.runStmt(ctx, "INSERT INTO claims(id, deliveries) SELECT v.column1, v.column2 FROM (VALUES ", "(?,?)", ",",
				") v JOIN messages m ON m.id = v.column1 WHERE true ON CONFLICT(id) DO UPDATE SET deliveries = max(deliveries, excluded.deliveries)", n)
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
