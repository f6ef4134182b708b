package journal

import (
	"context"
	"time"
)

// checkpointer runs PASSIVE checkpoints every CheckpointInterval, and a
// TRUNCATE checkpoint when the WAL has grown past WALLimit, so the WAL stays
// bounded under continuous load without the writer paying for it inline.
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
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if c := s.commits.Load(); c != lastCommits {
			lastCommits = c
			mode := "PASSIVE"
			if _, wal := s.Sizes(); wal > s.cfg.WALLimit && s.backups.Load() == 0 {
				mode = "TRUNCATE"
			}
			var busy, logPages, ckpt int
			start := time.Now()
			err := s.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &logPages, &ckpt)
			if err != nil {
				s.log.Warn("checkpoint failed", "mode", mode, "err", err)
			} else {
				s.checkpoints.Add(1)
				s.lastCheckpoint.Store(time.Now().UnixNano())
				s.log.Debug("checkpoint", "mode", mode, "wal_pages", logPages, "checkpointed", ckpt, "busy", busy, "took", time.Since(start))
			}
		}
		cancel()
	}
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
