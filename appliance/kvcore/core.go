package kvcore

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Op is what a change does to its key.
type Op uint8

// Operations. Their names are NATS KV's KV-Operation values.
const (
	Put Op = iota + 1
	Delete
)

func (o Op) String() string {
	switch o {
	case Put:
		return "PUT"
	case Delete:
		return "DEL"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Limits bound one bucket, and the number of buckets.
type Limits struct {
	MaxValueBytes int   // one value
	MaxKeys       int   // live keys of the bucket
	MaxBytes      int64 // sum of Entry.Size over the bucket's live keys
	MaxBuckets    int   // buckets of the whole store
	MaxTotalBytes int64 // sum of Entry.Size over every bucket's live keys
}

// Entry is one committed change, and a key's current value (Op Put).
type Entry struct {
	Bucket, Key string
	Op          Op
	Revision    uint64 // the bucket's revision this change made
	ContentType string
	Value       []byte
	// History, for the journal only: how many revisions of the key to
	// keep, this one included (the core keeps the current one).
	History int
	// HistoryBytes, for the journal only: what the bucket's older
	// revisions (every kept one but the keys' current ones) may weigh
	// (Size each); over it the oldest of the bucket go first. 0: no bound.
	HistoryBytes int64
	// Expires: when a put's value expires, in Unix milliseconds (0:
	// never). Journaled with the value, so expiry survives restarts.
	Expires int64
	// Expired marks a delete made by Expire (watchers see kv-expired:true).
	Expired bool
}

// Alive reports whether e's value is still readable at now (Unix ms): it
// has no expiry, or its expiry is later. A key past its expiry stays in the
// core until Expire's delete is journaled; reads do not show it meanwhile.
func (e Entry) Alive(now int64) bool { return e.Expires == 0 || e.Expires > now }

// Size is what an entry weighs against Limits.MaxBytes.
func (e Entry) Size() int64 { return int64(len(e.Key) + len(e.ContentType) + len(e.Value)) }

// NoRevision in Request.IfRevision: an unconditional write.
const NoRevision = -1

// Request is one write asked for by a client.
type Request struct {
	Bucket, Key string
	Op          Op
	ContentType string
	Value       []byte
	// IfRevision, unless NoRevision, makes the write a compare-and-set:
	// it applies only if the key's revision is this one (0: the key does
	// not exist).
	IfRevision int64
	// NoCreate: a put to a key that does not exist is refused
	// (ErrCreateDenied): the writer lacks the create permission.
	NoCreate bool
	// Expires: for a put, when the value expires (Unix ms, 0: never). The
	// shell computes it from the time it passes in and the key's or
	// bucket's TTL; Expire decides, given the time, what has expired.
	Expires int64
	// Now is the time of the request (Unix ms): a key past its expiry at
	// Now is absent to it (if-revision, a delete, NoCreate), as it is to
	// reads (Entry.Alive), though Expire's delete is still to come. 0:
	// every key counts as alive.
	Now int64
}

// Errors of Prepare. Conflicts are *ConflictError.
var (
	ErrValueTooLarge = errors.New("kv: value too large")
	ErrTooManyKeys   = errors.New("kv: bucket has too many keys")
	ErrBucketFull    = errors.New("kv: bucket is full (bytes)")
	ErrTooManyBucket = errors.New("kv: too many buckets")
	ErrStoreFull     = errors.New("kv: store is full (bytes of all buckets)")
	// ErrNoKey: an unconditional delete of a key that does not exist;
	// nothing changes and no revision is used.
	ErrNoKey = errors.New("kv: no such key")
	// ErrCreateDenied: a put with NoCreate to a key that does not exist.
	ErrCreateDenied = errors.New("kv: the key does not exist and the writer may not create it")
)

// ConflictError is a compare-and-set whose expected revision is not the
// key's.
type ConflictError struct {
	Expected, Current uint64 // Current 0: the key does not exist
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("kv: revision conflict: expected %d, key is at %d", e.Expected, e.Current)
}

// Delivery is a change for one watcher.
type Delivery struct {
	Watch uint64
	Entry Entry
	// Txn, for a change made by ApplyTxn: the set's first revision in the
	// entry's bucket (0: a single change). Last marks the last change of
	// the set this watcher receives.
	Txn  uint64
	Last bool
}

type bucket struct {
	rev   uint64
	keys  map[string]Entry
	bytes int64
}

type watcher struct {
	bucket, pattern string
}

// Core is the state of every bucket. Not safe for concurrent use.
type Core struct {
	buckets   map[string]*bucket
	watchers  map[uint64]watcher
	nextWatch uint64
	bytes     int64 // every bucket's
	ttl       ttlHeap
}

// New returns an empty store.
func New() *Core {
	return &Core{buckets: map[string]*bucket{}, watchers: map[uint64]watcher{}, ttl: ttlHeap{at: map[ttlKey]int{}}}
}

// Recover restores a committed entry (a live key) or, with e.Op == 0, only
// a bucket's revision counter, at startup. Order does not matter.
func (c *Core) Recover(e Entry) {
	b := c.bucket(e.Bucket, true)
	b.rev = max(b.rev, e.Revision)
	if e.Op == Put {
		if old, ok := b.keys[e.Key]; ok {
			if old.Revision > e.Revision {
				return
			}
			b.bytes -= old.Size()
			c.bytes -= old.Size()
		}
		b.keys[e.Key] = e
		b.bytes += e.Size()
		c.bytes += e.Size()
		c.ttl.set(ttlKey{e.Bucket, e.Key}, e.Expires)
	}
}

func (c *Core) bucket(name string, create bool) *bucket {
	b := c.buckets[name]
	if b == nil && create {
		b = &bucket{keys: map[string]Entry{}}
		c.buckets[name] = b
	}
	return b
}

// Prepare checks r against the committed state and limits and returns the
// entry to journal. It changes nothing.
func (c *Core) Prepare(r Request, lim Limits) (Entry, error) {
	b := c.bucket(r.Bucket, false)
	var cur Entry
	var exists bool
	if b != nil {
		cur, exists = b.keys[r.Key]
	}
	// A key past its expiry is absent to the request; it still weighs
	// against the limits below until Expire's delete (or this put) goes.
	alive := exists && (r.Now == 0 || cur.Alive(r.Now))
	var curRev uint64
	if alive {
		curRev = cur.Revision
	}
	if r.IfRevision != NoRevision {
		if r.IfRevision < 0 || uint64(r.IfRevision) != curRev {
			return Entry{}, &ConflictError{Expected: uint64(max(r.IfRevision, 0)), Current: curRev}
		}
	}
	e := Entry{Bucket: r.Bucket, Key: r.Key, Op: r.Op, Revision: 1}
	if b != nil {
		e.Revision = b.rev + 1
	}
	switch r.Op {
	case Delete:
		if !alive {
			return Entry{}, ErrNoKey
		}
		return e, nil
	case Put:
	default:
		return Entry{}, fmt.Errorf("kv: unknown operation %d", r.Op)
	}
	e.ContentType, e.Value, e.Expires = r.ContentType, r.Value, r.Expires
	if len(r.Value) > lim.MaxValueBytes {
		return Entry{}, ErrValueTooLarge
	}
	if b == nil && len(c.buckets) >= lim.MaxBuckets {
		return Entry{}, ErrTooManyBucket
	}
	var keys int
	var bytes int64
	if b != nil {
		keys, bytes = len(b.keys), b.bytes
	}
	if exists {
		keys--
		bytes -= cur.Size()
	}
	if keys+1 > lim.MaxKeys {
		return Entry{}, ErrTooManyKeys
	}
	if bytes+e.Size() > lim.MaxBytes {
		return Entry{}, ErrBucketFull
	}
	if total := c.bytes - cur.Size() + e.Size(); total > lim.MaxTotalBytes {
		return Entry{}, ErrStoreFull
	}
	if !alive && r.NoCreate {
		return Entry{}, ErrCreateDenied
	}
	return e, nil
}

// Apply commits an entry Prepare returned (and the journal stored) and
// returns its deliveries, in watcher order. The entry's revision must be
// the bucket's next one: Apply panics otherwise (a shell that did not
// serialise Prepare and Apply).
func (c *Core) Apply(e Entry) []Delivery {
	c.set(e)
	var out []Delivery
	for _, id := range c.watchIDs() {
		w := c.watchers[id]
		if w.bucket == e.Bucket && Match(w.pattern, e.Key) {
			out = append(out, Delivery{Watch: id, Entry: e})
		}
	}
	return out
}

// set makes e the key's state (a put's value, or no key for a delete) and
// moves the bucket's counter to its revision, which must be the next one.
func (c *Core) set(e Entry) {
	b := c.bucket(e.Bucket, true)
	if e.Revision != b.rev+1 {
		panic(fmt.Sprintf("kvcore: Apply of revision %d of bucket %s at revision %d", e.Revision, e.Bucket, b.rev))
	}
	b.rev = e.Revision
	c.replace(b, e.Bucket, e.Key, e, e.Op == Put)
}

// replace puts e (live) or nothing as the key's state, keeping the byte
// counts and the expiry heap.
func (c *Core) replace(b *bucket, bucket, key string, e Entry, live bool) {
	if old, ok := b.keys[key]; ok {
		b.bytes -= old.Size()
		c.bytes -= old.Size()
		delete(b.keys, key)
	}
	var exp int64
	if live {
		b.keys[key] = e
		b.bytes += e.Size()
		c.bytes += e.Size()
		exp = e.Expires
	}
	c.ttl.set(ttlKey{bucket, key}, exp)
}

func (c *Core) watchIDs() []uint64 {
	ids := make([]uint64, 0, len(c.watchers))
	for id := range c.watchers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Watch registers a watcher of the keys of bucket matching pattern (dot
// segments, * one segment, > the rest) and returns its id, the current
// value of every matching key in key order, and the bucket revision that
// snapshot reflects (0: the bucket has no change yet). Later changes come
// from Apply with higher revisions.
func (c *Core) Watch(bucket, pattern string) (id uint64, snapshot []Entry, rev uint64) {
	c.nextWatch++
	id = c.nextWatch
	c.watchers[id] = watcher{bucket: bucket, pattern: pattern}
	snapshot, rev = c.Snapshot(bucket, pattern)
	return id, snapshot, rev
}

// Snapshot returns the matching keys' values in key order and the bucket's
// revision, without registering a watcher.
func (c *Core) Snapshot(bucket, pattern string) ([]Entry, uint64) {
	b := c.bucket(bucket, false)
	if b == nil {
		return nil, 0
	}
	var out []Entry
	for k, e := range b.keys {
		if Match(pattern, k) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, b.rev
}

// Unwatch forgets a watcher. Unknown ids are ignored.
func (c *Core) Unwatch(id uint64) { delete(c.watchers, id) }

// Get returns a key's current value.
func (c *Core) Get(bucket, key string) (Entry, bool) {
	b := c.bucket(bucket, false)
	if b == nil {
		return Entry{}, false
	}
	e, ok := b.keys[key]
	return e, ok
}

// BucketStats are one bucket's counts.
type BucketStats struct {
	Name     string
	Revision uint64
	Keys     int
	Bytes    int64
}

// Buckets lists every bucket by name.
func (c *Core) Buckets() []BucketStats {
	out := make([]BucketStats, 0, len(c.buckets))
	for n, b := range c.buckets {
		out = append(out, BucketStats{Name: n, Revision: b.rev, Keys: len(b.keys), Bytes: b.bytes})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Bytes is the sum of Entry.Size over every live key.
func (c *Core) Bytes() int64 { return c.bytes }

// Watchers is the number of registered watchers.
func (c *Core) Watchers() int { return len(c.watchers) }

// Match reports whether key matches pattern: dot-separated segments, *
// matches one segment, > one or more trailing segments.
func Match(pattern, key string) bool {
	for {
		p, prest, pmore := strings.Cut(pattern, ".")
		if p == ">" {
			return key != ""
		}
		k, krest, kmore := strings.Cut(key, ".")
		if p != "*" && p != k {
			return false
		}
		if !pmore || !kmore {
			return !pmore && !kmore
		}
		pattern, key = prest, krest
	}
}
