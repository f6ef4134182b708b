package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// BackupStepPages is how many pages Backup copies per step (1 MiB with
// SQLite's default 4 KiB pages): small enough for smooth progress reports
// and prompt cancellation.
const BackupStepPages = 256

// ErrBackupExists is returned when the backup destination already exists.
var ErrBackupExists = errors.New("journal: backup destination exists: choose a new file name or remove the old one first")

// Backup writes a consistent copy of the journal to dest while the store
// keeps running, with SQLite's online backup API, BackupStepPages pages per
// step. progress, when not nil, is called after every step with the pages
// copied so far and the total.
//
// The copy is the state of the last transaction committed before Backup
// began: a read transaction is held on the source for the whole copy, so
// commits made meanwhile neither restart the copy nor appear in it (WAL mode
// lets the writer go on). Every message receipted before Backup was called
// is in the copy.
//
// The copy is written next to dest under a temporary name, synced and
// renamed, so dest either does not exist or holds a complete database. dest
// must not exist already (ErrBackupExists).
//
// While a backup runs, checkpoints cannot move past its snapshot, so the WAL
// grows by whatever is committed meanwhile until the backup ends.
func (s *Store) Backup(ctx context.Context, dest string, progress func(done, total int)) (err error) {
	if s.db == nil {
		return ErrClosed
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("%w: %s", ErrBackupExists, dest)
	}
	dir := filepath.Dir(dest)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dest)+".partial-*")
	if err != nil {
		return fmt.Errorf("journal: backup to %s: %w (is the directory writable by the daemon's user?)", dest, err)
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer func() {
		if err != nil {
			for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
				os.Remove(tmpName + suffix)
			}
		}
	}()

	// While a backup pins its snapshot, checkpoints stay PASSIVE: a
	// TRUNCATE would wait for the snapshot holding the write lock.
	s.backups.Add(1)
	defer s.backups.Add(-1)
	src, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("journal: backup: source connection: %w", err)
	}
	defer src.Close()
	// Pin a snapshot: with a read transaction open on the source, every step
	// reads the same database state, and the backup never restarts.
	if _, err := src.ExecContext(ctx, "BEGIN"); err != nil {
		return fmt.Errorf("journal: backup: begin: %w", err)
	}
	defer src.ExecContext(context.Background(), "ROLLBACK")
	var n int
	if err := src.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
		return fmt.Errorf("journal: backup: read snapshot: %w", err)
	}

	ddb, err := sql.Open("sqlite3", "file:"+tmpName+"?_busy_timeout=10000")
	if err != nil {
		return fmt.Errorf("journal: backup: open %s: %w", tmpName, err)
	}
	defer ddb.Close()
	dc, err := ddb.Conn(ctx)
	if err != nil {
		return fmt.Errorf("journal: backup: open %s: %w", tmpName, err)
	}
	err = src.Raw(func(sc any) error {
		return dc.Raw(func(dcr any) error {
			return s.copyPages(ctx, dcr.(*sqlite3.SQLiteConn), sc.(*sqlite3.SQLiteConn), progress)
		})
	})
	if cerr := dc.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("journal: backup: close %s: %w", tmpName, cerr)
	}
	if cerr := ddb.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("journal: backup: close %s: %w", tmpName, cerr)
	}
	if err != nil {
		return err
	}
	if err := syncFile(tmpName); err != nil {
		return fmt.Errorf("journal: backup: sync %s: %w", tmpName, err)
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("%w: %s", ErrBackupExists, dest)
	}
	if err := os.Rename(tmpName, dest); err != nil {
		return fmt.Errorf("journal: backup: rename to %s: %w", dest, err)
	}
	if err := syncFile(dir); err != nil {
		return fmt.Errorf("journal: backup: sync %s: %w", dir, err)
	}
	return nil
}

func (s *Store) copyPages(ctx context.Context, dst, src *sqlite3.SQLiteConn, progress func(done, total int)) error {
	b, err := dst.Backup("main", src, "main")
	if err != nil {
		return fmt.Errorf("journal: backup: start: %w", err)
	}
	start := time.Now()
	last := -1
	for {
		if err := ctx.Err(); err != nil {
			b.Close()
			return fmt.Errorf("journal: backup: %w", err)
		}
		done, err := b.Step(BackupStepPages)
		if err != nil {
			b.Close()
			return fmt.Errorf("journal: backup: step: %w", err)
		}
		total := b.PageCount()
		copied := total - b.Remaining()
		if progress != nil {
			progress(copied, total)
		}
		if !done && copied == last {
			time.Sleep(10 * time.Millisecond) // the source was busy or locked
		}
		last = copied
		if done {
			s.log.Info("backup copied", "pages", total, "took", time.Since(start).Round(time.Millisecond))
			break
		}
	}
	if err := b.Finish(); err != nil {
		return fmt.Errorf("journal: backup: finish: %w", err)
	}
	return nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
