package appliance_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// kvTxn commits puts of keys (all set to val) in one transaction and
// returns the COMMIT's RECEIPT.
func kvTxn(t *testing.T, c *client.Conn, id string, val string, keys []string, extra ...stomp.Header) (*stomp.Frame, error) {
	t.Helper()
	if err := c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", id)); err != nil {
		return nil, err
	}
	for _, k := range keys {
		f := stomp.NewFrame(stomp.CmdSend, "destination", "/kv/"+k, "transaction", id)
		for _, h := range extra {
			f.Headers.Add(h.Key, h.Value)
		}
		f.Body = []byte(val)
		if err := c.Write(f); err != nil {
			return nil, err
		}
	}
	return c.Request(ctxT(t), stomp.NewFrame(stomp.CmdCommit, "transaction", id))
}

// A transaction's puts get consecutive revisions, are queued to every
// watcher together (marked kv-transaction:FIRST, the last one
// kv-transaction-last:true) with no other change between them, and no
// snapshot is taken in the middle of one, under concurrent transactions.
func TestKVTxn_WatchersSeeSetsWhole(t *testing.T) {
	tb := mustStartBroker(t, nil)
	keys := []string{"config.site1.a", "config.site1.b", "config.site2.c"}
	w := tb.Dial(t)
	watch, err := w.SubscribeReceipt(ctxT(t), "/kv/config.>", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, watch); m.Get("kv-snapshot-complete") != "0" {
		t.Fatalf("empty bucket's marker: %v", m.Headers)
	}
	const writers, txns = 3, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	firsts := map[uint64]bool{}
	for i := 0; i < writers; i++ {
		c := tb.Dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < txns; n++ {
				r, err := kvTxn(t, c, fmt.Sprintf("t%d", n), fmt.Sprintf("w%d-%d", i, n), keys)
				if err != nil {
					t.Errorf("commit: %v", err)
					return
				}
				first, _ := strconv.ParseUint(r.Get("kv-transaction"), 10, 64)
				last, _ := strconv.ParseUint(r.Get("revision"), 10, 64)
				if first == 0 || last != first+2 {
					t.Errorf("COMMIT RECEIPT %v: want kv-transaction:FIRST and revision:FIRST+2", r.Headers)
				}
				mu.Lock()
				firsts[first] = true
				mu.Unlock()
			}
		}()
	}
	// Snapshots taken while the writers run: always one whole set.
	snaps := 0
	for i := 0; i < 15; i++ {
		c := tb.Dial(t)
		g, err := c.SubscribeReceipt(ctxT(t), "/kv/config.>", "auto", hdr("kv-get", "true"))
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]string{}
		for {
			m := recv(t, g)
			if m.Get("kv-snapshot-complete") != "" {
				break
			}
			vals[m.Get("destination")] = string(m.Body)
		}
		if len(vals) > 0 {
			snaps++
			if len(vals) != 3 || vals["/kv/"+keys[0]] != vals["/kv/"+keys[1]] || vals["/kv/"+keys[1]] != vals["/kv/"+keys[2]] {
				t.Errorf("snapshot in the middle of a transaction: %v", vals)
			}
		}
		c.Close()
	}
	wg.Wait()
	// The watcher: every set whole, in order, nothing between its changes.
	state := map[string]string{}
	var open uint64
	var lastRev uint64
	sets := 0
	for sets < writers*txns {
		m := recv(t, watch)
		rev, _ := strconv.ParseUint(m.Get("revision"), 10, 64)
		if rev != lastRev+1 {
			t.Fatalf("revision %d after %d: a gap or a duplicate", rev, lastRev)
		}
		lastRev = rev
		txn, _ := strconv.ParseUint(m.Get("kv-transaction"), 10, 64)
		if txn == 0 || (open != 0 && txn != open) || (open == 0 && txn != rev) {
			t.Fatalf("change %v: set %d is open", m.Headers, open)
		}
		open = txn
		state[m.Get("destination")] = string(m.Body)
		if m.Get("kv-transaction-last") == "true" {
			if rev != txn+2 {
				t.Fatalf("set %d ends at %d", txn, rev)
			}
			if !firsts[txn] {
				t.Fatalf("set %d was never receipted", txn)
			}
			v := state["/kv/"+keys[0]]
			for _, k := range keys {
				if state["/kv/"+k] != v {
					t.Fatalf("after set %d: %v", txn, state)
				}
			}
			open = 0
			sets++
		}
	}
	expectNone(t, watch, 100*time.Millisecond)
	t.Logf("%d sets watched, %d snapshots with values", sets, snaps)
}

// ABORT and the end of the connection discard; a conflict stores nothing;
// conditions see the set's earlier writes; a transaction of /kv/ SENDs
// holds only those, in one bucket.
func TestKVTxn_AbortConflictAndMixing(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	kvPut(t, c, "/kv/b.x", "0") // revision 1
	c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "a"))
	c.Write(stomp.NewFrame(stomp.CmdSend, "destination", "/kv/b.y", "transaction", "a"))
	if _, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdAbort, "transaction", "a")); err != nil {
		t.Fatal(err)
	}
	// A connection ending with an open transaction.
	c2 := tb.Dial(t)
	c2.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "z"))
	if _, err := c2.Request(ctxT(t), stomp.NewFrame(stomp.CmdSend, "destination", "/kv/b.z", "transaction", "z")); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	// A stale condition in the second SEND: nothing of the set is stored.
	c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "c"))
	c.Write(stomp.NewFrame(stomp.CmdSend, "destination", "/kv/b.w", "transaction", "c"))
	c.Write(stomp.NewFrame(stomp.CmdSend, "destination", "/kv/b.x", "transaction", "c", "if-revision", "7"))
	r, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdCommit, "transaction", "c"))
	if err != nil || r.Get("kv-conflict") != "1" || r.Get("kv-conflict-destination") != "/kv/b.x" || r.Get("revision") != "" {
		t.Fatalf("conflicting COMMIT: %v %v", r, err)
	}
	// Create-only then update in one set: the second condition sees the
	// first write's revision.
	c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "d"))
	c.Write(stomp.NewFrame(stomp.CmdSend, "destination", "/kv/b.n", "transaction", "d", "if-revision", "0"))
	c.Write(stomp.NewFrame(stomp.CmdSend, "destination", "/kv/b.n", "transaction", "d", "if-revision", "2"))
	c.Write(stomp.NewFrame(stomp.CmdSend, "destination", "/kv/b.gone", "transaction", "d", "kv-operation", "DEL"))
	r, err = c.Request(ctxT(t), stomp.NewFrame(stomp.CmdCommit, "transaction", "d"))
	if err != nil || r.Get("kv-transaction") != "2" || r.Get("revision") != "3" {
		t.Fatalf("chained conditions: %v %v", r, err)
	}
	g, _ := c.SubscribeReceipt(ctxT(t), "/kv/b.>", "auto", hdr("kv-get", "true"))
	var got []string
	for {
		m := recv(t, g)
		if v := m.Get("kv-snapshot-complete"); v != "" {
			if v != "3" {
				t.Errorf("bucket at revision %s, want 3 (aborted, dropped and conflicting sets used none)", v)
			}
			break
		}
		got = append(got, m.Get("destination")+"@"+m.Get("revision"))
	}
	if strings.Join(got, " ") != "/kv/b.n@3 /kv/b.x@1" {
		t.Errorf("keys after abort, disconnect and conflict: %v", got)
	}
	// Mixing.
	for _, tc := range []struct {
		first, second string
		want          string
	}{
		{"/queue/q", "/kv/b.k", "key-value writes go in a transaction of their own"},
		{"/kv/b.k", "/queue/q", "it may hold only those"},
		{"/kv/b.k", "/kv/other.k", "a transaction writes to one bucket"},
		{"/kv/b.k", "/lock/deploy", "nothing is sent to it"},
	} {
		c := tb.Dial(t)
		c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "m"))
		if _, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdSend, "destination", tc.first, "transaction", "m")); err != nil {
			t.Fatalf("%s: %v", tc.first, err)
		}
		_, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdSend, "destination", tc.second, "transaction", "m"))
		var se *client.ServerError
		if !errors.As(err, &se) || !strings.Contains(string(se.Frame.Body), tc.want) {
			t.Errorf("%s then %s: %v, want ERROR naming %q", tc.first, tc.second, err, tc.want)
		}
	}
}

// A key with a TTL (kv-ttl header, or the bucket's ttl) is deleted when
// it expires: watchers see a DEL marked kv-expired:true with the next
// revision; a put with a TTL carries kv-expires.
func TestKVTTL_ExpirySeenByWatcher(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.KV.Bucket = []appliance.KVBucketConfig{{Name: "lease", TTL: appliance.Duration{Duration: 300 * time.Millisecond}}}
	})
	c := tb.Dial(t)
	for _, bucket := range []string{"presence", "lease"} {
		watch, err := c.SubscribeReceipt(ctxT(t), "/kv/"+bucket+".>", "auto")
		if err != nil {
			t.Fatal(err)
		}
		recv(t, watch) // marker
		var hdrs []stomp.Header
		if bucket == "presence" {
			hdrs = append(hdrs, hdr("kv-ttl", "300ms"))
		}
		before := time.Now().UnixMilli()
		kvPut(t, c, "/kv/"+bucket+".h1", "up", hdrs...)
		kvPut(t, c, "/kv/"+bucket+".h2", "up", hdr("kv-ttl", "1h")) // outlives the test
		m := recv(t, watch)
		exp, _ := strconv.ParseInt(m.Get("kv-expires"), 10, 64)
		if exp < before+300 || exp > time.Now().UnixMilli()+300 {
			t.Errorf("%s: put's kv-expires %q, want about now+300ms", bucket, m.Get("kv-expires"))
		}
		recv(t, watch) // h2
		m = recv(t, watch)
		if m.Get("destination") != "/kv/"+bucket+".h1" || m.Get("kv-operation") != "DEL" || m.Get("kv-expired") != "true" || m.Get("revision") != "3" {
			t.Fatalf("%s: expiry delivered as %v", bucket, m.Headers)
		}
		if time.Now().UnixMilli() < before+300 {
			t.Errorf("%s: expired early", bucket)
		}
		expectNone(t, watch, 50*time.Millisecond)
	}
	if st := tb.B.KVStats(); st.Expired != 2 {
		t.Errorf("KVStats.Expired %d, want 2", st.Expired)
	}
}

// Expiry survives a restart: a key whose time passed while the daemon was
// down is gone when it starts (the revision moved: it was a journaled
// delete), and one not yet due still expires later.
func TestKVTTL_SurvivesRestart(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	kvPut(t, c, "/kv/p.short", "x", hdr("kv-ttl", "200ms"))
	kvPut(t, c, "/kv/p.long", "x", hdr("kv-ttl", "2s"))
	kvPut(t, c, "/kv/p.none", "x")
	tb.Stop()
	time.Sleep(400 * time.Millisecond)
	tb.Restart()
	c = tb.Dial(t)
	watch, err := c.SubscribeReceipt(ctxT(t), "/kv/p.>", "auto")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for {
		m := recv(t, watch)
		if v := m.Get("kv-snapshot-complete"); v != "" {
			if v != "4" {
				t.Errorf("marker %s after restart: the expiry at start should have taken revision 4", v)
			}
			break
		}
		keys = append(keys, m.Get("destination"))
	}
	if strings.Join(keys, " ") != "/kv/p.long /kv/p.none" {
		t.Fatalf("keys after restart: %v", keys)
	}
	m := recv(t, watch)
	if m.Get("destination") != "/kv/p.long" || m.Get("kv-expired") != "true" || m.Get("revision") != "5" {
		t.Fatalf("later expiry: %v", m.Headers)
	}
}
