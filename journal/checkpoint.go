package journal

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// checkpointer keeps the WAL bounded under continuous load without the
// writer paying for it inline. Every CheckpointInterval it runs a PASSIVE
// checkpoint, which copies WAL frames into the database while the writer
// goes on. PASSIVE alone never lets the WAL restart under constant writes
// (new frames keep arriving), so when the WAL holds more than WALLimit it
// asks the writer goroutine for a RESTART between two transactions: run
// anywhere else, it starves waiting for the busy writer; run there, it
// blocks writes only while it copies the frames written since the last
// PASSIVE. The next transaction then writes the WAL from its start, and
// journal_size_limit trims the file.
func (s *Store) checkpointer() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.CheckpointInterval)
	defer t.Stop()
	var lastCommits uint64
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		c := s.commits.Load()
		if c == lastCommits {
			continue
		}
		lastCommits = c
		_, logPages, done, err := s.checkpoint("PASSIVE")
		if err != nil {
			continue
		}
		if int64(logPages)*int64(s.pageSize) > s.cfg.WALLimit {
			// Each PASSIVE copies what the WAL held when it began; repeat
			// until one copies little, so the RESTART's tail is short.
			for i := 0; i < 8; i++ {
				prev := done
				if _, logPages, done, err = s.checkpoint("PASSIVE"); err != nil || done-prev < 256 {
					break
				}
			}
		}
		// While a backup pins its snapshot, a TRUNCATE would wait for it
		// holding the write lock: stay PASSIVE until it is done.
		if int64(logPages)*int64(s.pageSize) > s.cfg.WALLimit && s.backups.Load() == 0 {
			// Wait for it: a PASSIVE running beside the RESTART would hold
			// the checkpoint lock and make it sleep in the busy handler.
			done := make(chan struct{})
			select {
			case s.truncate <- done:
				select {
				case <-done:
				case <-s.stop:
				}
			case <-s.stop:
			}
		}
	}
}

// checkpoint runs one checkpoint in mode on a pooled connection.
func (s *Store) checkpoint(mode string) (busy, logPages, done int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.checkpointOn(ctx, s.db.QueryRowContext, mode)
}

// checkpointOn runs one checkpoint in mode with query and records it.
func (s *Store) checkpointOn(ctx context.Context, query func(context.Context, string, ...any) *sql.Row, mode string) (busy, logPages, done int, err error) {
	start := time.Now()
	err = query(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &logPages, &done)
	if err != nil {
		s.log.Warn("checkpoint failed", "mode", mode, "err", err)
		return 0, 0, 0, err
	}
	s.checkpoints.Add(1)
	s.lastCheckpoint.Store(time.Now().UnixNano())
	level := slog.LevelDebug
	if d := time.Since(start); d > 100*time.Millisecond {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, "checkpoint", "mode", mode, "wal_pages", logPages, "checkpointed", done, "busy", busy, "took", time.Since(start).Round(time.Microsecond))
	return busy, logPages, done, nil
}

// pruneDedup drops dedup ids older than the window, and the oldest beyond
// DedupMax. It runs on the writer goroutine between transactions.
func (s *Store) pruneDedup() {
	ctx := context.Background()
	cut := s.cfg.Now().Add(-s.cfg.DedupWindow).UnixMilli()
	if _, err := s.wc.ExecContext(ctx, `DELETE FROM dedup WHERE at < ?`, cut); err != nil {
		s.log.Warn("dedup prune failed", "err", err)
		return
	}
	var n int
	if err := s.wc.QueryRowContext(ctx, `SELECT count(*) FROM dedup`).Scan(&n); err != nil || n <= s.cfg.DedupMax {
		return
	}
	if _, err := s.wc.ExecContext(ctx, `DELETE FROM dedup WHERE at <= (SELECT at FROM dedup ORDER BY at LIMIT 1 OFFSET ?)`, n-s.cfg.DedupMax); err != nil {
		s.log.Warn("dedup prune failed", "err", err)
	}
}

// restart runs a RESTART checkpoint on the writer connection without
// waiting: if a reader still uses the WAL it returns at once (busy) and the
// checkpointer asks again at its next tick, rather than stalling commits.
func (s *Store) restart() {
	ctx := context.Background()
	if _, err := s.wc.ExecContext(ctx, "PRAGMA busy_timeout=0"); err != nil {
		return
	}
	defer s.wc.ExecContext(ctx, "PRAGMA busy_timeout=10000")
	busy, _, _, err := s.checkpointOn(ctx, s.wc.QueryRowContext, "RESTART")
	if err == nil && busy != 0 {
		s.log.Debug("WAL restart postponed: a reader is using the WAL")
	}
}
