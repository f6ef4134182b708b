package journal

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// checkpointer keeps the WAL bounded under continuous load without the
// writer copying pages inline (that copy, a RESTART of tens of MB between
// two transactions, was a 100-500 ms stall of every commit).
//
// SQLite starts the WAL over from its beginning, in place, at the first
// transaction that begins when every frame has been copied to the
// database (nBackfill == mxFrame) and no reader uses the WAL. So:
//   - under load, a PASSIVE checkpoint from this goroutine's pooled
//     connection copies frames while the writer goes on, every
//     busyInterval (rather than CheckpointInterval) while commits happen,
//     so each copies little;
//   - once the WAL holds more than restartAt (a quarter of WALLimit), it
//     repeats PASSIVE every hotInterval until one leaves few frames
//     uncopied (tailPages), then asks the writer for a PASSIVE between two
//     transactions: that copies only the frames committed since, and the
//     writer's next transaction starts the WAL over. The file is overwritten in place rather than truncated and
//     grown again (journal_size_limit = WALLimit only trims a WAL that
//     grew past it);
//   - when no commit happened for a CheckpointInterval, the writer, idle,
//     runs a TRUNCATE: a quiet journal keeps no WAL (and the checkpointer
//     then looks every idleInterval only);
//   - while a backup pins its snapshot the WAL cannot start over: it stays
//     PASSIVE at the normal pace;
//   - should the WAL reach WALLimit all the same (writes faster than the
//     checkpoints, this goroutine starved of CPU), the writer copies it back
//     itself between two transactions (walBackstop): commits wait for that
//     copy, and the WAL keeps its bound, which the disk floor counts on.
func (s *Store) checkpointer() {
	defer s.wg.Done()
	if s.ckHold != nil {
		select {
		case <-s.ckHold:
		case <-s.stop:
			return
		}
	}
	interval := min(s.cfg.CheckpointInterval, busyInterval)
	t := time.NewTimer(interval)
	defer t.Stop()
	var lastCommits uint64
	var quietSince time.Time
	truncated := false
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		t.Reset(interval)
		c := s.commits.Load()
		if c == lastCommits {
			if quietSince.IsZero() {
				quietSince = time.Now()
			}
			if !truncated && time.Since(quietSince) >= s.cfg.CheckpointInterval && s.backups.Load() == 0 {
				// Idle: give free pages back first, step by step, as
				// long as no commit comes.
				for s.reclaims && s.commits.Load() == lastCommits && s.reclaimable() {
					if !s.askWriter(ckReclaim) {
						break
					}
				}
				if _, wal := s.Sizes(); wal > 0 {
					s.askWriter(ckTruncate)
				}
				// Busy (a reader on the WAL): again after another interval.
				_, wal := s.Sizes()
				truncated = wal == 0
				if !truncated {
					quietSince = time.Now()
				}
			}
			if truncated {
				t.Reset(max(interval, idleInterval)) // nothing to do: wake less often
			}
			continue
		}
		lastCommits, quietSince, truncated = c, time.Time{}, false
		_, logPages, done, err := s.checkpoint("PASSIVE")
		if err != nil || int64(logPages)*int64(s.pageSize) <= s.restartAt() {
			continue
		}
		// Past restartAt: check again soon (not after a whole interval),
		// and once the frames left are few, have the writer copy them so
		// that its next transaction starts the WAL over. While a backup
		// pins its snapshot the WAL cannot start over: stay PASSIVE.
		if s.backups.Load() != 0 {
			continue
		}
		t.Reset(hotInterval)
		if logPages-done <= tailPages {
			s.askWriter(ckTail)
		}
	}
}

// Checkpointer tuning: how often it runs while commits happen, and how many
// frames at most the writer copies itself before the WAL starts over.
const (
	busyInterval = 10 * time.Millisecond
	hotInterval  = 2 * time.Millisecond   // while the WAL is past restartAt
	idleInterval = 100 * time.Millisecond // once an idle WAL is truncated
	tailPages    = 256
)

// restartAt is the WAL size (bytes) past which the checkpointer has the
// WAL start over.
func (s *Store) restartAt() int64 { return max(s.cfg.WALLimit/4, 1<<20) }

// Checkpoints the writer runs between transactions.
type ckMode uint8

const (
	ckTail     ckMode = iota // PASSIVE: copy the few frames left, so that the next transaction starts the WAL over
	ckTruncate               // TRUNCATE, when idle
	ckReclaim                // incremental_vacuum of reclaimStep pages, when idle (then TRUNCATE shrinks the file)
)

// walCheckEvery is how often at most the writer looks at the WAL's size
// (a stat) for walBackstop while it last saw it below half its limit;
// past that, after every commit.
const walCheckEvery = 5 * time.Millisecond

// walCheckDue reports whether walBackstop looks at the WAL now.
func (s *Store) walCheckDue() bool {
	return s.walSeen.Load() >= s.cfg.WALLimit/2 || time.Since(s.walChecked) >= walCheckEvery
}

// walBackstop runs on the writer, under wmu, after a commit: if the WAL
// file has grown past WALLimit (the checkpointer fell behind), the writer
// copies every frame back itself, a PASSIVE between two transactions, so
// that its next transaction starts the WAL over (and SQLite trims the file
// to journal_size_limit, WALLimit). A WAL past its limit is never one that
// started over since (that trims it), so the file's size tells. Not while
// a backup pins its snapshot: the WAL could not start over.
func (s *Store) walBackstop() {
	if !s.walCheckDue() {
		return
	}
	now := time.Now()
	s.walChecked = now
	fi, err := os.Stat(s.cfg.Path + "-wal")
	if err != nil {
		return
	}
	s.walSeen.Store(fi.Size())
	if fi.Size() <= s.cfg.WALLimit || s.backups.Load() != 0 {
		return
	}
	s.writerCheckpoint(&ckReq{mode: ckTail, done: make(chan struct{})})
	s.walBackstops.Add(1)
	if now.Sub(s.walWarned) >= time.Minute {
		s.walWarned = now
		s.log.Info("the WAL reached its limit before the checkpoints copied it back (writes faster than the checkpoints: a heavy write load, short of CPU, or a slow disk): the writer copied it itself, and commits waited for that; logged once a minute at most, counted in herald_journal_wal_backstops_total", "wal_bytes", fi.Size(), "wal_limit_bytes", s.cfg.WALLimit, "took", time.Since(now).Round(time.Microsecond))
	}
}

// reclaimStep is how many free pages one idle reclaim step gives back (2 MiB
// of 4 KiB pages): the first commit after the journal was idle waits for
// one step at most.
const reclaimStep = 512

// reclaimable reports whether the file holds at least ReclaimMin free
// bytes.
func (s *Store) reclaimable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	free, _, err := s.Reusable(ctx)
	return err == nil && free >= s.cfg.ReclaimMin
}

type ckReq struct {
	mode ckMode
	done chan struct{}
	ok   bool // set by the writer before done closes
}

// askWriter has the writer run mode between two transactions and waits
// for it (a PASSIVE running beside it would hold the checkpoint lock). It
// reports whether the writer ran it and it did its work (ckReclaim: gave
// pages back).
func (s *Store) askWriter(mode ckMode) bool {
	r := &ckReq{mode: mode, done: make(chan struct{})}
	select {
	case s.truncate <- r:
		select {
		case <-r.done:
			return r.ok
		case <-s.stop:
		}
	case <-s.stop:
	}
	return false
}

// checkpoint runs one checkpoint in mode on a pooled connection.
func (s *Store) checkpoint(mode string) (busy, logPages, done int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.checkpointOn(ctx, s.db.QueryRowContext, mode)
}

// checkpointOn runs one checkpoint in mode with query and records it.
func (s *Store) checkpointOn(ctx context.Context, query func(context.Context, string, ...any) *sql.Row, mode string) (busy, logPages, done int, err error) {
	if err := s.stoppedErr(); err != nil {
		// A stopped journal writes nothing: the next start's recovery
		// reads the files as the failure left them.
		return 0, 0, 0, err
	}
	start := time.Now()
	err = query(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &logPages, &done)
	if err != nil {
		// Not a reason to stop, unlike a commit's I/O error: a checkpoint
		// that fails records no progress (nBackfill moves only after the
		// database file's fsync), so the next one copies the same frames
		// again from the WAL, which still holds them; and a disk that
		// really fails fails the next commit's WAL fsync too.
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
// DedupMax. It runs on the writer goroutine between transactions. Its
// statements commit on their own: an I/O error in one stops the journal
// as one in a batch does, and a stopped journal prunes nothing.
func (s *Store) pruneDedup() {
	if s.stoppedErr() != nil {
		return
	}
	ctx := context.Background()
	failed := func(err error) {
		if ioFailure(err) {
			s.stopFor(err)
		}
		s.log.Warn("dedup prune failed", "err", err)
	}
	cut := s.cfg.Now().Add(-s.cfg.DedupWindow).UnixMilli()
	if _, err := s.wc.ExecContext(ctx, `DELETE FROM dedup WHERE at < ?`, cut); err != nil {
		failed(err)
		return
	}
	var n int
	if err := s.wc.QueryRowContext(ctx, `SELECT count(*) FROM dedup`).Scan(&n); err != nil {
		failed(err)
		return
	}
	if n <= s.cfg.DedupMax {
		return
	}
	// Exactly the oldest n-DedupMax: the ids of one commit share one time,
	// so a cut by time would take all of them.
	if _, err := s.wc.ExecContext(ctx, `DELETE FROM dedup WHERE (qid, key) IN (SELECT qid, key FROM dedup ORDER BY at LIMIT ?)`, n-s.cfg.DedupMax); err != nil {
		failed(err)
	}
}

// writerCheckpoint runs r on the writer connection without waiting for
// a reader (busy_timeout 0): a busy checkpoint is tried again at a later
// tick rather than stalling commits.
func (s *Store) writerCheckpoint(r *ckReq) {
	defer close(r.done)
	if s.stoppedErr() != nil {
		return
	}
	ctx := context.Background()
	if r.mode == ckReclaim {
		r.ok = s.reclaim(ctx)
		return
	}
	if _, err := s.wc.ExecContext(ctx, "PRAGMA busy_timeout=0"); err != nil {
		return
	}
	defer s.wc.ExecContext(ctx, "PRAGMA busy_timeout=10000")
	mode := "PASSIVE"
	if r.mode == ckTruncate {
		mode = "TRUNCATE"
	}
	busy, logPages, done, err := s.checkpointOn(ctx, s.wc.QueryRowContext, mode)
	if err == nil && (busy != 0 || done < logPages) {
		s.log.Debug("WAL restart postponed: a reader is using the WAL", "mode", mode)
	}
}

// reclaim gives up to reclaimStep free pages back to the filesystem (on the
// writer connection, between transactions): SQLite moves pages from the end
// of the file into free ones and truncates it (the file shrinks once the
// WAL is checkpointed). It reports whether pages went back.
func (s *Store) reclaim(ctx context.Context) bool {
	var before, after int64
	if err := s.wc.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&before); err != nil {
		return false
	}
	// A pragma whose every step returns a row: run it to the end.
	rows, err := s.wc.QueryContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", reclaimStep))
	if err != nil {
		s.log.Warn("reclaiming free pages failed", "err", err)
		return false
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		s.log.Warn("reclaiming free pages failed", "err", err)
		return false
	}
	if err := s.wc.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&after); err != nil || after >= before {
		return false
	}
	s.reclaimed.Add((before - after) * int64(s.pageSize))
	return true
}
