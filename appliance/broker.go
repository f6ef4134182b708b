package appliance

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// TopicSink receives every message published to a topic it matches, after
// the STOMP subscribers. The multicast channels are TopicSinks.
type TopicSink interface {
	Name() string
	Matches(topic string) bool
	Publish(topic string, headers stomp.Headers, body []byte) error
}

// TopicSinkBatcher is a TopicSink that can hold a message for the
// publisher's next one (a multicast channel packs both into one datagram):
// the broker lets it hold a message while the publisher's reader has another
// whole frame buffered, and calls Flush before that reader waits for anything or
// runs out of buffered frames (session.flushClients).
type TopicSinkBatcher interface {
	// PublishFrom is Publish for a message a session's reader handles: now
	// is when the reader came to its frame (a clock read spared), and with
	// more the reader holds another whole frame, so the sink may hold this
	// message for it until Flush.
	PublishFrom(now time.Time, topic string, headers stomp.Headers, body []byte, more bool) error
	Flush()
}

// TopicSinkChecker is a TopicSink that refuses some messages outright (a
// multicast channel: a message larger than one datagram). The broker asks
// every matching one before a message reaches anyone; the publisher gets an
// ERROR with Check's error instead of a silent drop.
type TopicSinkChecker interface {
	Check(topic string, headers stomp.Headers, body []byte) error
}

// checkSinks returns the first refusal of a sink matching topic.
func (b *Broker) checkSinks(topic string, headers stomp.Headers, body []byte) error {
	for _, sink := range b.sinks {
		if c, ok := sink.(TopicSinkChecker); ok && sink.Matches(topic) {
			if err := c.Check(topic, headers, body); err != nil {
				return err
			}
		}
	}
	return nil
}

// Options are what New needs besides the config.
type Options struct {
	Config  Config
	Journal Journal
	Logger  *slog.Logger
	Version string           // reported in CONNECTED's server header
	Now     func() time.Time // clock, for tests
}

// Broker is the appliance core: sessions, queues, topics.
type Broker struct {
	conf    atomic.Pointer[Config] // replaced whole by Reload (reload.go); read with cfg()
	j       Journal
	log     *slog.Logger
	version string
	now     func() time.Time
	// realClock: now is time.Now (Options.Now unset), so a session's
	// clock read at a frame's start (frameAt) may stand for it (publish).
	realClock bool
	// multiCore: more than one P at the start (topic_direct.go,
	// directHandoffMin), read once: runtime.GOMAXPROCS takes a global lock.
	multiCore bool

	reloadMu sync.Mutex // serialises Reload (reload.go)
	mu       sync.Mutex
	queues   map[string]*queue
	// deleting are the queues DeleteQueue is purging, by name: out of
	// queues, back in it if the purge fails (admin_ops.go).
	deleting  map[string]*queueDeletion
	sessions  map[uint64]*session
	perAddr   map[string]int // open sessions per client IP address
	listeners []net.Listener
	closed    bool

	temps map[string]*session // temporary queue -> owner (tempqueue.go)
	authz authState           // users, permissions, failed logins (authz.go)

	topics  *topicRegistry
	hist    topicHistory // topics.history (topic_history.go)
	sinks   []TopicSink
	streams streamRegistry // stream.go
	kv      kvStore        // key-value buckets (kv.go)

	nextSession atomic.Uint64
	diskLow     atomic.Bool
	diskChecked atomic.Int64 // unix ns of the last statfs
	stats       brokerStats

	wg   sync.WaitGroup // accept loops, sessions, disk watcher, pump
	stop chan struct{}

	// Background work of queues (page-ins): counted in wg while bgOpen.
	bgMu   sync.Mutex
	bgOpen bool
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	pumpStop chan struct{}
	pump     *pump      // submits journal work produced by completions
	intake   *intake    // the connections' journal batches, round-robin
	mem      *memBudget // memory.budget_bytes
	// fdCap is how many STOMP connections the open-file limit allows once
	// fdReserve descriptors are kept for the admin socket, the journal,
	// metrics and multicast (0: unknown, no cap).
	fdCap, fdReserve int
	queuesForgotten  atomic.Uint64 // idle empty queues forgotten
	cached           atomic.Int64  // bytes of every queue's backlog cache (queue.accountLocked)
	shedding         atomic.Bool   // shedCaches is running
	seed             atomic.Uint64 // per-queue seeds of the cores' random choices
	journalFailed    atomic.Int64  // unix ms of the last failed journal batch, 0 after a success
}

type brokerStats struct {
	connections, refused, slowDrops, staleAcks, dedupHits, deadLettered atomic.Uint64
	topicIn, topicOut, tempDropped                                      atomic.Uint64
	outputWaits                                                         atomic.Uint64 // readers held by stomp.max_output_bytes
	journalWaits                                                        atomic.Uint64 // readers held by stomp.max_journal_pending_bytes
	// topic frames written by a publisher's goroutine (topic_direct.go),
	// and those of them whose rest went to the subscriber's writer
	directWrites, directHandovers atomic.Uint64
	receiptsNow, receiptsHanded   atomic.Uint64 // sendNow: written at once, rest handed to the writer
	readDeadlines                 atomic.Uint64 // sessions' read deadlines set
}

// New returns a Broker with defaults applied; Open recovers the journal.
func New(o Options) *Broker {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	realClock := o.Now == nil
	if realClock {
		o.Now = time.Now
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	c := o.Config
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		j:         o.Journal,
		log:       o.Logger,
		version:   o.Version,
		now:       o.Now,
		realClock: realClock,
		multiCore: runtime.GOMAXPROCS(0) > 1,
		queues:    map[string]*queue{},
		deleting:  map[string]*queueDeletion{},
		sessions:  map[uint64]*session{},
		perAddr:   map[string]int{},
		topics:    newTopicRegistry(),
		stop:      make(chan struct{}),
		bgOpen:    true,
		ctx:       ctx,
		cancel:    cancel,
	}
	b.conf.Store(&c)
	b.seed.Store(uint64(o.Now().UnixNano()))
	budget := c.Memory.BudgetBytes
	if budget == 0 {
		budget = DefaultMemoryBudget()
	}
	b.mem = newMemBudget(budget)
	b.topics.mem = b.mem
	if lim := budget / 8; c.Topics.LastValueMaxBytes > lim {
		o.Logger.Warn("topics.last_value_max_bytes is more than an eighth of the memory budget; last values keep at most that", "last_value_max_bytes", c.Topics.LastValueMaxBytes, "kept", lim, "memory_budget_bytes", budget)
	}
	if n := openFileLimit(); n > 0 {
		b.fdReserve = min(reservedFDs, n/4)
		b.fdCap = n - b.fdReserve
		if c.Stomp.MaxConnections > b.fdCap {
			o.Logger.Warn("stomp.max_connections is more than the open-file limit allows; connections past it are refused so that the admin socket and the journal keep descriptors (raise LimitNOFILE)",
				"max_connections", c.Stomp.MaxConnections, "LimitNOFILE", n, "connections_allowed", b.fdCap)
		}
	}
	b.authz.init(c)
	b.pump = newPump()
	b.intake = newIntake(o.Journal, intakeInflight)
	b.pumpStop = make(chan struct{})
	return b
}

// reservedFDs is how many file descriptors are kept from STOMP connections
// for the admin socket (and its clients), the journal's files, the metrics
// listener and multicast sockets: at most a quarter of the limit.
const reservedFDs = 256

var errBrokerClosed = errors.New("appliance: broker closed")

// goBackground runs fn on a goroutine the broker waits for at Close; false
// when the broker is closing (fn does not run).
func (b *Broker) goBackground(fn func()) bool {
	b.bgMu.Lock()
	defer b.bgMu.Unlock()
	if !b.bgOpen {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
	return true
}

// journalResult records the outcome of a journal batch for JournalHealthy.
func (b *Broker) journalResult(err error) {
	if err == nil {
		if b.journalFailed.Load() != 0 {
			b.journalFailed.Store(0)
		}
		return
	}
	if errors.Is(err, errTxAborted) {
		return
	}
	b.journalFailed.Store(b.now().UnixMilli())
}

// JournalHealthy reports whether the last journal batch committed; when it
// did not, it says since when writes fail.
func (b *Broker) JournalHealthy() (bool, time.Time) {
	if ms := b.journalFailed.Load(); ms != 0 {
		return false, time.UnixMilli(ms)
	}
	return true, time.Time{}
}

// PageInFailBound is how long a queue's page-ins may fail without a break
// before the broker reports itself not ready (PageInsHealthy): the queue's
// consumers get nothing past what is in memory meanwhile.
const PageInFailBound = 30 * time.Second

// PageInsHealthy returns nil unless a queue's page-ins have been failing
// continuously for PageInFailBound or longer (its journal reads fail);
// then an error naming the queue that has failed longest, since when, and
// the journal's last error. It is nil again once that queue's next
// page-in succeeds.
func (b *Broker) PageInsHealthy() error {
	b.mu.Lock()
	qs := make([]*queue, 0, len(b.queues))
	for _, q := range b.queues {
		qs = append(qs, q)
	}
	b.mu.Unlock()
	now := b.now().UnixMilli()
	var worst *queue
	var worstSince int64
	var worstErr string
	for _, q := range qs {
		q.mu.Lock()
		since, err, failing := q.core.PageInFailing()
		failing = failing && !q.closed && !q.deleted // a stopped queue's page-ins fail with errBrokerClosed
		q.mu.Unlock()
		if failing && time.Duration(now-since)*time.Millisecond >= PageInFailBound &&
			(worst == nil || since < worstSince || since == worstSince && q.name < worst.name) {
			worst, worstSince, worstErr = q, since, err
		}
	}
	if worst == nil {
		return nil
	}
	return fmt.Errorf("queue %q: page-ins failing since %s (journal read: %s): its consumers get nothing past the messages in memory; check the data directory's disk (dmesg) and the log (journalctl -u herald)",
		worst.name, time.UnixMilli(worstSince).UTC().Format(time.RFC3339), worstErr)
}

// AddTopicSink registers s for every topic it matches. Call before Listen.
func (b *Broker) AddTopicSink(s TopicSink) { b.sinks = append(b.sinks, s) }

// Open recovers every queue from the journal: counts, and the first window
// of each queue in memory (the rest is paged in as the queue drains).
func (b *Broker) Open(ctx context.Context) error {
	states, err := b.j.Queues(ctx)
	if err != nil {
		return fmt.Errorf("recover queues: %w", err)
	}
	for _, st := range states {
		q := b.queue(st.Name)
		q.run(func(now int64) { q.core.Recover(st.Count, st.Bytes, st.MaxID, st.Mark, now) })
		b.log.Info("queue recovered", "queue", st.Name, "messages", st.Count, "bytes", st.Bytes)
	}
	if err := b.openStreams(ctx); err != nil {
		return err
	}
	if err := b.openKV(ctx); err != nil {
		return err
	}
	b.wg.Add(3)
	go b.watchDisk()
	go b.forgetTopics()
	go func() { defer b.wg.Done(); b.pump.run(b.pumpStop) }()
	b.wg.Add(1)
	go func() { defer b.wg.Done(); b.intake.run(b.pumpStop) }()
	// Temporary queues, and their dead letters, of the connections of an
	// earlier run (a crash, or a reply committed as its owner left): those
	// connections are gone, and a connection of this run whose session id
	// and name match must not read them.
	for _, st := range states {
		if !strings.HasPrefix(strings.TrimPrefix(st.Name, b.cfg().Queues.DeadLetterQueue), tempPrefix) {
			continue
		}
		n, err := b.DeleteQueue(ctx, st.Name)
		if err != nil {
			return fmt.Errorf("delete temporary queue %s of an earlier run: %w", st.Name, err)
		}
		b.log.Info("temporary queue of an earlier run deleted", "queue", st.Name, "messages", n)
	}
	return nil
}

// Listen starts accepting STOMP connections on addr and returns the bound
// address (addr may use port 0).
func (b *Broker) Listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stomp listen %s: %w", addr, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		ln.Close()
		return nil, ErrClosed
	}
	b.listeners = append(b.listeners, ln)
	b.mu.Unlock()
	b.wg.Add(1)
	go b.serve(ln)
	return ln.Addr(), nil
}

func (b *Broker) serve(ln net.Listener) {
	defer b.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off instead of spinning.
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else if delay < time.Second {
				delay *= 2
			}
			b.log.Warn("accept failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-b.stop:
				return
			}
			continue
		}
		delay = 0
		b.accept(c)
	}
}

func (b *Broker) accept(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	addr := peerAddress(c)
	b.mu.Lock()
	perAddr := b.perAddr[addr] >= b.cfg().Stomp.MaxConnectionsPerAddress
	fdFull := b.fdCap > 0 && len(b.sessions) >= b.fdCap
	if b.closed || len(b.sessions) >= b.cfg().Stomp.MaxConnections || perAddr || fdFull {
		closed := b.closed
		b.mu.Unlock()
		b.stats.refused.Add(1)
		reason := fmt.Sprintf("too many connections (stomp.max_connections %d)", b.cfg().Stomp.MaxConnections)
		switch {
		case closed:
			reason = "server shutting down"
		case fdFull:
			reason = fmt.Sprintf("too many connections (the open-file limit, LimitNOFILE %d, keeps %d descriptors for the admin socket and the journal)", b.fdCap+b.fdReserve, b.fdReserve)
		case perAddr:
			reason = fmt.Sprintf("too many connections from %s (stomp.max_connections_per_address %d)", addr, b.cfg().Stomp.MaxConnectionsPerAddress)
		}
		b.log.Warn("connection refused", "peer", c.RemoteAddr().String(), "reason", reason)
		refuse := func() {
			// A deadline for reads too: on the TLS listener this write
			// runs the handshake, which waits for the client.
			c.SetDeadline(time.Now().Add(time.Second))
			c.Write(stomp.Encode(stomp.NewFrame(stomp.CmdError, "message", reason), stomp.V10))
			c.Close()
		}
		if _, isTLS := c.(*tls.Conn); isTLS {
			// Not on the accept loop: a client that never answers the
			// handshake would hold it for the deadline.
			b.wg.Add(1)
			go func() { defer b.wg.Done(); refuse() }()
			return
		}
		refuse()
		return
	}
	s := newSession(b, c)
	b.sessions[s.id] = s
	b.perAddr[addr]++
	b.mu.Unlock()
	b.stats.connections.Add(1)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		s.run()
		b.mu.Lock()
		delete(b.sessions, s.id)
		if b.perAddr[addr]--; b.perAddr[addr] <= 0 {
			delete(b.perAddr, addr)
		}
		b.mu.Unlock()
	}()
}

// peerAddress is the client's IP address (without the port).
func peerAddress(c net.Conn) string {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	return c.RemoteAddr().String()
}

// Close stops accepting, ends every session (their unacked messages return
// to their queues), and waits for every goroutine the broker started. The
// journal is the caller's to close afterwards. Idempotent.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for _, ln := range b.listeners {
		ln.Close()
	}
	sessions := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	queues := make([]*queue, 0, len(b.queues))
	for _, q := range b.queues {
		queues = append(queues, q)
	}
	b.mu.Unlock()
	close(b.stop)
	for _, s := range sessions {
		s.shutdown("server shutting down")
	}
	// Sessions end first (their unacked messages return to the queues,
	// which may still page in), then queues stop, then the rest.
	sessionsDone := make(chan struct{})
	go func() {
		for _, s := range sessions {
			<-s.done
		}
		close(sessionsDone)
	}()
	select {
	case <-sessionsDone:
	case <-ctx.Done():
	}
	b.bgMu.Lock()
	b.bgOpen = false
	b.bgMu.Unlock()
	for _, q := range queues {
		q.stop()
	}
	close(b.pumpStop)
	b.cancel()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("broker close: %w", ctx.Err())
	}
	return nil
}

// shedCaches has every queue with a backlog cache account again, which
// gives back what the memory budget no longer leaves it (accountLocked):
// a queue that takes no input would otherwise keep its cache while
// others' windows are capped. One goroutine at a time, in the background:
// it walks the queues again every 50 ms while the queues' half of the
// budget is short and caches remain.
func (b *Broker) shedCaches() {
	if !b.shedding.CompareAndSwap(false, true) {
		return
	}
	if !b.goBackground(func() {
		defer b.shedding.Store(false)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-b.ctx.Done():
				return
			case <-t.C:
			}
			b.mu.Lock()
			qs := make([]*queue, 0, len(b.queues))
			for _, q := range b.queues {
				qs = append(qs, q)
			}
			b.mu.Unlock()
			for _, q := range qs {
				q.mu.Lock()
				has := q.cacheCharged > 0
				q.mu.Unlock()
				if has {
					q.run(func(int64) {})
				}
			}
			if b.mem.queueFree() >= b.mem.half/2 || b.cached.Load() == 0 {
				return
			}
			t.Reset(50 * time.Millisecond)
		}
	}) {
		b.shedding.Store(false)
	}
}

// queue returns the queue named name, creating it in memory.
//
// While DeleteQueue purges the name's queue, it returns that queue: what
// reaches it meanwhile (a dead letter, a requeue, a SEND that resolved the
// queue before the delete and commits after) is purged with it, or stays
// with it if the purge fails. The broker's own paths call this, some from
// a journal completion, so it never waits for the delete; clients' paths
// use openQueue, which does.
func (b *Broker) queue(name string) *queue {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[name]
	if q == nil {
		if d := b.deleting[name]; d != nil {
			return d.q
		}
		q = newQueue(b, name)
		b.queues[name] = q
	}
	return q
}

// queueAfterDelete is queue for a client that held the name's queue when
// DeleteQueue took it: it waits for the delete's outcome as openQueue does,
// and then makes the name's queue whatever queues.max_queues says (the
// client had a queue of that name already).
func (b *Broker) queueAfterDelete(name string) *queue {
	b.mu.Lock()
	for b.queues[name] == nil && b.deleting[name] != nil {
		d := b.deleting[name]
		b.mu.Unlock()
		<-d.done
		b.mu.Lock()
	}
	b.mu.Unlock()
	return b.queue(name)
}

// ErrTooManyQueues refuses a client's new queue beyond queues.max_queues.
var ErrTooManyQueues = errors.New("appliance: too many queues")

// openQueue is queue for clients: it creates a queue only below
// queues.max_queues, so a client cannot exhaust memory with names.
//
// While DeleteQueue purges the name's queue, it waits for the outcome: the
// name's new queue once the delete succeeded, the same queue if it failed
// (its messages are still in the journal, and must stay deliverable).
func (b *Broker) openQueue(name string) (*queue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if q := b.queues[name]; q != nil {
			return q, nil
		}
		d := b.deleting[name]
		if d == nil {
			break
		}
		b.mu.Unlock()
		<-d.done
		b.mu.Lock()
	}
	if len(b.queues) >= b.cfg().Queues.MaxQueues {
		return nil, fmt.Errorf("%w: %d queues exist (queues.max_queues); delete unused ones with: herald queue delete NAME", ErrTooManyQueues, len(b.queues))
	}
	q := newQueue(b, name)
	b.queues[name] = q
	return q, nil
}

// forgetIdleQueues forgets the queues that hold nothing (no message, no
// consumer, no work in progress) and took no input since cutoff (ms), as
// idle topics are forgotten: an empty queue costs nothing to make again,
// so a client cannot hold queues.max_queues slots with empty names. Temporary
// queues end with their connection instead. It returns how many it forgot.
func (b *Broker) forgetIdleQueues(cutoff int64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for name, q := range b.queues {
		if strings.HasPrefix(name, tempPrefix) {
			continue
		}
		q.mu.Lock()
		idle := q.lastStep < cutoff && q.core.Idle() && len(q.outbox) == 0 && !q.flushing && q.timerAt == 0
		if idle {
			q.deleted = true // a SEND or SUBSCRIBE holding it finds the name's new queue
			delete(b.queues, name)
			n++
		}
		q.mu.Unlock()
		if idle {
			q.stop()
		}
	}
	b.queuesForgotten.Add(uint64(n))
	return n
}

func (b *Broker) lookupQueue(name string) *queue {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queues[name]
}

// watchDisk keeps diskLow current for the data directory, so that space
// coming back is noticed even when no SEND arrives.
func (b *Broker) watchDisk() {
	defer b.wg.Done()
	if b.cfg().Journal.MinFreeBytes <= 0 {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		b.checkDisk(true)
		select {
		case <-t.C:
		case <-b.stop:
			return
		}
	}
}

// diskFloor is the free space below which SENDs are refused:
// journal.min_free_bytes plus room for a checkpoint (which can need about
// the WAL's size again, journal.wal_limit_bytes), so that acks, claims and
// checkpoints keep working when producers are refused.
func (b *Broker) diskFloor() int64 {
	return b.cfg().Journal.MinFreeBytes + b.cfg().Journal.WALLimitBytes
}

// journalSpace is a journal that says what of its files new data reuses
// before they grow (journal.Store.Reusable).
type journalSpace interface {
	Reusable(ctx context.Context) (free, wal int64, err error)
}

// diskCheckEvery bounds how often SENDs re-read the free space.
const diskCheckEvery = 20 * time.Millisecond

// checkDisk refreshes diskLow from statfs (at most every diskCheckEvery
// unless force) and returns it.
func (b *Broker) checkDisk(force bool) bool {
	if b.cfg().Journal.MinFreeBytes <= 0 {
		return false
	}
	now := time.Now().UnixNano()
	if last := b.diskChecked.Load(); !force && now-last < int64(diskCheckEvery) {
		return b.diskLow.Load()
	}
	b.diskChecked.Store(now)
	var st syscall.Statfs_t
	if err := syscall.Statfs(b.cfg().DataDir, &st); err != nil {
		return b.diskLow.Load()
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	low := free < b.diskFloor()
	var reusable int64
	if js, ok := b.j.(journalSpace); ok && low {
		// Below the floor on the filesystem, but the journal's file may
		// hold the pages of deleted messages (drained, purged), which new
		// ones fill before the file grows (an idle journal gives them
		// back, but a busy one keeps them): they count as free space, as
		// long as the WAL, which new messages still
		// take from the filesystem, growing to its bound from its size
		// now would leave min_free_bytes free.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, wal, err := js.Reusable(ctx)
		cancel()
		if err == nil {
			walRoom := max(0, b.cfg().Journal.WALLimitBytes-wal)
			low = free+r < b.diskFloor() || free-walRoom < b.cfg().Journal.MinFreeBytes
			reusable = r
		}
	}
	if low != b.diskLow.Swap(low) {
		if low {
			b.log.Error("free disk space below the floor: refusing queue SENDs until space returns", "dir", b.cfg().DataDir, "free_bytes", free, "journal_reusable_bytes", reusable, "floor_bytes", b.diskFloor())
		} else {
			b.log.Info("free disk space back above the floor: accepting queue SENDs", "dir", b.cfg().DataDir, "free_bytes", free, "journal_reusable_bytes", reusable)
		}
	}
	return low
}
