package kvcore

import (
	"errors"
	"sort"
)

// PrepareTxn checks a set of requests (one STOMP transaction) as if they
// were applied one after the other, and returns the entries to journal
// together: consecutive revisions of each bucket, in request order. A
// request fails the whole set: PrepareTxn returns its index and error
// (compare-and-set conditions are checked against the state the earlier
// requests of the set make). An unconditional delete of a key that does
// not exist at its turn is left out (it changes nothing, as outside a
// transaction). PrepareTxn changes nothing: it applies the set to the
// core and undoes it before returning.
func (c *Core) PrepareTxn(rs []Request, lim func(bucket string) Limits) ([]Entry, int, error) {
	es, errs := c.prepareSeq(rs, lim, true)
	for i, err := range errs {
		if err != nil {
			return nil, i, err
		}
	}
	var out []Entry
	for _, e := range es {
		if e.Revision != 0 {
			out = append(out, e)
		}
	}
	return out, -1, nil
}

// PrepareEach checks independent requests (writes of several clients that
// share one journal commit: group commit) in order, each against the
// state the earlier successful ones make, as if each were prepared and
// applied in turn. It returns, per request, the entry to journal or the
// error Prepare would have returned then (ErrNoKey included); failures do
// not stop the others. The entries are journaled in one batch and applied
// one by one with Apply, in order. PrepareEach changes nothing.
func (c *Core) PrepareEach(rs []Request, lim func(bucket string) Limits) ([]Entry, []error) {
	return c.prepareSeq(rs, lim, false)
}

// prepareSeq prepares rs in order on the core, applying each success and
// undoing all before it returns; with stop, it stops at the first failure
// other than ErrNoKey (which is no entry, no error in a set).
func (c *Core) prepareSeq(rs []Request, lim func(bucket string) Limits, stop bool) ([]Entry, []error) {
	type undo struct {
		bucket, key string
		created     bool
		rev         uint64
		old         Entry
		had         bool
	}
	var undos []undo
	defer func() {
		for i := len(undos) - 1; i >= 0; i-- {
			u := undos[i]
			b := c.buckets[u.bucket]
			c.replace(b, u.bucket, u.key, u.old, u.had)
			b.rev = u.rev
			if u.created {
				delete(c.buckets, u.bucket)
			}
		}
	}()
	out := make([]Entry, len(rs))
	errs := make([]error, len(rs))
	for i, r := range rs {
		e, err := c.Prepare(r, lim(r.Bucket))
		if errors.Is(err, ErrNoKey) && stop {
			continue
		}
		if err != nil {
			errs[i] = err
			if stop {
				return nil, errs
			}
			continue
		}
		u := undo{bucket: r.Bucket, key: r.Key}
		if b := c.bucket(r.Bucket, false); b == nil {
			u.created = true
		} else {
			u.rev = b.rev
			u.old, u.had = b.keys[r.Key]
		}
		undos = append(undos, u)
		c.set(e)
		out[i] = e
	}
	return out, errs
}

// ApplyTxn commits a set of entries PrepareTxn (or Expire) returned, which
// the journal stored in one batch, and returns the deliveries: for each
// entry in order, one per matching watcher, each carrying the set's first
// revision in the entry's bucket (Txn); the last delivery of the set to
// each watcher has Last set. A watcher that gets a Txn change knows the
// set is complete when it sees Last.
func (c *Core) ApplyTxn(es []Entry) []Delivery {
	first := map[string]uint64{}
	last := map[uint64]int{}
	ids := c.watchIDs()
	var out []Delivery
	for _, e := range es {
		c.set(e)
		if _, ok := first[e.Bucket]; !ok {
			first[e.Bucket] = e.Revision
		}
		for _, id := range ids {
			w := c.watchers[id]
			if w.bucket == e.Bucket && Match(w.pattern, e.Key) {
				last[id] = len(out)
				out = append(out, Delivery{Watch: id, Entry: e, Txn: first[e.Bucket]})
			}
		}
	}
	for _, i := range last {
		out[i].Last = true
	}
	return out
}

// Expire returns the deletes of every key whose value has expired at now
// (Unix ms): Op Delete, Expired set, consecutive revisions of each bucket,
// in bucket and key order, to journal in one batch and then ApplyTxn.
// It changes nothing; with nothing expired it returns nil.
func (c *Core) Expire(now int64) []Entry {
	due := c.ttl.due(now)
	if len(due) == 0 {
		return nil
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].bucket != due[j].bucket {
			return due[i].bucket < due[j].bucket
		}
		return due[i].key < due[j].key
	})
	revs := map[string]uint64{}
	out := make([]Entry, 0, len(due))
	for _, k := range due {
		r, ok := revs[k.bucket]
		if !ok {
			r = c.buckets[k.bucket].rev
		}
		r++
		revs[k.bucket] = r
		out = append(out, Entry{Bucket: k.bucket, Key: k.key, Op: Delete, Revision: r, Expired: true})
	}
	return out
}

// NextExpiry is the earliest expiry time of a live key (Unix ms), 0 when
// no key has a TTL: the shell's timer calls Expire then.
func (c *Core) NextExpiry() int64 {
	if len(c.ttl.items) == 0 {
		return 0
	}
	return c.ttl.items[0].at
}
