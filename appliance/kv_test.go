package appliance_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

func kvPut(t *testing.T, c *client.Conn, dest, body string, hdrs ...stomp.Header) *stomp.Frame {
	t.Helper()
	r, err := c.SendReceipt(ctxT(t), dest, []byte(body), hdrs...)
	if err != nil {
		t.Fatalf("SEND %s: %v", dest, err)
	}
	return r
}

func revOf(t *testing.T, r *stomp.Frame) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(r.Get("revision"), 10, 64)
	if err != nil {
		t.Fatalf("RECEIPT without revision: %v", r.Headers)
	}
	return n
}

func TestKV_PutCASDeleteRevisions(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	r1 := kvPut(t, c, "/kv/config.site1.db", "host=a", hdr("content-type", "text/plain"))
	r2 := kvPut(t, c, "/kv/config.site1.web", "port=80")
	if revOf(t, r1) != 1 || revOf(t, r2) != 2 {
		t.Fatalf("revisions %v %v, want 1 2", r1.Headers, r2.Headers)
	}
	// Another bucket counts on its own.
	if r := kvPut(t, c, "/kv/other.x", "1"); revOf(t, r) != 1 {
		t.Fatalf("first revision of bucket other: %v", r.Headers)
	}
	// Compare-and-set: right revision applies, stale one is a conflict
	// RECEIPT carrying the current revision and no revision header.
	if r := kvPut(t, c, "/kv/config.site1.db", "host=b", hdr("if-revision", "1")); revOf(t, r) != 3 {
		t.Fatalf("CAS at 1: %v", r.Headers)
	}
	r := kvPut(t, c, "/kv/config.site1.db", "host=c", hdr("if-revision", "1"))
	if r.Get("kv-conflict") != "3" || r.Get("revision") != "" {
		t.Fatalf("stale CAS answered %v, want kv-conflict:3 and no revision", r.Headers)
	}
	// Create-only.
	if r := kvPut(t, c, "/kv/config.site1.db", "x", hdr("if-revision", "0")); r.Get("kv-conflict") != "3" {
		t.Fatalf("create-only on an existing key: %v", r.Headers)
	}
	if r := kvPut(t, c, "/kv/config.site2.db", "x", hdr("if-revision", "0")); revOf(t, r) != 4 {
		t.Fatalf("create-only on a new key: %v", r.Headers)
	}
	// Delete, then delete again (nothing to do).
	if r := kvPut(t, c, "/kv/config.site2.db", "", hdr("kv-operation", "DEL")); revOf(t, r) != 5 {
		t.Fatalf("delete: %v", r.Headers)
	}
	if r := kvPut(t, c, "/kv/config.site2.db", "", hdr("kv-operation", "DEL")); r.Get("kv-noop") != "true" || r.Get("revision") != "" {
		t.Fatalf("delete of a missing key: %v", r.Headers)
	}
	// The connection survived the conflicts.
	if r := kvPut(t, c, "/kv/config.site1.web", "port=81"); revOf(t, r) != 6 {
		t.Fatalf("after conflicts: %v", r.Headers)
	}

	// Every receipted revision survives a restart; revisions go on from
	// the last (the delete's included), never reused.
	tb.Restart()
	c = tb.Dial(t)
	get, err := c.SubscribeReceipt(ctxT(t), "/kv/config.>", "auto", hdr("kv-get", "true"))
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, get)
	if m.Get("destination") != "/kv/config.site1.db" || string(m.Body) != "host=b" || m.Get("revision") != "3" || m.Get("content-type") != "" || m.Get("kv-snapshot") != "true" {
		t.Fatalf("first snapshot value after restart: %v %q", m.Headers, m.Body)
	}
	m = recv(t, get)
	if m.Get("destination") != "/kv/config.site1.web" || string(m.Body) != "port=81" || m.Get("revision") != "6" {
		t.Fatalf("second: %v %q", m.Headers, m.Body)
	}
	if m = recv(t, get); m.Get("kv-snapshot-complete") != "6" {
		t.Fatalf("marker: %v", m.Headers)
	}
	if r := kvPut(t, c, "/kv/config.site3.x", "new"); revOf(t, r) != 7 {
		t.Fatalf("first revision after restart: %v (want 7)", r.Headers)
	}
	expectNone(t, get, 100e6) // kv-get: no live changes
	if err := get.Unsubscribe(ctxT(t)); err != nil {
		t.Fatalf("UNSUBSCRIBE of a kv-get subscription: %v", err)
	}
	// The content type set with a value comes back with it.
	kvPut(t, c, "/kv/config.ct", "{}", hdr("content-type", "application/json"))
	g2, _ := c.SubscribeReceipt(ctxT(t), "/kv/config.ct", "auto", hdr("kv-get", "true"))
	if m := recv(t, g2); m.Get("content-type") != "application/json" || string(m.Body) != "{}" {
		t.Fatalf("content type: %v", m.Headers)
	}
}

// A conflict without a receipt header cannot be answered by a RECEIPT:
// it is an ERROR, and nothing is stored.
func TestKV_ConflictWithoutReceiptIsError(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	kvPut(t, c, "/kv/b.k", "v1")
	if err := c.Send("/kv/b.k", []byte("v2"), hdr("if-revision", "7")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-c.Errors():
		if e.Get("message") != "revision conflict" || !strings.Contains(string(e.Body), "at revision 1, not 7") {
			t.Fatalf("ERROR %v %q", e.Headers, e.Body)
		}
	case <-c.Done():
		t.Fatal("closed without an ERROR")
	}
	c2 := tb.Dial(t)
	s, _ := c2.SubscribeReceipt(ctxT(t), "/kv/b.k", "auto", hdr("kv-get", "true"))
	if m := recv(t, s); string(m.Body) != "v1" {
		t.Fatalf("value after refused CAS: %q", m.Body)
	}
}

func TestKV_LimitsAndBadInput(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.KV.MaxValueBytes = 10
		c.KV.MaxBuckets = 2
		c.KV.Bucket = []appliance.KVBucketConfig{{Name: "small", MaxKeys: 1}}
	})
	for _, tc := range []struct {
		dest, body string
		hdrs       []stomp.Header
		msg, want  string
	}{
		{"/kv/b.k", "12345678901", nil, "value not stored", "kv max_value_bytes"},
		{"/kv/small.b", "x", nil, "value not stored", "kv.bucket[0] (small) or kv max_keys"},
		{"/kv/third.a", "x", nil, "value not stored", "kv.max_buckets"},
		{"/kv/b.k", "x", []stomp.Header{hdr("if-revision", "-1")}, "invalid if-revision", "revision number"},
		{"/kv/b.k", "x", []stomp.Header{hdr("kv-operation", "PURGE")}, "invalid kv-operation", "PUT"},
		{"/kv/b.k", "x", []stomp.Header{hdr("transaction", "t1"), hdr("kv-ttl", "5d")}, "invalid kv-ttl", "kv-ttl must be"},
		{"/kv/b.k", "x", []stomp.Header{hdr("kv-ttl", "0")}, "invalid kv-ttl", "positive whole number"},
		{"/kv/b.k", "x", []stomp.Header{hdr("if-fence", "deploy")}, "invalid if-fence", "LOCKNAME:TOKEN"},
		{"/kv/b.k", "x", []stomp.Header{hdr("if-fence", "deploy:3")}, "fenced", "never given"},
		{"/kv/b.*", "x", nil, "invalid destination", "only allowed in SUBSCRIBE"},
		{"/kv/b", "x", nil, "invalid destination", "/kv/BUCKET.KEY"},
		{"/kv/b!.k", "x", nil, "invalid destination", "bucket name"},
	} {
		c := tb.Dial(t)
		kvPut(t, c, "/kv/small.a", "x") // fills small (1 key); 2 buckets with b
		kvPut(t, c, "/kv/b.first", "x")
		if tc.hdrs != nil && tc.hdrs[0].Key == "transaction" {
			c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "t1"))
		}
		_, err := c.SendReceipt(ctxT(t), tc.dest, []byte(tc.body), tc.hdrs...)
		var se *client.ServerError
		if !errors.As(err, &se) || se.Frame.Get("message") != tc.msg || !strings.Contains(string(se.Frame.Body), tc.want) {
			t.Errorf("%s %v: got %v, want ERROR %q naming %q", tc.dest, tc.hdrs, err, tc.msg, tc.want)
		}
	}
	// Watches are ack auto.
	c := tb.Dial(t)
	if _, err := c.SubscribeReceipt(ctxT(t), "/kv/b.>", "client"); err == nil || !strings.Contains(err.Error(), "ack auto") {
		t.Errorf("client-ack watch: %v", err)
	}
}

// watchState replays a watch: the snapshot up to the marker, then live
// changes; it checks the markings and the revision order as it goes.
type watchState struct {
	vals    map[string]string
	revs    map[string]uint64
	marker  uint64
	last    uint64
	live    int
	snapEnd bool
}

func (w *watchState) apply(t *testing.T, m *stomp.Frame) {
	t.Helper()
	if v := m.Get("kv-snapshot-complete"); v != "" {
		if w.snapEnd {
			t.Fatalf("second marker %v", m.Headers)
		}
		w.marker, _ = strconv.ParseUint(v, 10, 64)
		w.snapEnd, w.last = true, w.marker
		return
	}
	rev, err := strconv.ParseUint(m.Get("revision"), 10, 64)
	if err != nil {
		t.Fatalf("MESSAGE without revision: %v", m.Headers)
	}
	snap := m.Get("kv-snapshot") == "true"
	if snap == w.snapEnd {
		t.Fatalf("kv-snapshot:%v on a message %s the marker: %v", snap, map[bool]string{true: "after", false: "before"}[w.snapEnd], m.Headers)
	}
	key := strings.TrimPrefix(m.Get("destination"), "/kv/")
	if !snap {
		if rev <= w.last {
			t.Fatalf("live revision %d after %d: duplicate or out of order", rev, w.last)
		}
		w.last = rev
		w.live++
	}
	if m.Get("kv-operation") == "DEL" {
		delete(w.vals, key)
		delete(w.revs, key)
		return
	}
	w.vals[key], w.revs[key] = string(m.Body), rev
}

// Watchers subscribing while writers race them: snapshot + changes replay
// to exactly the final state, with every revision after the marker seen
// once (no gap: the writers' receipted revisions of matching keys are all
// there; no duplicate: strictly increasing).
func TestKV_WatchNoGapUnderConcurrentWrites(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const writers, perWriter, watchers = 3, 60, 6
	setup := tb.Dial(t)
	for i := 0; i < 5; i++ {
		kvPut(t, setup, fmt.Sprintf("/kv/config.site1.k%d", i), "init")
		kvPut(t, setup, fmt.Sprintf("/kv/config.site2.k%d", i), "init")
	}
	type change struct {
		key string
		rev uint64
		del bool
		val string
	}
	var mu sync.Mutex
	var committed []change
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := 0; w < writers; w++ {
		c := tb.Dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < perWriter; i++ {
				site := 1 + (i+w)%2
				key := fmt.Sprintf("config.site%d.k%d", site, (i*7+w)%6)
				val := fmt.Sprintf("w%d-%d", w, i)
				var hdrs []stomp.Header
				del := i%5 == 4
				if del {
					hdrs = append(hdrs, hdr("kv-operation", "DEL"))
				}
				r, err := c.SendReceipt(ctxT(t), "/kv/"+key, []byte(val), hdrs...)
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				if r.Get("kv-noop") == "true" {
					continue
				}
				rev, _ := strconv.ParseUint(r.Get("revision"), 10, 64)
				mu.Lock()
				committed = append(committed, change{key, rev, del, val})
				mu.Unlock()
			}
		}()
	}
	subs := make([]*client.Subscription, watchers)
	close(start)
	for i := range subs {
		c := tb.Dial(t)
		s, err := c.SubscribeReceipt(ctxT(t), "/kv/config.site1.>", "auto")
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = s
	}
	wg.Wait()
	// The final state and the revisions, from the receipts.
	final := map[string]string{}
	var lastRev uint64
	mu.Lock()
	byRev := map[uint64]change{}
	for _, ch := range committed {
		if _, dup := byRev[ch.rev]; dup {
			t.Fatalf("revision %d receipted twice", ch.rev)
		}
		byRev[ch.rev] = ch
		lastRev = max(lastRev, ch.rev)
	}
	mu.Unlock()
	for rev := uint64(11); rev <= lastRev; rev++ {
		ch, ok := byRev[rev]
		if !ok {
			t.Fatalf("revision %d missing from the receipts (gap)", rev)
		}
		if !strings.HasPrefix(ch.key, "config.site1.") {
			continue
		}
		if ch.del {
			delete(final, ch.key)
		} else {
			final[ch.key] = ch.val
		}
	}
	var markers []uint64
	defer func() { t.Logf("snapshot markers of the watchers: %v (last revision %d)", markers, lastRev) }()
	for i, s := range subs {
		w := &watchState{vals: map[string]string{}, revs: map[string]uint64{}}
		// Read until the watcher has seen the last matching revision.
		var lastMatching uint64
		for rev := lastRev; rev > 10; rev-- {
			if strings.HasPrefix(byRev[rev].key, "config.site1.") {
				lastMatching = rev
				break
			}
		}
		for !w.snapEnd || w.last < lastMatching {
			w.apply(t, recv(t, s))
		}
		expectNone(t, s, 50e6)
		// Every matching revision after the marker was delivered.
		wantLive := 0
		for rev := w.marker + 1; rev <= lastRev; rev++ {
			if strings.HasPrefix(byRev[rev].key, "config.site1.") {
				wantLive++
			}
		}
		if w.live != wantLive {
			t.Errorf("watcher from revision %d saw %d live changes, want %d", w.marker, w.live, wantLive)
		}
		// The replay equals the state built from the receipts (keys
		// untouched since the setup keep "init").
		for i := 0; i < 5; i++ {
			k := fmt.Sprintf("config.site1.k%d", i)
			touched := false
			for _, ch := range byRev {
				touched = touched || ch.key == k
			}
			if !touched {
				final[k] = "init"
			}
		}
		markers = append(markers, w.marker)
		if i == len(subs)-1 && (w.marker <= 10 || w.marker >= lastRev) && (markers[0] <= 10 || markers[0] >= lastRev) {
			t.Errorf("no watcher subscribed while the writers wrote (markers %v, writes 11..%d): the race was not exercised", markers, lastRev)
		}
		if fmt.Sprint(w.vals) != fmt.Sprint(final) {
			t.Errorf("watcher from revision %d replays to\n%v\nreceipts say\n%v", w.marker, w.vals, final)
		}
	}
}

func TestKV_Permissions(t *testing.T) {
	tb := authBroker(t, `
[users.reader]
password = "{pw:r}"
read = ["/kv/config.site1.>"]

[users.writer]
password = "{pw:w}"
write = ["/kv/config.>"]

[users.maker]
password = "{pw:m}"
write = ["/kv/config.>"]
create = ["/kv/config.>"]
`, nil)
	dial := func(u, p string) *client.Conn {
		c, err := dialAs(tb.Addr, u, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	denied := func(err error, perm string) bool {
		var se *client.ServerError
		return errors.As(err, &se) && strings.HasPrefix(se.Frame.Get("message"), "permission denied: "+perm+" on /kv/")
	}
	// A key that does not exist needs create.
	if _, err := dial("writer", "w").SendReceipt(ctxT(t), "/kv/config.site1.a", []byte("x")); !denied(err, "create") {
		t.Errorf("writer creating a key: %v", err)
	}
	if r := kvPut(t, dial("maker", "m"), "/kv/config.site1.a", "x"); r.Get("revision") != "1" {
		t.Fatalf("maker: %v", r.Headers)
	}
	// An existing key needs write only.
	if r := kvPut(t, dial("writer", "w"), "/kv/config.site1.a", "y"); r.Get("revision") != "2" {
		t.Fatalf("writer updating: %v", r.Headers)
	}
	if _, err := dial("writer", "w").SendReceipt(ctxT(t), "/kv/other.a", []byte("x")); !denied(err, "write") {
		t.Errorf("writer outside its pattern: %v", err)
	}
	if _, err := dial("reader", "r").SendReceipt(ctxT(t), "/kv/config.site1.a", []byte("x")); !denied(err, "write") {
		t.Errorf("reader writing: %v", err)
	}
	// Reads: within the pattern only (a wider watch is refused).
	rc := dial("reader", "r")
	if _, err := rc.SubscribeReceipt(ctxT(t), "/kv/config.site1.>", "auto"); err != nil {
		t.Errorf("reader watch: %v", err)
	}
	if _, err := dial("reader", "r").SubscribeReceipt(ctxT(t), "/kv/config.>", "auto"); !denied(err, "read") {
		t.Errorf("reader watching more than granted: %v", err)
	}
	if _, err := dial("writer", "w").SubscribeReceipt(ctxT(t), "/kv/config.site1.a", "auto"); !denied(err, "read") {
		t.Errorf("writer reading: %v", err)
	}
}

// A watcher that does not read is disconnected with an ERROR naming
// kv.watch_buffer_bytes once that much waits for it, counted once; writers
// go on.
func TestKV_SlowWatcherDroppedNamingTheSetting(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.KV.WatchBufferBytes = 64 << 10
		c.KV.MaxValueBytes = 64 << 10
	})
	w := dialRaw(t, tb)
	w.connect("1.2")
	w.write("SUBSCRIBE\nid:w\ndestination:/kv/big.>\nreceipt:s\n\n\x00")
	if f := w.frame(); f.Get("kv-snapshot-complete") != "0" {
		t.Fatalf("marker of an empty bucket: %v", f.Headers)
	}
	if f := w.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("want the RECEIPT, got %v", f.Headers)
	}
	c := tb.Dial(t)
	val := strings.Repeat("v", 60<<10)
	// The socket buffers fill first (a few MB), then the output queue.
	for i := 0; i < 400 && tb.B.KVStats().WatchersDropped == 0; i++ {
		kvPut(t, c, "/kv/big.k", val)
	}
	if n := tb.B.KVStats().WatchersDropped; n != 1 {
		t.Fatalf("watchers dropped: %d, want 1", n)
	}
	// Changes right after the drop, while the watch waits for its
	// session's cleanup, count no more drops (they counted and logged one
	// each).
	for i := 0; i < 5; i++ {
		kvPut(t, c, "/kv/big.k", "small")
	}
	if n := tb.B.KVStats().WatchersDropped; n != 1 {
		t.Fatalf("watchers dropped after 5 more changes: %d, want 1 (herald_kv_watchers_dropped_total counts watchers)", n)
	}
	for {
		f := w.frame()
		if f.Command == stomp.CmdError {
			if f.Get("message") != "slow consumer" || !strings.Contains(string(f.Body), "kv.watch_buffer_bytes") {
				t.Fatalf("ERROR %v %q", f.Headers, f.Body)
			}
			break
		}
	}
	w.closed()
	waitFor(t, 5e9, "the watcher to be gone", func() bool { return tb.B.KVStats().Watchers == 0 })
	if r := kvPut(t, c, "/kv/big.k", "after"); r.Get("revision") == "" {
		t.Fatalf("writer after the drop: %v", r.Headers)
	}
}

// kv-history:true reads the kept revisions of one key, oldest first, per
// bucket setting; a delete drops them.
func TestKV_History(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.KV.Bucket = []appliance.KVBucketConfig{{Name: "cfg", History: 3}}
	})
	c := tb.Dial(t)
	for i := 1; i <= 5; i++ {
		kvPut(t, c, "/kv/cfg.a", "v"+strconv.Itoa(i), hdr("content-type", "text/plain"))
		kvPut(t, c, "/kv/plain.a", "v"+strconv.Itoa(i))
	}
	history := func(dest string) (out []string) {
		t.Helper()
		s, err := c.SubscribeReceipt(ctxT(t), dest, "auto", hdr("kv-history", "true"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Unsubscribe(ctxT(t))
		for {
			m := recv(t, s)
			if n := m.Get("kv-history-complete"); n != "" {
				if n != strconv.Itoa(len(out)) {
					t.Fatalf("kv-history-complete:%s after %d", n, len(out))
				}
				return out
			}
			if m.Get("kv-history") != "true" || (strings.HasPrefix(dest, "/kv/cfg") && m.Get("content-type") != "text/plain") {
				t.Fatalf("history message %v", m.Headers)
			}
			out = append(out, m.Get("revision")+":"+string(m.Body))
		}
	}
	if h := strings.Join(history("/kv/cfg.a"), " "); h != "3:v3 4:v4 5:v5" {
		t.Fatalf("history of cfg.a (history 3): %s", h)
	}
	if h := strings.Join(history("/kv/plain.a"), " "); h != "5:v5" {
		t.Fatalf("history of plain.a (default 1): %s", h)
	}
	kvPut(t, c, "/kv/cfg.a", "", hdr("kv-operation", "DEL"))
	if h := history("/kv/cfg.a"); len(h) != 0 {
		t.Fatalf("history after delete: %v", h)
	}
	if _, err := c.SubscribeReceipt(ctxT(t), "/kv/cfg.>", "auto", hdr("kv-history", "true")); err == nil {
		t.Fatal("history of a wildcard accepted")
	}
}
