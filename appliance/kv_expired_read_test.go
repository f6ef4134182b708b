package appliance_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// slowExpiryJournal is the real journal, with the batches that hold a TTL
// expiry (a key-value delete marked Expired) taking delay longer to commit,
// as an fsync under load does. It keeps the key-value and lock parts.
type slowExpiryJournal struct {
	appliance.Journal
	delay time.Duration
}

func (j *slowExpiryJournal) KVLoad(ctx context.Context, fn func(e appliance.KVEntry) error) error {
	return j.Journal.(appliance.KVJournal).KVLoad(ctx, fn)
}

func (j *slowExpiryJournal) KVHistory(ctx context.Context, bucket, key string, fn func(e appliance.KVEntry) error) error {
	return j.Journal.(appliance.KVJournal).KVHistory(ctx, bucket, key, fn)
}

func (j *slowExpiryJournal) LockLoad(ctx context.Context, fn func(t appliance.LockToken) error) error {
	return j.Journal.(appliance.LockJournal).LockLoad(ctx, fn)
}

func (j *slowExpiryJournal) Submit(b *appliance.Batch) {
	for _, op := range b.Ops {
		if op.Kind == appliance.OpKV && op.KV != nil && op.KV.Expired {
			time.Sleep(j.delay)
			break
		}
	}
	j.Journal.Submit(b)
}

// A key read after its expiry time is not answered as alive while the
// expiry's delete waits for its journal commit (slowed to 1.5 s here): it
// was, by kv-get, a watch's snapshot and kv-history, which did not look at
// the clock. (The admin counts still include it until the delete commits:
// its bytes are held until then.)
func TestKV_ExpiredKeyNotReadableBeforeItsDeleteCommits(t *testing.T) {
	tb := startWrapped(t, nil, func(j appliance.Journal) appliance.Journal {
		return &slowExpiryJournal{Journal: j, delay: 1500 * time.Millisecond}
	})
	c := tb.Dial(t)
	before := time.Now().UnixMilli()
	kvPut(t, c, "/kv/p.site1", "up", hdr("kv-ttl", "200ms"))
	expires := before + 200            // the earliest it can be; kv-expires, when there, is exact
	time.Sleep(600 * time.Millisecond) // 400 ms past the expiry time

	check := func(what string, hdrs ...stomp.Header) {
		t.Helper()
		s, err := c.SubscribeReceipt(ctxT(t), "/kv/p.site1", "auto", hdrs...)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Unsubscribe(ctxT(t))
		m := recv(t, s)
		now := time.Now().UnixMilli()
		if m.Get("kv-snapshot-complete") == "" && m.Get("kv-history-complete") == "" {
			if v, err := strconv.ParseInt(m.Get("kv-expires"), 10, 64); err == nil {
				expires = v
			}
			t.Errorf("%s at %d, %d ms past the key's expiry time %d: key answered as alive: %v body %q",
				what, now, now-expires, expires, m.Headers, m.Body)
		}
	}
	check("kv-get", hdr("kv-get", "true"))
	check("watch snapshot")
	check("kv-history", hdr("kv-history", "true"))
}

// failExpiryOnce is the real journal, failing the first batch that holds
// a TTL expiry: the key stays past its time until the retry a second
// later.
type failExpiryOnce struct {
	appliance.Journal
	failed atomic.Bool
}

func (j *failExpiryOnce) KVLoad(ctx context.Context, fn func(e appliance.KVEntry) error) error {
	return j.Journal.(appliance.KVJournal).KVLoad(ctx, fn)
}

func (j *failExpiryOnce) KVHistory(ctx context.Context, bucket, key string, fn func(e appliance.KVEntry) error) error {
	return j.Journal.(appliance.KVJournal).KVHistory(ctx, bucket, key, fn)
}

func (j *failExpiryOnce) LockLoad(ctx context.Context, fn func(t appliance.LockToken) error) error {
	return j.Journal.(appliance.LockJournal).LockLoad(ctx, fn)
}

func (j *failExpiryOnce) Submit(b *appliance.Batch) {
	for _, op := range b.Ops {
		if op.Kind == appliance.OpKV && op.KV != nil && op.KV.Expired && j.failed.CompareAndSwap(false, true) {
			b.Done(b, errors.New("test: expiry batch refused"))
			return
		}
	}
	j.Journal.Submit(b)
}

// A write to a key past its expiry, before its delete is journaled (here
// the first expiry batch fails and is retried a second later), treats the
// key as absent, as reads do: a create-only put (if-revision:0) succeeds
// and a delete finds nothing. The create conflicted with the dead value's
// revision while a kv-get said the key was not there.
func TestKV_WriteToKeyPastExpiryBeforeItsDelete(t *testing.T) {
	j := &failExpiryOnce{}
	tb := startWrapped(t, nil, func(inner appliance.Journal) appliance.Journal {
		j.Journal = inner
		return j
	})
	c := tb.Dial(t)
	kvPut(t, c, "/kv/p.k", "old", hdr("kv-ttl", "100ms"))
	waitFor(t, 5*time.Second, "the expiry batch failed", j.failed.Load)
	// Within the second before the retry.
	if _, err := c.SendReceipt(ctxT(t), "/kv/p.k", []byte("new"), hdr("if-revision", "0")); err != nil {
		t.Fatalf("create-only put to a key past its expiry: %v; the key is absent to reads", err)
	}
	get, err := c.SubscribeReceipt(ctxT(t), "/kv/p.k", "auto", hdr("kv-get", "true"))
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, get); string(m.Body) != "new" || m.Get("kv-expires") != "" {
		t.Fatalf("after the create: %q %v, want the new value without expiry", m.Body, m.Headers)
	}
	// The retried expiry finds nothing due: the new value stays.
	time.Sleep(1500 * time.Millisecond)
	get2, err := c.SubscribeReceipt(ctxT(t), "/kv/p.k", "auto", hdr("kv-get", "true"))
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, get2); string(m.Body) != "new" {
		t.Fatalf("after the expiry's retry: %q %v, want the new value", m.Body, m.Headers)
	}
}
