package appliance_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// grantOf waits for a lock's MESSAGE and returns its token.
func grantOf(t *testing.T, sub *client.Subscription) uint64 {
	t.Helper()
	m := recv(t, sub)
	n, err := strconv.ParseUint(m.Get("lock-token"), 10, 64)
	if err != nil || m.Get("lock-name") == "" || !strings.HasPrefix(m.Get("destination"), "/lock/") {
		t.Fatalf("lock MESSAGE without a token: %v", m.Headers)
	}
	return n
}

// Waiters are served in the order they asked; a lock is given back by
// UNSUBSCRIBE or by the end of the connection; each grant's token is one
// above the last.
func TestLock_FIFOAndRelease(t *testing.T) {
	tb := mustStartBroker(t, nil)
	var conns []*client.Conn
	var subs []*client.Subscription
	for i := 0; i < 5; i++ {
		c := tb.Dial(t)
		sub, err := c.SubscribeReceipt(ctxT(t), "/lock/deploy", "auto")
		if err != nil {
			t.Fatal(err)
		}
		conns, subs = append(conns, c), append(subs, sub)
	}
	if tok := grantOf(t, subs[0]); tok != 1 {
		t.Fatalf("first token %d", tok)
	}
	for i := 1; i < 5; i++ {
		for j := i; j < 5; j++ {
			expectNone(t, subs[j], 30*time.Millisecond) // mutual exclusion
		}
		// Give it back: UNSUBSCRIBE, or the connection's end.
		if i%2 == 0 {
			conns[i-1].Close()
		} else if err := subs[i-1].Unsubscribe(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if tok := grantOf(t, subs[i]); tok != uint64(i+1) {
			t.Fatalf("grant %d: token %d", i, tok)
		}
	}
	// A waiter that leaves the queue is skipped.
	c1, c2 := tb.Dial(t), tb.Dial(t)
	s1, _ := c1.SubscribeReceipt(ctxT(t), "/lock/deploy", "auto")
	s2, _ := c2.SubscribeReceipt(ctxT(t), "/lock/deploy", "auto")
	s1.Unsubscribe(ctxT(t))
	conns[4].Close()
	if tok := grantOf(t, s2); tok != 6 {
		t.Fatalf("after a waiter left: token %d, want 6", tok)
	}
	expectNone(t, s1, 30*time.Millisecond)
	if st := tb.B.LockStats(); st.Names != 1 || st.Grants != 6 {
		t.Errorf("LockStats %+v", st)
	}
}

// Several clients loop taking the lock: never two in the critical section,
// and the tokens seen inside it strictly grow; each holder's fenced write
// passes.
func TestLock_MutualExclusionUnderContention(t *testing.T) {
	tb := mustStartBroker(t, nil)
	var inside atomic.Int32
	var mu sync.Mutex
	var last uint64
	var tokens []uint64
	var wg sync.WaitGroup
	for w := 0; w < 5; w++ {
		c := tb.Dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				sub, err := c.SubscribeReceipt(ctxT(t), "/lock/crit", "auto")
				if err != nil {
					t.Error(err)
					return
				}
				var tok uint64
				select {
				case m := <-sub.C():
					tok, _ = strconv.ParseUint(m.Get("lock-token"), 10, 64)
				case <-time.After(20 * time.Second):
					t.Error("no grant in 20s")
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				if tok <= last {
					t.Errorf("token %d after %d", tok, last)
				}
				last = tok
				tokens = append(tokens, tok)
				mu.Unlock()
				r, err := c.SendReceipt(ctxT(t), "/kv/c.counter", []byte(fmt.Sprint(tok)), hdr("if-fence", "crit:"+strconv.FormatUint(tok, 10)))
				if err != nil || r.Get("revision") == "" {
					t.Errorf("holder's fenced write: %v %v", r, err)
				}
				inside.Add(-1)
				if err := sub.Unsubscribe(ctxT(t)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != 50 || tokens[49] != 50 {
		t.Errorf("%d grants, last token %v", len(tokens), tokens[len(tokens)-1])
	}
}

// Fencing: a write with the token of a holder that lost the lock is
// refused; the new holder's passes; tokens go on above the last one after
// a restart.
func TestLock_StaleFenceRefusedAndTokensSurviveRestart(t *testing.T) {
	tb := mustStartBroker(t, nil)
	a, b := tb.Dial(t), tb.Dial(t)
	sa, _ := a.SubscribeReceipt(ctxT(t), "/lock/site1.config", "auto")
	ta := grantOf(t, sa)
	sb, _ := b.SubscribeReceipt(ctxT(t), "/lock/site1.config", "auto")
	fenceA := hdr("if-fence", "site1.config:"+strconv.FormatUint(ta, 10))
	if r := kvPut(t, a, "/kv/config.site1.db", "a", fenceA); r.Get("revision") != "1" {
		t.Fatalf("holder's write: %v", r.Headers)
	}
	a.Close() // a's lease ends; b gets the lock
	tbk := grantOf(t, sb)
	if tbk != ta+1 {
		t.Fatalf("token %d after %d", tbk, ta)
	}
	// a's work, late, through another connection: refused.
	late := tb.Dial(t)
	_, err := late.SendReceipt(ctxT(t), "/kv/config.site1.db", []byte("stale"), fenceA)
	var se *client.ServerError
	if !errors.As(err, &se) || se.Frame.Get("message") != "fenced" || !strings.Contains(string(se.Frame.Body), "is stale") {
		t.Fatalf("stale fenced write: %v", err)
	}
	// In a transaction too.
	late = tb.Dial(t)
	if _, err := kvTxn(t, late, "x", "stale", []string{"config.site1.db"}, fenceA); !errors.As(err, &se) || se.Frame.Get("message") != "fenced" {
		t.Fatalf("stale fenced transaction: %v", err)
	}
	if r := kvPut(t, b, "/kv/config.site1.db", "b", hdr("if-fence", "site1.config:"+strconv.FormatUint(tbk, 10))); r.Get("revision") != "2" {
		t.Fatalf("new holder's write: %v", r.Headers)
	}
	if st := tb.B.LockStats(); st.Fenced != 2 {
		t.Errorf("LockStats.Fenced %d, want 2", st.Fenced)
	}
	// After a restart the lock is free; its holder's token no longer
	// passes, and the next token is above every one given.
	tb.Restart()
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), "/kv/config.site1.db", []byte("x"), hdr("if-fence", "site1.config:"+strconv.FormatUint(tbk, 10))); !errors.As(err, &se) || se.Frame.Get("message") != "fenced" {
		t.Fatalf("token of a holder from before the restart: %v", err)
	}
	c = tb.Dial(t)
	s, _ := c.SubscribeReceipt(ctxT(t), "/lock/site1.config", "auto")
	if tok := grantOf(t, s); tok != tbk+1 {
		t.Fatalf("first token after restart %d, last before %d", tok, tbk)
	}
}

// The connection is the lease: a holder that stops sending heart-beats
// loses the lock to the next waiter.
func TestLock_HeartbeatTimeoutReleases(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Stomp.HeartbeatReceive = appliance.Duration{Duration: 100 * time.Millisecond}
	})
	r := dialRaw(t, tb)
	r.write("CONNECT\naccept-version:1.2\nhost:test\nheart-beat:100,0\n\n\x00")
	if f := r.frame(); f.Command != "CONNECTED" {
		t.Fatalf("%v", f)
	}
	r.write("SUBSCRIBE\nid:1\ndestination:/lock/hb\nreceipt:r1\n\n\x00")
	if f := r.frame(); f.Command != "RECEIPT" || f.Get("lock-waiters") != "0" {
		t.Fatalf("raw holder's RECEIPT: %v", f.Headers)
	}
	if f := r.frame(); f.Get("lock-token") != "1" {
		t.Fatalf("raw holder: %v", f.Headers)
	}
	r2 := dialRaw(t, tb)
	r2.connect("1.2")
	r2.write("SUBSCRIBE\nid:1\ndestination:/lock/hb\nreceipt:r2\n\n\x00")
	if f := r2.frame(); f.Command != "RECEIPT" || f.Get("lock-waiters") != "1" {
		t.Fatalf("waiter's RECEIPT: %v", f.Headers)
	}
	c := tb.Dial(t)
	s, _ := c.SubscribeReceipt(ctxT(t), "/lock/hb", "auto")
	start := time.Now()
	// The raw client sends nothing more.
	if f := r2.frame(); f.Get("lock-token") != "2" {
		t.Fatalf("first waiter: %v", f.Headers)
	}
	r2.c.Close()
	if tok := grantOf(t, s); tok != 3 {
		t.Fatalf("token %d", tok)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("lock passed after %v, before the heart-beat timeout", d)
	}
}

func TestLock_PermissionsAndBadInput(t *testing.T) {
	tb := authBroker(t, `
[users.op]
password = "{pw:o}"
write = ["/lock/site1.>"]
read = ["/lock/>"]
`, nil)
	c, err := dialAs(tb.Addr, "op", "o")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.SubscribeReceipt(ctxT(t), "/lock/site1.deploy", "auto"); err != nil {
		t.Fatalf("write on the lock's name: %v", err)
	}
	var se *client.ServerError
	if _, err := c.SubscribeReceipt(ctxT(t), "/lock/site2.deploy", "auto"); !errors.As(err, &se) || se.Frame.Get("message") != "permission denied: write on /lock/site2.deploy" {
		t.Fatalf("read only on a lock: %v", err)
	}
	open := mustStartBroker(t, nil)
	for _, tc := range []struct{ cmd, dest, want string }{
		{"SUBSCRIBE", "/lock/a.*", "wildcards"},
		{"SUBSCRIBE", "/lock/", "1 to 255 bytes"},
		{"SUBSCRIBE", "/lock/a..b", "empty segment"},
		{"SEND", "/lock/a", "taken with SUBSCRIBE"},
	} {
		c := open.Dial(t)
		var err error
		if tc.cmd == "SEND" {
			_, err = c.SendReceipt(ctxT(t), tc.dest, nil)
		} else {
			_, err = c.SubscribeReceipt(ctxT(t), tc.dest, "auto")
		}
		if !errors.As(err, &se) || !strings.Contains(string(se.Frame.Body), tc.want) {
			t.Errorf("%s %s: %v, want ERROR naming %q", tc.cmd, tc.dest, err, tc.want)
		}
	}
	// Limits name their setting.
	lim := mustStartBroker(t, func(c *appliance.Config) { c.KV.MaxLockNames = 1; c.KV.MaxLockWaiters = 1 })
	a := lim.Dial(t)
	a.SubscribeReceipt(ctxT(t), "/lock/one", "auto")
	lim.Dial(t).SubscribeReceipt(ctxT(t), "/lock/one", "auto")
	if _, err := lim.Dial(t).SubscribeReceipt(ctxT(t), "/lock/one", "auto"); !errors.As(err, &se) || !strings.Contains(string(se.Frame.Body), "kv.max_lock_waiters") {
		t.Errorf("waiter beyond the limit: %v", err)
	}
	if _, err := lim.Dial(t).SubscribeReceipt(ctxT(t), "/lock/two", "auto"); !errors.As(err, &se) || !strings.Contains(string(se.Frame.Body), "kv.max_lock_names") {
		t.Errorf("name beyond the limit: %v", err)
	}
}
