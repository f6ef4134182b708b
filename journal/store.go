package journal

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance"
	sqlite3 "github.com/mattn/go-sqlite3"
)

var _ appliance.Journal = (*Store)(nil)

// Defaults for Config.
const (
	DefaultMaxBatchOps        = 4096
	DefaultIntake             = 8192
	DefaultDedupWindow        = 5 * time.Minute
	DefaultDedupMax           = 1_000_000
	DefaultCheckpointInterval = time.Second
	DefaultWALLimit           = 64 << 20
	DefaultCompressMin        = 4096
	DefaultPurgeRows          = 2000
	DefaultPurgeBytes         = 4 << 20
	DefaultReclaimMin         = 64 << 20
)

// Config configures a Store. Zero values take the defaults above.
type Config struct {
	Path               string        // database file
	Sync               string        // "full" (fsync per group commit, default) or "normal"
	MaxBatchOps        int           // operations per transaction
	DedupWindow        time.Duration // how long a dedup id is remembered
	DedupMax           int           // at most this many dedup ids are remembered
	CheckpointInterval time.Duration // idle this long: TRUNCATE the WAL (under load PASSIVE runs every 10 ms, checkpoint.go)
	WALLimit           int64         // the WAL's bound: it starts over past a quarter of it (checkpoint.go)
	Compress           bool          // zstd-compress bodies of at least CompressMin bytes when it pays
	CompressMin        int
	// MmapSize is how many bytes of the database file the reader
	// connections (page-ins, recovery, backups) read through a memory map
	// (PRAGMA mmap_size) instead of read(2) into their own page caches;
	// 0: none. The writer never maps. A disk read error inside the map
	// ends the process (SIGBUS) instead of failing one read.
	MmapSize int64
	// PurgeRows and PurgeBytes bound what one purge operation deletes (a
	// purge is a run of them, other transactions between): at most this
	// many messages, and past the first, at most this many bytes of them.
	// 0: DefaultPurgeRows, DefaultPurgeBytes.
	PurgeRows  int
	PurgeBytes int64
	// ReclaimMin: once the journal has been idle for a CheckpointInterval
	// and its file holds at least this many free bytes (the pages of
	// deleted messages), it gives them back to the filesystem, a few MiB
	// per step, stopping at the first commit (a database created by this
	// version: incremental auto-vacuum). 0: DefaultReclaimMin.
	ReclaimMin int64
	Logger     *slog.Logger
	Now        func() time.Time // clock, for tests
}

// Stats are the journal's counters, safe to read at any time.
type Stats struct {
	Commits        uint64
	Ops            uint64
	FailedCommits  uint64
	LastBatchOps   int
	LastCommitTime time.Duration
	LastCheckpoint time.Time
	Checkpoints    uint64
	// WALBackstops: times the WAL reached WALLimit and the writer copied
	// it back itself (walBackstop).
	WALBackstops uint64
	Inline       uint64 // batches committed on the submitter's goroutine (CommitNow)
	// ReadErrors: page-ins (Page) that failed to read a queue's messages
	// from the database (an I/O error, corruption), not counting reads
	// whose context was cancelled. The queue retries them.
	ReadErrors uint64
}

// Store is the SQLite journal.
type Store struct {
	cfg Config
	log *slog.Logger
	db  *sql.DB
	wc  *sql.Conn // writer connection, used under wmu (the writer goroutine, CommitNow)
	// wmu: the writer connection and what goes with it (qids, sids, run,
	// runStmts, st): the writer goroutine holds it for each transaction,
	// checkpoint and prune, CommitNow for its one batch.
	wmu sync.Mutex
	// walChecked: when the writer last looked at the WAL's size
	// (walBackstop), and walWarned when it last said it copied the WAL
	// back itself; the writer's, under wmu.
	walChecked, walWarned time.Time
	walSeen               atomic.Int64 // the WAL's size it last saw
	// ckHold, set by tests before Open, holds the checkpointer until it is
	// closed (a checkpointer starved of CPU).
	ckHold chan struct{}
	// queued: batches submitted whose completion is not yet run or handed
	// to the completer (CommitNow commits only with none).
	queued atomic.Int64

	mu     sync.RWMutex // guards closed against Submit
	closed bool
	in     chan *appliance.Batch
	// closing is closed when Close starts: a Submit waiting for room in
	// the intake gives up (it holds mu, which Close needs).
	closing     chan struct{}
	closingOnce sync.Once
	// abort is closed when a Close gave up waiting for the flush: the
	// writer fails what is still queued instead of committing it.
	abort     chan struct{}
	abortOnce sync.Once
	// flushed is closed once the goroutines have ended (everything
	// submitted is committed or failed), released once the database is
	// closed too.
	flushed, released chan struct{}
	done              chan completed
	// truncate asks the writer for a checkpoint between transactions (see
	// checkpointer).
	truncate chan *ckReq
	stop     chan struct{}
	wg       sync.WaitGroup

	qids map[string]int64    // writer-owned cache of queue ids
	sids map[string]*streamW // writer-owned cache of stream ids and next offsets (stream.go)

	// stopped holds the I/O error that stopped the journal (see
	// stopFor); halted is closed then.
	stopped    atomic.Pointer[error]
	halted     chan struct{}
	haltedOnce sync.Once

	commits, ops, failed, checkpoints, walBackstops atomic.Uint64
	pendingDone                                     atomic.Int64  // completions handed to the completer, not yet run
	inline                                          atomic.Uint64 // batches CommitNow committed
	readErrors                                      atomic.Uint64 // page-ins that failed (Stats.ReadErrors)
	lastBatch                                       atomic.Int64
	lastCommitNs                                    atomic.Int64
	lastCheckpoint                                  atomic.Int64
	backups                                         atomic.Int32                   // backups running
	commitHook                                      func(ops int, d time.Duration) // metrics, optional

	st           *stmts
	streamInsert *sql.Stmt            // prepared at the first stream append (stream.go)
	run          *run                 // writer-owned, reused (run.go)
	runStmts     map[runKey]*sql.Stmt // prepared on first use (run.go)
	// StreamRead's statement on the reader pool, prepared at the first
	// read (closed with the pool).
	streamReadOnce sync.Once
	streamReadStmt *sql.Stmt
	streamReadErr  error
	pageSize       int
	// reclaims: the file gives free pages back (auto_vacuum incremental:
	// a database this version created); reclaimed counts the bytes.
	reclaims  bool
	reclaimed atomic.Int64
	zip       *compressor
}

type completed struct {
	batches []*appliance.Batch
	errs    []error
}

// New returns a Store for cfg with defaults applied. Open does the work.
func New(cfg Config) *Store {
	if cfg.Sync == "" {
		cfg.Sync = "full"
	}
	if cfg.MaxBatchOps <= 0 {
		cfg.MaxBatchOps = DefaultMaxBatchOps
	}
	if cfg.PurgeRows <= 0 {
		cfg.PurgeRows = DefaultPurgeRows
	}
	if cfg.PurgeBytes <= 0 {
		cfg.PurgeBytes = DefaultPurgeBytes
	}
	if cfg.ReclaimMin <= 0 {
		cfg.ReclaimMin = DefaultReclaimMin
	}
	if cfg.DedupWindow <= 0 {
		cfg.DedupWindow = DefaultDedupWindow
	}
	if cfg.DedupMax <= 0 {
		cfg.DedupMax = DefaultDedupMax
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = DefaultCheckpointInterval
	}
	if cfg.WALLimit <= 0 {
		cfg.WALLimit = DefaultWALLimit
	}
	if cfg.CompressMin <= 0 {
		cfg.CompressMin = DefaultCompressMin
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Store{cfg: cfg, log: cfg.Logger, qids: map[string]int64{}, sids: map[string]*streamW{},
		closing: make(chan struct{}), abort: make(chan struct{}), halted: make(chan struct{}),
		flushed: make(chan struct{}), released: make(chan struct{})}
}

// SetCommitHook installs fn, called after each commit with its size and
// duration (for metrics). Call before Open.
func (s *Store) SetCommitHook(fn func(ops int, d time.Duration)) { s.commitHook = fn }

// MinSQLiteVersion is the oldest SQLite Herald runs on: older releases have
// the WAL-reset corruption bug.
const MinSQLiteVersion = 3051003

// Open opens (creating if needed) the database, checks the SQLite version,
// and starts the writer, completion and checkpoint goroutines.
func (s *Store) Open(ctx context.Context) error {
	if v, _, _ := sqlite3.Version(); vnum(v) < MinSQLiteVersion {
		return fmt.Errorf("journal: SQLite %s is too old (need 3.51.3 or newer, which fixes the WAL-reset bug): rebuild with github.com/mattn/go-sqlite3 v1.14.53 or newer", v)
	}
	sync := "FULL"
	switch strings.ToLower(s.cfg.Sync) {
	case "full":
	case "normal":
		sync = "NORMAL"
	default:
		return fmt.Errorf("journal: sync %q: want \"full\" or \"normal\"", s.cfg.Sync)
	}
	// _mutex=no: multi-thread mode, no lock around every call on a
	// connection; database/sql never shares one between goroutines at a
	// time (docs/design.md, "Page-ins can read the database through a
	// memory map").
	dsn := fmt.Sprintf("file:%s?_journal_mode=WAL&_synchronous=%s&_busy_timeout=10000&_foreign_keys=0&_cache_size=-16384&_mutex=no", s.cfg.Path, sync)
	drv := &sqlite3.SQLiteDriver{}
	// A new database gives the pages of deleted messages back to the
	// filesystem (reclaim, checkpoint.go): incremental auto-vacuum. It can
	// only be chosen before the WAL and the first table exist, so a new
	// file is made by a connection of its own that sets it first; not in
	// every connection's DSN: setting it there waits for the write lock,
	// which a busy writer holds. A database made before keeps its free
	// pages for reuse (Reusable) until a VACUUM converts it.
	if fi, err := os.Stat(s.cfg.Path); errors.Is(err, os.ErrNotExist) || err == nil && fi.Size() == 0 {
		boot := sql.OpenDB(connector{dsn: "file:" + s.cfg.Path + "?_auto_vacuum=incremental&_journal_mode=WAL", drv: drv})
		err := boot.PingContext(ctx)
		boot.Close()
		if err != nil {
			return fmt.Errorf("open journal %s: %w (is the data directory writable?)", s.cfg.Path, err)
		}
	}
	if n := s.cfg.MmapSize; n > 0 {
		// Every pooled connection maps; the writer turns it off below.
		drv.ConnectHook = func(c *sqlite3.SQLiteConn) error {
			_, err := c.Exec(fmt.Sprintf("PRAGMA mmap_size=%d", n), nil)
			return err
		}
	}
	db := sql.OpenDB(connector{dsn: dsn, drv: drv})
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(0)
	s.db = db
	wc, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return fmt.Errorf("open journal %s: %w (is the data directory writable?)", s.cfg.Path, err)
	}
	s.wc = wc
	var mode string
	if err := wc.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		s.closeDB()
		return fmt.Errorf("open journal %s: journal_mode is %q, not wal (%v): is the file on a filesystem without shared-memory support?", s.cfg.Path, mode, err)
	}
	for _, q := range []string{
		"PRAGMA wal_autocheckpoint=0", // checkpoints run in the background (checkpoint.go)
		"PRAGMA temp_store=MEMORY",
		"PRAGMA mmap_size=0",                                        // the writer reads with read(2): see Config.MmapSize
		fmt.Sprintf("PRAGMA journal_size_limit=%d", s.cfg.WALLimit), // a reset WAL shrinks back
	} {
		if _, err := wc.ExecContext(ctx, q); err != nil {
			s.closeDB()
			return fmt.Errorf("open journal %s: %s: %w", s.cfg.Path, q, err)
		}
	}
	if err := wc.QueryRowContext(ctx, "PRAGMA page_size").Scan(&s.pageSize); err != nil {
		s.closeDB()
		return fmt.Errorf("open journal %s: %w", s.cfg.Path, err)
	}
	if err := migrateTx(ctx, wc); err != nil {
		s.closeDB()
		return fmt.Errorf("open journal %s: %w", s.cfg.Path, err)
	}
	var av int
	if err := wc.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&av); err == nil {
		s.reclaims = av == 2
	}
	if s.st, err = prepare(ctx, wc); err != nil {
		s.closeDB()
		return fmt.Errorf("open journal %s: %w", s.cfg.Path, err)
	}
	if s.cfg.Compress {
		if s.zip, err = newCompressor(); err != nil {
			s.closeDB()
			return err
		}
	}
	s.in = make(chan *appliance.Batch, DefaultIntake)
	s.done = make(chan completed, 64)
	s.truncate = make(chan *ckReq)
	s.stop = make(chan struct{})
	s.wg.Add(3)
	go s.writer()
	go s.completer()
	go s.checkpointer()
	return nil
}

func vnum(v string) int {
	var a, b, c int
	fmt.Sscanf(v, "%d.%d.%d", &a, &b, &c)
	return a*1000000 + b*1000 + c
}

func (s *Store) closeDB() {
	if s.st != nil {
		s.st.close()
	}
	if s.streamInsert != nil {
		s.streamInsert.Close()
	}
	for _, st := range s.runStmts {
		st.Close()
	}
	if s.wc != nil {
		s.wc.Close()
	}
	if s.db != nil {
		s.db.Close()
	}
}

// connector opens the journal's connections with its own driver value (and
// so its own ConnectHook) instead of a globally registered driver name.
type connector struct {
	dsn string
	drv *sqlite3.SQLiteDriver
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }

// Submit queues b for the next group commit.
func (s *Store) Submit(b *appliance.Batch) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		if b.Done != nil {
			b.Done(b, ErrClosed)
		}
		return
	}
	s.queued.Add(1)
	select {
	case s.in <- b:
		s.mu.RUnlock()
	case <-s.closing:
		s.queued.Add(-1)
		s.mu.RUnlock()
		if b.Done != nil {
			b.Done(b, ErrClosed)
		}
	}
}

// Close stops intake, commits everything submitted, runs a final TRUNCATE
// checkpoint and closes the database. It is idempotent.
//
// If ctx ends first, Close returns an error wrapping ErrNotFlushed and
// ctx.Err(): the batch being committed completes, the batches still queued
// fail with ErrClosed (nothing of them is stored), and the database closes
// in the background once the writer is done. A later Close waits for that,
// again bounded by its ctx.
func (s *Store) Close(ctx context.Context) error {
	s.closingOnce.Do(func() { close(s.closing) })
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	opened := s.in != nil
	if first && opened {
		close(s.in)
	}
	s.mu.Unlock()
	if !opened {
		return nil
	}
	if first {
		close(s.stop)
		go s.release()
	}
	select {
	case <-s.released:
		return nil
	case <-ctx.Done():
		s.abortOnce.Do(func() { close(s.abort) })
		select {
		case <-s.flushed:
			return fmt.Errorf("journal: everything is stored, but the final checkpoint did not finish in time (the database closes once it is interrupted): %w", ctx.Err())
		default:
		}
		return fmt.Errorf("%w: batches still queued fail with ErrClosed, not stored: %w", ErrNotFlushed, ctx.Err())
	}
}

// release waits for the writer, completion and checkpoint goroutines, then
// checkpoints (unless Close gave up waiting) and closes the database.
func (s *Store) release() {
	defer close(s.released)
	s.wg.Wait()
	s.wmu.Lock() // a CommitNow running its Done
	defer s.wmu.Unlock()
	close(s.flushed)
	if !s.aborted() && s.stopped.Load() == nil {
		// The WAL is durable without it: interrupted when Close gives up.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		go func() {
			select {
			case <-s.abort:
				cancel()
			case <-ctx.Done():
			}
		}()
		_, err := s.wc.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
		cancel()
		if err != nil {
			s.log.Warn("final checkpoint failed", "err", err)
		}
	}
	s.closeDB()
}

func (s *Store) aborted() bool {
	select {
	case <-s.abort:
		return true
	default:
		return false
	}
}

// Stats returns the journal's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Commits:        s.commits.Load(),
		Ops:            s.ops.Load(),
		FailedCommits:  s.failed.Load(),
		LastBatchOps:   int(s.lastBatch.Load()),
		LastCommitTime: time.Duration(s.lastCommitNs.Load()),
		Checkpoints:    s.checkpoints.Load(),
		WALBackstops:   s.walBackstops.Load(),
		Inline:         s.inline.Load(),
		ReadErrors:     s.readErrors.Load(),
	}
	if t := s.lastCheckpoint.Load(); t != 0 {
		st.LastCheckpoint = time.Unix(0, t)
	}
	return st
}

// Path returns the database file.
func (s *Store) Path() string { return s.cfg.Path }

// Sizes returns the database and WAL file sizes in bytes.
func (s *Store) Sizes() (db, wal int64) {
	if fi, err := os.Stat(s.cfg.Path); err == nil {
		db = fi.Size()
	}
	if fi, err := os.Stat(s.cfg.Path + "-wal"); err == nil {
		wal = fi.Size()
	}
	return db, wal
}

// Reusable reports what of the journal's files new data takes before they
// grow: the database's free pages in bytes (SQLite's freelist: the pages of
// deleted messages, filled before the file grows, until an idle journal
// gives them back: reclaim), and the WAL file's size (its frames are
// overwritten in place once copied back, up to WALLimit). The broker's disk
// floor counts them (appliance.Broker.checkDisk).
func (s *Store) Reusable(ctx context.Context) (free, wal int64, err error) {
	var pages int64
	if err := s.db.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&pages); err != nil {
		return 0, 0, err
	}
	_, wal = s.Sizes()
	return pages * int64(s.pageSize), wal, nil
}

// ReclaimedBytes is how many bytes of free pages the journal gave back to
// the filesystem since it opened (ReclaimMin).
func (s *Store) ReclaimedBytes() int64 { return s.reclaimed.Load() }

// isPurge reports whether b holds a part of a purge.
func isPurge(b *appliance.Batch) bool {
	for i := range b.Ops {
		if b.Ops[i].Kind == appliance.OpPurge {
			return true
		}
	}
	return false
}

func (s *Store) writer() {
	defer s.wg.Done()
	defer close(s.done)
	var batches []*appliance.Batch
	prune := time.NewTicker(10 * time.Second)
	defer prune.Stop()
	// carry: a purge batch taken while gathering the last transaction; it
	// starts the next one (see isPurge).
	var carry *appliance.Batch
	for {
		var first *appliance.Batch
		if carry != nil {
			first, carry = carry, nil
		} else {
			select {
			case b, ok := <-s.in:
				if !ok {
					return
				}
				first = b
			case <-prune.C:
				s.wmu.Lock()
				s.pruneDedup()
				s.wmu.Unlock()
				continue
			case r := <-s.truncate:
				s.wmu.Lock()
				s.writerCheckpoint(r)
				s.wmu.Unlock()
				continue
			}
		}
		batches = append(batches[:0], first)
		n := len(first.Ops)
		// A part of a purge takes milliseconds (it deletes up to
		// PurgeRows messages): it commits alone, so that what waits
		// behind it waits for one part at most, not for it and the next.
	drain:
		for n < s.cfg.MaxBatchOps && !isPurge(first) {
			select {
			case b, ok := <-s.in:
				if !ok {
					break drain
				}
				if isPurge(b) {
					carry = b
					break drain
				}
				batches = append(batches, b)
				n += len(b.Ops)
			default:
				break drain
			}
		}
		if s.aborted() {
			// Close gave up waiting: fail the rest fast, in order.
			errs := make([]error, len(batches))
			for i := range errs {
				errs[i] = ErrClosed
			}
			s.pendingDone.Add(1)
			s.done <- completed{batches: append([]*appliance.Batch(nil), batches...), errs: errs}
			s.queued.Add(-int64(len(batches)))
			clear(batches)
			continue
		}
		s.wmu.Lock()
		start := time.Now()
		errs := s.commit(batches, n)
		d := time.Since(start)
		s.lastCommitNs.Store(int64(d))
		s.lastBatch.Store(int64(n))
		if s.commitHook != nil {
			s.commitHook(n, d)
		}
		// Nothing to commit next and every earlier completion run: run
		// this one here, sparing a lone SEND's receipt the hand-over to
		// the completion goroutine (completions never block; order is
		// kept, since none is pending).
		if len(s.in) == 0 && carry == nil && s.pendingDone.Load() == 0 {
			if len(batches) == 1 {
				batches[0].Lone = true
			}
			s.complete(completed{batches: batches, errs: errs})
			s.queued.Add(-int64(len(batches)))
			s.walBackstop()
			s.wmu.Unlock()
			clear(batches) // see below
			continue
		}
		s.pendingDone.Add(1)
		s.queued.Add(-int64(len(batches)))
		s.wmu.Unlock()
		s.done <- completed{batches: append([]*appliance.Batch(nil), batches...), errs: errs}
		// The slice is reused: a batch left in it would keep its Done
		// (and the frame and message its closure holds) alive until the
		// next group as large, or for as long as the journal idles.
		clear(batches)
		if s.walCheckDue() {
			s.wmu.Lock()
			s.walBackstop()
			s.wmu.Unlock()
		}
	}
}

// CommitNow commits b on the calling goroutine and runs its Done there
// (with b.Lone set), if the journal is idle: every batch submitted before
// is committed and its completion has run, and the writer is not busy. It
// reports whether it did; if not, b is untouched and the caller submits
// it. For a submitter that waits for nothing but b (a lone SEND whose
// client waits for the RECEIPT): the hand-over to the writer goroutine, a
// wake-up of another thread, is a large part of such a round trip on a
// machine whose idle CPUs sleep deeply. Done runs under the writer's lock,
// as the writer runs a lone completion: it must not block, nor submit.
func (s *Store) CommitNow(b *appliance.Batch) bool {
	if s.queued.Load() != 0 || s.pendingDone.Load() != 0 {
		return false
	}
	s.mu.RLock()
	if s.closed || !s.wmu.TryLock() {
		s.mu.RUnlock()
		return false
	}
	if s.queued.Load() != 0 || s.pendingDone.Load() != 0 {
		s.wmu.Unlock()
		s.mu.RUnlock()
		return false
	}
	start := time.Now()
	errs := s.commit([]*appliance.Batch{b}, len(b.Ops))
	d := time.Since(start)
	s.mu.RUnlock()
	s.lastCommitNs.Store(int64(d))
	s.lastBatch.Store(int64(len(b.Ops)))
	if s.commitHook != nil {
		s.commitHook(len(b.Ops), d)
	}
	s.inline.Add(1)
	b.Lone = true
	if b.Done != nil {
		b.Done(b, errs[0])
	}
	s.wmu.Unlock()
	return true
}

func (s *Store) completer() {
	defer s.wg.Done()
	for c := range s.done {
		s.complete(c)
		s.pendingDone.Add(-1)
	}
}

// complete runs the Done of each batch of c, in order.
func (s *Store) complete(c completed) {
	for i, b := range c.batches {
		if b.Done != nil {
			b.Done(b, c.errs[i])
		}
	}
}

// commit applies batches in one transaction. The fast path runs them
// without savepoints; if one fails, the transaction is rolled back and
// redone with a savepoint per batch so that the failing batch fails alone.
func (s *Store) commit(batches []*appliance.Batch, nops int) []error {
	if err := s.stoppedErr(); err != nil {
		errs := make([]error, len(batches))
		for i := range errs {
			errs[i] = err
		}
		s.failed.Add(1)
		return errs
	}
	errs, retry := s.commitTx(batches, false)
	if retry {
		errs, _ = s.commitTx(batches, true)
	}
	if errs == nil {
		errs = make([]error, len(batches))
	}
	return errs
}

// commitTx runs one transaction. Without savepoints, a failing batch makes
// it return retry=true after rolling back.
func (s *Store) commitTx(batches []*appliance.Batch, savepoints bool) (errs []error, retry bool) {
	ctx := context.Background()
	fail := func(err error) ([]error, bool) {
		s.failed.Add(1)
		if ioFailure(err) {
			s.stopFor(err)
			err = fmt.Errorf("journal: %w (%v); nothing of this was stored; heraldd stops so that a restart recovers the journal", appliance.ErrJournalStopped, err)
		} else {
			err = classify(err)
		}
		errs := make([]error, len(batches))
		for i := range errs {
			errs[i] = err
		}
		s.qids = map[string]int64{} // rolled back: created queues may be gone
		s.sids = map[string]*streamW{}
		return errs, false
	}
	rollback := func() {
		s.wc.ExecContext(ctx, "ROLLBACK")
		s.qids = map[string]int64{}
		s.sids = map[string]*streamW{}
	}
	if _, err := s.wc.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fail(err)
	}
	now := s.cfg.Now().UnixMilli()
	nops := 0
	// Without savepoints, deletes and claims of consecutive batches join
	// one run (run.go): a failure anywhere redoes the whole transaction
	// with a savepoint per batch.
	r := s.newRun()
	for i, b := range batches {
		nops += len(b.Ops)
		if !savepoints {
			err := s.applyOps(ctx, r, b, now)
			if err == nil && i == len(batches)-1 {
				err = r.flush(ctx)
			}
			if err != nil {
				rollback()
				if len(batches) == 1 || ioFailure(err) {
					return fail(err)
				}
				return nil, true
			}
			continue
		}
		if _, err := s.wc.ExecContext(ctx, "SAVEPOINT b"); err != nil {
			rollback()
			return fail(err)
		}
		if err := s.apply(ctx, b, now); err != nil {
			if ioFailure(err) {
				rollback()
				return fail(err)
			}
			if _, rerr := s.wc.ExecContext(ctx, "ROLLBACK TO b"); rerr != nil {
				rollback()
				return fail(rerr)
			}
			s.qids = map[string]int64{}
			s.sids = map[string]*streamW{}
			if errs == nil {
				errs = make([]error, len(batches))
			}
			errs[i] = classify(err)
		}
		if _, err := s.wc.ExecContext(ctx, "RELEASE b"); err != nil {
			rollback()
			return fail(err)
		}
	}
	if _, err := s.wc.ExecContext(ctx, "COMMIT"); err != nil {
		rollback()
		if ioFailure(err) {
			// The commit record may be in the WAL, written but not
			// known to be durable: recovery at the next start decides.
			s.failed.Add(1)
			s.stopFor(err)
			s.qids = map[string]int64{}
			s.sids = map[string]*streamW{}
			err = fmt.Errorf("journal: I/O error at commit (%v): %w: it may be there after heraldd restarts; the journal takes nothing more and heraldd stops so that a restart recovers it (check the disk: dmesg)", err, appliance.ErrOutcomeUnknown)
			errs := make([]error, len(batches))
			for i := range errs {
				errs[i] = err
			}
			return errs, false
		}
		return fail(err)
	}
	s.commits.Add(1)
	s.ops.Add(uint64(nops))
	return errs, false
}

// ioFailure tells whether err is SQLite's I/O error or a corruption
// report: the disk failed a write, sync or read. After one in a
// transaction the journal stops (stopFor; a checkpoint's is retried, see
// checkpointOn): the outcome of a failed commit is unknown until a
// recovery reads the WAL again, and a disk that fails an fsync may have
// dropped the pages it could not write (Linux marks them clean), so a
// later fsync that succeeds proves nothing about them.
func ioFailure(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrIoErr || se.Code == sqlite3.ErrCorrupt)
}

// stopFor stops the journal after err: every later batch fails with
// ErrJournalStopped, and Stopped is closed. The daemon then exits, and its
// next start recovers the journal (what the WAL durably holds).
func (s *Store) stopFor(err error) {
	var se sqlite3.Error
	if errors.As(err, &se) {
		err = fmt.Errorf("%w (SQLite extended code %d)", err, int(se.ExtendedCode))
	}
	if s.stopped.CompareAndSwap(nil, &err) {
		s.log.Error("journal I/O error: the journal takes no more writes; heraldd stops so that a restart recovers the journal to its last durable commit; check the disk (dmesg)", "err", err)
	}
	s.haltedOnce.Do(func() { close(s.halted) })
}

// Stopped is closed when an I/O error stopped the journal; Failure tells
// which.
func (s *Store) Stopped() <-chan struct{} { return s.halted }

// stoppedErr is the error of whatever a stopped journal refuses
// (wrapping appliance.ErrJournalStopped), or nil while it runs.
func (s *Store) stoppedErr() error {
	if p := s.stopped.Load(); p != nil {
		return fmt.Errorf("journal: %w (%v): nothing of this was stored; heraldd stops so that a restart recovers the journal", appliance.ErrJournalStopped, *p)
	}
	return nil
}

// Failure is the I/O error that stopped the journal, or nil.
func (s *Store) Failure() error {
	if p := s.stopped.Load(); p != nil {
		return *p
	}
	return nil
}

// ErrDiskFull is returned for batches that failed because the disk is full.
var ErrDiskFull = errors.New("journal: disk full: free space in the data directory; nothing of this batch was stored")

func classify(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrFull {
		return fmt.Errorf("%w (%v)", ErrDiskFull, err)
	}
	return fmt.Errorf("journal: commit: %w", err)
}
