package appliance_test

import (
	"context"
	"strconv"
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
