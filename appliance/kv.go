package appliance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/kvcore"
	"github.com/herald-mq/herald/appliance/lockcore"
	"github.com/herald-mq/herald/appliance/stomp"
)

// The key-value store: /kv/BUCKET.KEY, the shell around appliance/kvcore.
//
// Writers of the store (a group of SENDs, a transaction, an expiry) take
// kvStore.commitMu one at a time, across their journal commit; the core
// itself is under kvStore.mu, held only while it is read or changed. A
// SEND queues itself (kv.pending); one writer at a time leads and, under
// commitMu, flushes every queued SEND as one group: PrepareEach (each sees the
// earlier ones), one journal batch, then Apply and deliver each, in order.
// So concurrent writers share a commit (an fsync with journal.sync =
// "full"), revisions are given in commit order, a write whose batch fails
// leaves no trace, and a watch taken meanwhile (under mu) sees the state
// before the group: its marker is below the group's revisions, which are
// all delivered to it after. RECEIPTs come after Apply, so a read that
// starts after a RECEIPT sees the write.
//
// SEND /kv/BUCKET.KEY:
//   - sets the key to the body, with the content-type header (kept);
//   - kv-operation:DEL deletes it (NATS KV's KV-Operation values; PUT is
//     the default);
//   - if-revision:N makes it a compare-and-set: applied only if the key is
//     at revision N (0: the key must not exist);
//   - the RECEIPT, once the change is durable, carries revision:N, the
//     bucket revision of the change;
//   - a compare-and-set that fails stores nothing: its RECEIPT carries
//     kv-conflict:CURRENT (the key's revision, 0 if it does not exist) and
//     no revision header, and the connection goes on; without a receipt
//     header a conflict is an ERROR (it would be silent otherwise);
//   - a delete of a key that does not exist changes nothing: RECEIPT
//     kv-noop:true, no revision;
//   - limits (kv.max_value_bytes, max_keys, max_bytes, max_total_bytes,
//     max_buckets, per [[kv.bucket]]) are ERRORs naming the key to raise;
//   - kv-ttl:SECONDS (or 1500ms, 30s, 5m, 1h), or the bucket's ttl, makes
//     a put expire (kv_ttl.go); if-fence:LOCK:TOKEN refuses the write
//     unless TOKEN is lock LOCK's current holder's (lock.go);
//   - in BEGIN..COMMIT, a set of them is one journal batch (kv_txn.go).
//
// SUBSCRIBE /kv/BUCKET.PATTERN (ack auto): the current value of every
// matching key (kv-snapshot:true, in key order), then a MESSAGE with
// kv-snapshot-complete:REV (the bucket revision of the snapshot, no body),
// then every change with revision > REV, deletes with kv-operation:DEL.
// kv-get:true: the snapshot and the marker only, no changes; the
// subscription stays until UNSUBSCRIBE, as any other. kv-history:true on
// one key: its kept revisions (kv.history), oldest first, each marked
// kv-history:true, then a MESSAGE kv-history-complete:COUNT.

type kvStore struct {
	mu      sync.Mutex
	core    *kvcore.Core // nil: the journal stores no key-value data
	j       KVJournal
	watches map[uint64]*subscription
	ids     map[*subscription]uint64

	puts, deletes, conflicts, watchDrops atomic.Uint64
	expired, txns                        atomic.Uint64
	// wake tells the expiry loop (kv_ttl.go) that a key got a TTL.
	wake chan struct{}

	locks lockStore // advisory locks (lock.go)

	// commitMu serialises the writers of the store (a group of SENDs, a
	// transaction, an expiry), each across its journal commit; lock order:
	// commitMu, then locks.mu, then mu.
	commitMu sync.Mutex
	pending  []*kvWrite // SENDs waiting for the next group (under mu)
	leading  bool       // a writer leads: it will commit pending (under mu)
	groups   atomic.Uint64

	mirrorQ kvMirror // changes on their way to multicast channels (kv_mcast.go)
}

// openKV loads the buckets and the lock tokens from the journal, expires
// the keys whose time passed while the daemon was down, and starts the
// expiry timer (Broker.Open).
func (b *Broker) openKV(ctx context.Context) error {
	if err := b.loadKV(ctx); err != nil {
		return err
	}
	if err := b.openLocks(ctx); err != nil {
		return err
	}
	kv := &b.kv
	kv.wake = make(chan struct{}, 1)
	if kv.core == nil {
		return nil
	}
	if err := b.kvExpire(); err != nil {
		return fmt.Errorf("expire key-value keys past their TTL: %w", err)
	}
	b.wg.Add(1)
	go b.kvExpiryLoop()
	return nil
}

func (b *Broker) loadKV(ctx context.Context) error {
	kv := &b.kv
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.watches, kv.ids = map[uint64]*subscription{}, map[*subscription]uint64{}
	j, ok := b.j.(KVJournal)
	if !ok {
		return nil
	}
	c := kvcore.New()
	keys := 0
	if err := j.KVLoad(ctx, func(e KVEntry) error {
		if e.Op != 0 {
			keys++
		}
		c.Recover(e)
		return nil
	}); err != nil {
		return fmt.Errorf("recover key-value buckets: %w", err)
	}
	kv.core, kv.j = c, j
	if keys > 0 {
		b.log.Info("key-value buckets recovered", "buckets", len(c.Buckets()), "keys", keys, "bytes", c.Bytes())
	}
	return nil
}

var errKVUnavailable = "This heraldd's journal has no key-value store."

// isKVSend reports whether f is a SEND to /kv/.
func isKVSend(f *stomp.Frame) bool {
	return f.Command == stomp.CmdSend && strings.HasPrefix(f.Get("destination"), prefixKV)
}

// kvRequest parses a SEND to /kv/NAME into a request: kv-operation,
// if-revision, kv-ttl (with the bucket's ttl, it sets Expires from the
// broker's clock) and if-fence. A bad header is an ERROR; false then.
func (s *session) kvRequest(f *stomp.Frame, name string) (kvcore.Request, *fence, bool) {
	bucket, key, _ := strings.Cut(name, ".")
	req := kvcore.Request{Bucket: bucket, Key: key, Op: kvcore.Put, IfRevision: kvcore.NoRevision, ContentType: f.Get("content-type"), Value: f.Body}
	switch op := f.Get("kv-operation"); strings.ToUpper(op) {
	case "", "PUT":
	case "DEL":
		req.Op, req.Value, req.ContentType = kvcore.Delete, nil, ""
	default:
		s.fail(f, "invalid kv-operation", fmt.Sprintf("kv-operation must be PUT (the default) or DEL; got %q. Nothing was stored.", op))
		return req, nil, false
	}
	if v, ok := f.Headers.Lookup("if-revision"); ok {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			s.fail(f, "invalid if-revision", fmt.Sprintf("if-revision must be a revision number (0: the key must not exist); got %q. Nothing was stored.", v))
			return req, nil, false
		}
		req.IfRevision = int64(n)
	}
	ttl := s.b.cfg().KV.ttl(bucket)
	if v, ok := f.Headers.Lookup("kv-ttl"); ok {
		if req.Op != kvcore.Put {
			s.fail(f, "invalid kv-ttl", "kv-ttl is for puts: a delete has no value to expire. Nothing was stored.")
			return req, nil, false
		}
		ms, err := kvcore.ParseTTL(v)
		if err != nil {
			s.fail(f, "invalid kv-ttl", err.Error()+" Nothing was stored.")
			return req, nil, false
		}
		ttl = ms
	}
	if req.Op == kvcore.Put && ttl > 0 {
		req.Expires = s.b.now().UnixMilli() + ttl
	}
	var fc *fence
	if v, ok := f.Headers.Lookup("if-fence"); ok {
		n, t, err := lockcore.ParseFence(v)
		if err != nil {
			s.fail(f, "invalid if-fence", err.Error()+" Nothing was stored.")
			return req, nil, false
		}
		fc = &fence{name: n, token: t}
	}
	return req, fc, true
}

func (s *session) onKVSend(f *stomp.Frame, name string) bool {
	dest := prefixKV + name
	req, fc, ok := s.kvRequest(f, name)
	if !ok {
		return false
	}
	if req.Op == kvcore.Put && s.b.checkDisk(false) {
		s.drainJournal()
		s.fail(f, "disk full", fmt.Sprintf("Free space in the data directory %s, counting the pages herald.db can reuse, is below %d bytes (journal.min_free_bytes plus journal.wal_limit_bytes); %s was not stored. Deletes still work.", s.b.cfg().DataDir, s.b.diskFloor(), dest))
		return false
	}
	req.NoCreate = !s.kvMayCreate(name)
	// The RECEIPT promises that this connection's earlier frames are
	// durable too: the group's batch does not go through its intake.
	s.drainJournal()
	kv := &s.b.kv
	w := &kvWrite{req: req, fence: fc, done: make(chan kvResult, 1)}
	kv.mu.Lock()
	if kv.core == nil {
		kv.mu.Unlock()
		s.fail(f, "key-value store unavailable", errKVUnavailable)
		return false
	}
	kv.mu.Unlock()
	res := kv.write(s.b, w)
	e, err := res.e, res.err
	lim, where := s.b.cfg().KV.limits(req.Bucket)
	var ce *kvcore.ConflictError
	switch {
	case res.fenced:
		s.drainJournal()
		s.fail(f, "fenced", fmt.Sprintf("%v (if-fence); nothing was written to %s. The holder of an older token must stop and take the lock again.", err, dest))
		return false
	case errors.As(err, &ce):
		if f.Get("receipt") == "" {
			s.drainJournal()
			s.fail(f, "revision conflict", fmt.Sprintf("%s is at revision %d, not %d (if-revision); nothing was stored. Send with a receipt header to get conflicts as a RECEIPT with kv-conflict:CURRENT instead of an ERROR.", dest, ce.Current, ce.Expected))
			return false
		}
		s.receipt(f, stomp.Header{Key: "kv-conflict", Value: strconv.FormatUint(ce.Current, 10)})
		return true
	case errors.Is(err, kvcore.ErrNoKey):
		s.receipt(f, stomp.Header{Key: "kv-noop", Value: "true"})
		return true
	case errors.Is(err, kvcore.ErrCreateDenied):
		return s.deny(f, *s.ident.Load(), dest, auth.Create)
	case res.journal:
		s.fail(f, notStored("value", err), fmt.Sprintf("%s: %v", dest, err))
		return false
	case err != nil:
		s.drainJournal()
		s.fail(f, "value not stored", kvLimitDetail(err, dest, len(req.Value), lim, where))
		return false
	}
	if r := f.Get("receipt"); r != "" {
		s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", r, "revision", strconv.FormatUint(e.Revision, 10)))
	}
	return true
}

// write queues w for the next group and returns its outcome. One writer
// at a time leads: it commits every write queued (its own included) as one
// group, then hands the lead to the first write queued meanwhile, if any,
// and returns. The others wait on their done channel only, for their
// outcome or the lead; so a write whose group has committed returns at
// once, never held behind the next group (waiting for commitMu there
// serialised the writers: each took the lock in turn and committed the one
// write queued since, alone).
func (kv *kvStore) write(b *Broker, w *kvWrite) kvResult {
	kv.mu.Lock()
	kv.pending = append(kv.pending, w)
	lead := !kv.leading
	kv.leading = true
	kv.mu.Unlock()
	if !lead {
		if r := <-w.done; !r.lead {
			return r
		}
	}
	kv.commitMu.Lock()
	kv.flush(b) // w's, and those queued meanwhile
	kv.commitMu.Unlock()
	kv.mu.Lock()
	if len(kv.pending) > 0 {
		// Not yet in a group, so its done channel is empty.
		kv.pending[0].done <- kvResult{lead: true}
	} else {
		kv.leading = false
	}
	kv.mu.Unlock()
	return <-w.done
}

// kvWrite is one SEND to /kv/ waiting for its group's commit.
type kvWrite struct {
	req   kvcore.Request
	fence *fence
	done  chan kvResult
}

// kvResult is a write's outcome: its committed entry, or why not (fenced:
// the if-fence check refused it; journal: the group's batch failed).
type kvResult struct {
	e       kvcore.Entry
	err     error
	fenced  bool
	journal bool
	lead    bool // not an outcome: this write now leads (kvStore.write)
}

// flush commits the writes queued in kv.pending as one group: every write
// is checked (if-fence, then PrepareEach: each sees the earlier ones of
// the group), the good ones are journaled in one batch, and once it is
// durable they are applied and delivered in order. The caller holds
// kv.commitMu (one group, transaction or expiry at a time); kv.mu is
// released while the batch commits, so watches and reads go on, and see
// the state before the group until it is applied (its RECEIPTs come after).
func (kv *kvStore) flush(b *Broker) {
	kv.mu.Lock()
	ws := kv.pending
	kv.pending = nil
	kv.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	results := make([]kvResult, len(ws))
	defer func() {
		for i, w := range ws {
			w.done <- results[i]
		}
	}()
	fenced := false
	for _, w := range ws {
		fenced = fenced || w.fence != nil
	}
	if fenced {
		// Held until the group is applied: no new holder between the
		// check and the commit.
		kv.locks.mu.Lock()
		defer kv.locks.mu.Unlock()
	}
	var reqs []kvcore.Request
	var idx []int
	for i, w := range ws {
		if w.fence != nil {
			if kv.locks.core == nil {
				results[i] = kvResult{err: errors.New(errLocksUnavailable), fenced: true}
				continue
			}
			if err := kv.locks.core.Fence(w.fence.name, w.fence.token); err != nil {
				kv.locks.fenced.Add(1)
				results[i] = kvResult{err: err, fenced: true}
				continue
			}
		}
		reqs = append(reqs, w.req)
		idx = append(idx, i)
	}
	cfg := b.cfg().KV
	now := b.now().UnixMilli()
	for i := range reqs {
		reqs[i].Now = now
	}
	kv.mu.Lock()
	es, errs := kv.core.PrepareEach(reqs, func(bucket string) kvcore.Limits { l, _ := cfg.limits(bucket); return l })
	kv.mu.Unlock()
	var ops []Op
	var good []int
	for j, err := range errs {
		i := idx[j]
		var ce *kvcore.ConflictError
		if errors.As(err, &ce) {
			kv.conflicts.Add(1)
		}
		if err != nil {
			results[i] = kvResult{err: err}
			continue
		}
		es[j].History, es[j].HistoryBytes = cfg.history(es[j].Bucket)
		ops = append(ops, Op{Kind: OpKV, KV: &es[j]})
		good = append(good, j)
	}
	if len(ops) == 0 {
		return
	}
	done := make(chan error, 1)
	b.j.Submit(&Batch{Ops: ops, Done: func(_ *Batch, err error) { done <- err }})
	err := <-done
	b.journalResult(err)
	if err != nil {
		for _, j := range good {
			results[idx[j]] = kvResult{err: err, journal: true}
		}
		return
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	ttl := false
	for _, j := range good {
		e := es[j]
		kv.count(e)
		kv.deliver(kv.core.Apply(e))
		kv.mirror(b, es[j:j+1], false)
		ttl = ttl || e.Expires != 0
		results[idx[j]] = kvResult{e: e}
	}
	kv.groups.Add(1)
	if ttl {
		kv.wakeExpiry()
	}
}

// count adds a committed change to the counters.
func (kv *kvStore) count(e kvcore.Entry) {
	switch {
	case e.Expired:
		kv.expired.Add(1)
	case e.Op == kvcore.Delete:
		kv.deletes.Add(1)
	default:
		kv.puts.Add(1)
	}
}

// deliver queues committed changes to their watchers' connections (under
// kv.mu).
func (kv *kvStore) deliver(ds []kvcore.Delivery) {
	for _, d := range ds {
		if sub := kv.watches[d.Watch]; sub != nil {
			f := kvFrame(sub, d.Entry, false)
			if d.Txn != 0 {
				f.Headers.Add("kv-transaction", strconv.FormatUint(d.Txn, 10))
				if d.Last {
					f.Headers.Add("kv-transaction-last", "true")
				}
			}
			sub.s.deliverKV(f)
		}
	}
}

func kvLimitDetail(err error, dest string, size int, lim kvcore.Limits, where string) string {
	switch {
	case errors.Is(err, kvcore.ErrValueTooLarge):
		return fmt.Sprintf("The value for %s is %d bytes; at most %d are allowed (%s max_value_bytes). Nothing was stored.", dest, size, lim.MaxValueBytes, where)
	case errors.Is(err, kvcore.ErrTooManyKeys):
		return fmt.Sprintf("The bucket of %s holds %d keys already (%s max_keys). Nothing was stored; delete keys or raise the limit.", dest, lim.MaxKeys, where)
	case errors.Is(err, kvcore.ErrBucketFull):
		return fmt.Sprintf("The bucket of %s would hold more than %d bytes (%s max_bytes). Nothing was stored; delete keys or raise the limit.", dest, lim.MaxBytes, where)
	case errors.Is(err, kvcore.ErrStoreFull):
		return fmt.Sprintf("All buckets together would hold more than %d bytes (kv.max_total_bytes). Nothing was stored; delete keys or raise the limit.", lim.MaxTotalBytes)
	case errors.Is(err, kvcore.ErrTooManyBucket):
		return fmt.Sprintf("%s would make a new bucket, but there are %d already (kv.max_buckets). Nothing was stored.", dest, lim.MaxBuckets)
	}
	return fmt.Sprintf("%s: %v. Nothing was stored.", dest, err)
}

func kvFrame(sub *subscription, e kvcore.Entry, snapshot bool) *stomp.Frame {
	rev := strconv.FormatUint(e.Revision, 10)
	f := stomp.NewFrame(stomp.CmdMessage,
		"subscription", sub.id,
		"message-id", "kv."+e.Bucket+"."+rev,
		"destination", prefixKV+e.Bucket+"."+e.Key,
		"revision", rev,
		"kv-operation", e.Op.String())
	if e.ContentType != "" {
		f.Headers.Add("content-type", e.ContentType)
	}
	if e.Expires != 0 {
		f.Headers.Add("kv-expires", strconv.FormatInt(e.Expires, 10))
	}
	if e.Expired {
		f.Headers.Add("kv-expired", "true")
	}
	if snapshot {
		f.Headers.Add("kv-snapshot", "true")
	}
	f.Body = e.Value
	return f
}

// deliverKV queues a change for a watcher; a connection with more than
// kv.watch_buffer_bytes waiting is ended instead (never a silent gap).
func (s *session) deliverKV(f *stomp.Frame) {
	limit := s.b.cfg().KV.WatchBufferBytes
	s.outMu.Lock()
	over, ending := s.outBytes > limit, s.ending
	s.outMu.Unlock()
	if ending {
		// Dropped already (its watches go at cleanup, after the writer
		// stops): one drop counted and logged per watcher, not per change.
		return
	}
	if over {
		s.b.kv.watchDrops.Add(1)
		s.log.Warn("slow key-value watcher dropped", "waiting_bytes_over", limit)
		s.drop("slow consumer", fmt.Sprintf("More than %d bytes were waiting to be written to this connection when a key-value change came (kv.watch_buffer_bytes); it is closed so that no change is skipped. Watch again: the snapshot brings the current values.", limit))
		return
	}
	s.push(outItem{f: f})
}

func (s *session) onKVSubscribe(f *stomp.Frame, sub *subscription) bool {
	if sub.ack != ackAuto {
		s.fail(f, "invalid ack mode", "Key-value watches (/kv/) are ack auto: every change has its revision; a client that loses its place subscribes again.")
		return false
	}
	get := f.Get("kv-get") == "true"
	bucket, pattern, _ := strings.Cut(sub.name, ".")
	if f.Get("kv-history") == "true" {
		return s.onKVHistory(f, sub, bucket, pattern)
	}
	kv := &s.b.kv
	kv.mu.Lock()
	if kv.core == nil {
		kv.mu.Unlock()
		s.fail(f, "key-value store unavailable", errKVUnavailable)
		return false
	}
	var snap []kvcore.Entry
	var rev uint64
	if get {
		snap, rev = kv.core.Snapshot(bucket, pattern)
	} else {
		var id uint64
		id, snap, rev = kv.core.Watch(bucket, pattern)
		kv.watches[id], kv.ids[sub] = sub, id
	}
	// A key past its expiry whose delete is not journaled yet is not
	// shown (a watcher then gets that delete for a key it did not see).
	now := s.b.now().UnixMilli()
	snap = slices.DeleteFunc(snap, func(e kvcore.Entry) bool { return !e.Alive(now) })
	s.subsMu.Lock()
	s.subs[sub.id] = sub
	s.subsMu.Unlock()
	s.nsubs.Add(1)
	// Under the lock: no change is queued to this connection before the
	// marker, and every change after the snapshot is.
	for _, e := range snap {
		s.push(outItem{f: kvFrame(sub, e, true)})
	}
	r := strconv.FormatUint(rev, 10)
	s.push(outItem{f: stomp.NewFrame(stomp.CmdMessage,
		"subscription", sub.id,
		"message-id", "kv."+bucket+".snapshot."+r,
		"destination", sub.dest,
		"kv-snapshot-complete", r)})
	kv.mu.Unlock()
	s.receipt(f)
	return true
}

// onKVHistory answers SUBSCRIBE kv-history:true: the kept revisions of one
// key from the journal, oldest first, then kv-history-complete:COUNT.
func (s *session) onKVHistory(f *stomp.Frame, sub *subscription, bucket, key string) bool {
	if hasWildcard(key) {
		s.fail(f, "invalid destination", fmt.Sprintf("kv-history reads one key: %s has a wildcard.", sub.dest))
		return false
	}
	kv := &s.b.kv
	kv.mu.Lock()
	j := kv.j
	expired := false
	if kv.core != nil {
		e, ok := kv.core.Get(bucket, key)
		expired = ok && !e.Alive(s.b.now().UnixMilli())
	}
	kv.mu.Unlock()
	if j == nil {
		s.fail(f, "key-value store unavailable", errKVUnavailable)
		return false
	}
	var frames []*stomp.Frame
	err := j.KVHistory(s.b.ctx, bucket, key, func(e KVEntry) error {
		if expired {
			return nil // its delete, not yet journaled, drops it all
		}
		m := kvFrame(sub, e, false)
		m.Headers.Add("kv-history", "true")
		frames = append(frames, m)
		return nil
	})
	if err != nil {
		s.fail(f, "history not read", err.Error())
		return false
	}
	s.subsMu.Lock()
	s.subs[sub.id] = sub
	s.subsMu.Unlock()
	s.nsubs.Add(1)
	for _, m := range frames {
		s.push(outItem{f: m})
	}
	n := strconv.Itoa(len(frames))
	s.push(outItem{f: stomp.NewFrame(stomp.CmdMessage,
		"subscription", sub.id,
		"message-id", "kv."+bucket+".history."+n,
		"destination", sub.dest,
		"kv-history-complete", n)})
	s.receipt(f)
	return true
}

// unwatch ends a watch (UNSUBSCRIBE, connection end).
func (kv *kvStore) unwatch(sub *subscription) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if id, ok := kv.ids[sub]; ok {
		kv.core.Unwatch(id)
		delete(kv.ids, sub)
		delete(kv.watches, id)
	}
}

// KVStats are the key-value store's counts, for views and metrics.
type KVStats struct {
	Buckets         []kvcore.BucketStats
	Bytes           int64
	Watchers        int
	Puts, Deletes   uint64
	Conflicts       uint64
	WatchersDropped uint64
	Expired         uint64 // keys deleted by their TTL
	Transactions    uint64 // committed sets of /kv/ SENDs
	Groups          uint64 // journal commits of single SENDs (group commit: Puts+Deletes over Groups per commit)
}

// KVStats returns the key-value store's counts.
func (b *Broker) KVStats() KVStats {
	kv := &b.kv
	kv.mu.Lock()
	defer kv.mu.Unlock()
	st := KVStats{Puts: kv.puts.Load(), Deletes: kv.deletes.Load(), Conflicts: kv.conflicts.Load(), WatchersDropped: kv.watchDrops.Load(), Expired: kv.expired.Load(), Transactions: kv.txns.Load(), Groups: kv.groups.Load()}
	if kv.core != nil {
		st.Buckets, st.Bytes, st.Watchers = kv.core.Buckets(), kv.core.Bytes(), kv.core.Watchers()
	}
	return st
}
