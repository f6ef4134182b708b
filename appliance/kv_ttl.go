package appliance

import (
	"fmt"
	"time"
)

// Expiry of key-value keys (kv-ttl header, [[kv.bucket]] ttl). The core
// decides what has expired at a time given to it (kvcore Expire); this
// loop only wakes at the core's NextExpiry (or when a put brings a TTL),
// journals the deletes in one batch and hands them to the watchers like a
// transaction, each marked kv-expired:true. A key whose time passed while
// the daemon was down is expired by openKV before any client connects.

// kvExpiryRetry: how long the loop waits after a failed journal batch.
const kvExpiryRetry = time.Second

// wakeExpiry tells the expiry loop that a key got a TTL.
func (kv *kvStore) wakeExpiry() {
	select {
	case kv.wake <- struct{}{}:
	default:
	}
}

// kvExpire expires every key due now and returns the error of the journal
// batch, if it failed (the keys stay; the loop tries again).
func (b *Broker) kvExpire() error {
	kv := &b.kv
	kv.commitMu.Lock()
	defer kv.commitMu.Unlock()
	kv.mu.Lock()
	es := kv.core.Expire(b.now().UnixMilli())
	kv.mu.Unlock()
	if len(es) == 0 {
		return nil
	}
	ops := make([]Op, len(es))
	for i := range es {
		ops[i] = Op{Kind: OpKV, KV: &es[i]}
	}
	done := make(chan error, 1)
	b.j.Submit(&Batch{Ops: ops, Done: func(_ *Batch, err error) { done <- err }})
	if err := <-done; err != nil {
		b.journalResult(err)
		return fmt.Errorf("%d expired keys not deleted: %w", len(es), err)
	}
	for _, e := range es {
		kv.count(e)
	}
	kv.mu.Lock()
	kv.deliver(kv.core.ApplyTxn(es))
	kv.mirror(b, es, true)
	kv.mu.Unlock()
	return nil
}

func (b *Broker) kvExpiryLoop() {
	defer b.wg.Done()
	kv := &b.kv
	for {
		wait := time.Hour
		if err := b.kvExpire(); err != nil {
			b.log.Error("key-value expiry failed; retrying", "err", err)
			wait = kvExpiryRetry
		} else {
			kv.mu.Lock()
			next := kv.core.NextExpiry()
			kv.mu.Unlock()
			if next != 0 {
				wait = min(wait, max(time.Duration(next-b.now().UnixMilli())*time.Millisecond, time.Millisecond))
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-b.stop:
			t.Stop()
			return
		case <-kv.wake:
		case <-t.C:
		}
		t.Stop()
	}
}
