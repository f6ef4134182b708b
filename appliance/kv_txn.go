package appliance

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/kvcore"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Key-value transactions: the /kv/ SENDs of BEGIN..COMMIT are one journal
// batch, so after a crash either all of them are there or none.
//
//   - A transaction that holds a /kv/ SEND holds only /kv/ SENDs, all to
//     one bucket, and no ACK or NACK (ERROR otherwise, at the frame, which ends the
//     connection as every STOMP ERROR: nothing of it is stored). Each SEND is checked when it is buffered (headers), and all
//     together at COMMIT, in order: compare-and-set conditions against the
//     state the earlier SENDs of the set make, limits, create permission,
//     if-fence.
//   - The changes get consecutive revisions of the bucket. Each MESSAGE a
//     watcher gets for them carries kv-transaction:FIRST (the set's first
//     revision) and the last one it gets carries kv-transaction-last:true;
//     all are queued to each watcher under the store's lock, so no other
//     change comes between them, and a snapshot is never taken in the
//     middle of a set.
//   - The COMMIT's RECEIPT (after the batch is durable) carries
//     kv-transaction:FIRST and revision:LAST; a conflict answers the
//     RECEIPT with kv-conflict:CURRENT and kv-conflict-destination:DEST
//     (ERROR without a receipt header), and nothing is stored. A set whose
//     every SEND is a delete of a missing key is RECEIPT kv-noop:true.
//   - ABORT, or the end of the connection before COMMIT, discards it.

// bufferKV checks a SEND buffered into tx: /kv/ SENDs do not mix with
// other frames, and stay in one bucket.
func (s *session) bufferKV(f *stomp.Frame, tx *transaction, kind destKind, name string) bool {
	if kind == destLock {
		s.fail(f, "invalid destination", "A lock is taken with SUBSCRIBE to /lock/NAME; nothing is sent to it, in a transaction or not.")
		return false
	}
	if kind != destKV {
		if tx.kv != "" {
			s.fail(f, "mixed transaction", fmt.Sprintf("This transaction holds key-value writes (/kv/%s.…); it may hold only those. Send %s in another transaction.", tx.kv, f.Get("destination")))
			return false
		}
		return true
	}
	bucket, _, _ := strings.Cut(name, ".")
	switch {
	case tx.kv == "" && len(tx.frames) > 0:
		s.fail(f, "mixed transaction", "This transaction holds queue, topic or stream frames; key-value writes go in a transaction of their own.")
		return false
	case tx.kv != "" && tx.kv != bucket:
		s.fail(f, "mixed transaction", fmt.Sprintf("This transaction writes to bucket %s; a transaction writes to one bucket.", tx.kv))
		return false
	}
	if _, _, ok := s.kvRequest(f, name); !ok {
		return false
	}
	tx.kv = bucket
	return true
}

func (s *session) commitKV(f *stomp.Frame, id string, tx *transaction) bool {
	reqs := make([]kvcore.Request, len(tx.frames))
	fences := make([]*fence, len(tx.frames))
	dests := make([]string, len(tx.frames))
	anyPut := false
	for i, bf := range tx.frames {
		// buffer admits only /kv/ SENDs of one bucket once tx.kv is set;
		// anything else here is a bug, refused rather than written.
		kind, name, err := s.dest(bf.Get("destination"), false)
		if bf.Command != stomp.CmdSend || err != nil || kind != destKV {
			s.fail(f, "mixed transaction", fmt.Sprintf("Transaction %s holds a %s frame that is not a key-value write; nothing was committed.", id, bf.Command))
			return false
		}
		req, fc, ok := s.kvRequest(bf, name)
		if !ok {
			return false
		}
		reqs[i], fences[i], dests[i] = req, fc, prefixKV+name
		reqs[i].NoCreate = !s.kvMayCreate(name)
		anyPut = anyPut || req.Op == kvcore.Put
	}
	if anyPut && s.b.checkDisk(false) {
		s.drainJournal()
		s.fail(f, "disk full", fmt.Sprintf("Free space in the data directory %s is below %d bytes (journal.min_free_bytes plus journal.wal_limit_bytes); transaction %s was not committed. Deletes outside a transaction still work.", s.b.cfg().DataDir, s.b.diskFloor(), id))
		return false
	}
	kv := &s.b.kv
	kv.commitMu.Lock()
	defer kv.commitMu.Unlock()
	kv.mu.Lock()
	unavailable := kv.core == nil
	kv.mu.Unlock()
	if unavailable {
		s.fail(f, "key-value store unavailable", errKVUnavailable)
		return false
	}
	for i, fc := range fences {
		if fc == nil {
			continue
		}
		unlock, ok := s.checkFence(f, fc, dests[i])
		if !ok {
			return false
		}
		// The table stays locked until the batch committed; checkFence
		// took it once, the other fences are checked under it.
		defer unlock()
		for _, fc2 := range fences[i+1:] {
			if fc2 != nil {
				if err := kv.locks.core.Fence(fc2.name, fc2.token); err != nil {
					kv.locks.fenced.Add(1)
					s.drainJournal()
					s.fail(f, "fenced", fmt.Sprintf("%v (if-fence); transaction %s was not committed.", err, id))
					return false
				}
			}
		}
		break
	}
	// The core's lock is held while the set is prepared and while it is
	// applied, not across the commit (commitMu keeps other writers out).
	cfg := s.b.cfg().KV
	now := s.b.now().UnixMilli()
	for i := range reqs {
		reqs[i].Now = now
	}
	kv.mu.Lock()
	es, idx, err := kv.core.PrepareTxn(reqs, func(bucket string) kvcore.Limits { l, _ := cfg.limits(bucket); return l })
	kv.mu.Unlock()
	var ce *kvcore.ConflictError
	switch {
	case errors.As(err, &ce):
		kv.conflicts.Add(1)
		if f.Get("receipt") == "" {
			s.drainJournal()
			s.fail(f, "revision conflict", fmt.Sprintf("%s is at revision %d, not %d (if-revision); transaction %s was not committed. Commit with a receipt header to get conflicts as a RECEIPT with kv-conflict:CURRENT instead of an ERROR.", dests[idx], ce.Current, ce.Expected, id))
			return false
		}
		s.receipt(f, stomp.Header{Key: "transaction", Value: id},
			stomp.Header{Key: "kv-conflict", Value: strconv.FormatUint(ce.Current, 10)},
			stomp.Header{Key: "kv-conflict-destination", Value: dests[idx]})
		return true
	case errors.Is(err, kvcore.ErrCreateDenied):
		return s.deny(f, *s.ident.Load(), dests[idx], auth.Create)
	case err != nil:
		lim, where := cfg.limits(reqs[idx].Bucket)
		s.drainJournal()
		s.fail(f, "transaction not committed", kvLimitDetail(err, dests[idx], len(reqs[idx].Value), lim, where))
		return false
	case len(es) == 0:
		s.receipt(f, stomp.Header{Key: "transaction", Value: id}, stomp.Header{Key: "kv-noop", Value: "true"})
		return true
	}
	ops := make([]Op, len(es))
	hasTTL := false
	for i := range es {
		es[i].History, es[i].HistoryBytes = cfg.history(es[i].Bucket)
		ops[i] = Op{Kind: OpKV, KV: &es[i]}
		hasTTL = hasTTL || es[i].Expires != 0
	}
	done := make(chan error, 1)
	s.submit(&Batch{Ops: ops, Done: func(_ *Batch, err error) { done <- err }})
	if err := <-done; err != nil {
		s.b.journalResult(err)
		s.log.Error("transaction not stored", "transaction", id, "err", err)
		s.fail(f, txNotCommitted(err), fmt.Sprintf("transaction %s: %v", id, err))
		return false
	}
	kv.txns.Add(1)
	for _, e := range es {
		kv.count(e)
	}
	kv.mu.Lock()
	kv.deliver(kv.core.ApplyTxn(es))
	kv.mirror(s.b, es, true)
	kv.mu.Unlock()
	if hasTTL {
		kv.wakeExpiry()
	}
	if r := f.Get("receipt"); r != "" {
		s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", r, "transaction", id,
			"frames", strconv.Itoa(len(tx.frames)),
			"kv-transaction", strconv.FormatUint(es[0].Revision, 10),
			"revision", strconv.FormatUint(es[len(es)-1].Revision, 10)))
	}
	return true
}
