package appliance_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

func bodies(t *testing.T, sub *client.Subscription, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = string(recv(t, sub).Body)
	}
	return out
}

func seq(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out
}

func eq(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestQueue_AckModes(t *testing.T) {
	tb := mustStartBroker(t, nil)
	t.Run("auto", func(t *testing.T) {
		p := tb.Dial(t)
		sendN(t, p, "/queue/auto", 5, "m")
		c := tb.Dial(t)
		sub, _ := c.Subscribe("/queue/auto", "auto")
		eq(t, bodies(t, sub, 5), seq("m", 0, 5))
		c.Disconnect(ctxT(t))
		c2 := tb.Dial(t)
		sub2, _ := c2.Subscribe("/queue/auto", "auto")
		expectNone(t, sub2, 200*time.Millisecond)
	})
	t.Run("client-individual", func(t *testing.T) {
		p := tb.Dial(t)
		sendN(t, p, "/queue/ci", 4, "m")
		c := tb.Dial(t)
		sub, _ := c.Subscribe("/queue/ci", "client-individual")
		ms := make([]*stomp.Frame, 4)
		for i := range ms {
			ms[i] = recv(t, sub)
			if ms[i].Get("ack") == "" || ms[i].Get("delivery-count") != "1" || ms[i].Get("redelivered") != "" {
				t.Fatalf("first delivery headers wrong: %v", ms[i].Headers)
			}
		}
		// Ack 1 and 3 only; 0 and 2 come back after disconnect, in order.
		for _, i := range []int{1, 3} {
			if _, err := c.Request(ctxT(t), stomp.NewFrame("ACK", "id", ms[i].Get("ack"))); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		c2 := tb.Dial(t)
		sub2, _ := c2.Subscribe("/queue/ci", "client-individual")
		for _, want := range []string{"m0", "m2"} {
			m := recv(t, sub2)
			if string(m.Body) != want || m.Get("redelivered") != "true" || m.Get("delivery-count") != "2" {
				t.Fatalf("got %q %v, want %s redelivered with delivery-count 2", m.Body, m.Headers, want)
			}
			c2.Ack(m)
		}
		expectNone(t, sub2, 200*time.Millisecond)
	})
	// README guarantee 4: a NACKed message, once its back-off is over, and
	// an abandoned one go back to their original position, ahead of every
	// later message and behind every earlier one still queued.
	t.Run("NACKed and abandoned keep their position", func(t *testing.T) {
		p := tb.Dial(t)
		sendN(t, p, "/queue/pos", 10, "m")
		c := tb.Dial(t)
		sub, _ := c.Subscribe("/queue/pos", "client-individual", hdr("prefetch-count", "4"))
		ms := map[string]*stomp.Frame{}
		for _, want := range seq("m", 0, 4) {
			ms[want] = recv(t, sub)
			wantMsg(t, ms[want], want, 1)
		}
		// ACK m0: its credit brings m4.
		ackNow(t, c, "ACK", ms["m0"])
		ms["m4"] = recv(t, sub)
		wantMsg(t, ms["m4"], "m4", 1)
		// NACK m2 while m1, m3, m4 stay held: m2 waits out its back-off,
		// and the credit goes to m5 meanwhile.
		ackNow(t, c, "NACK", ms["m2"])
		ms["m5"] = recv(t, sub)
		wantMsg(t, ms["m5"], "m5", 1)
		// Back-off over: m2 is ready again, with no credit to take it.
		waitQueue(t, tb, "pos", "m2 out of back-off (delayed 0, ready 5: m2, m6..m9)", func(v appliance.QueueView) bool {
			return v.Delayed == 0 && v.Ready == 5
		})
		// ACK m4: the credit goes to the first ready message, m2, not m6.
		ackNow(t, c, "ACK", ms["m4"])
		wantMsg(t, recv(t, sub), "m2", 2)
		// Disconnect holding m1, m3, m5 and m2: all four go back, each to
		// its own place among m6..m9.
		c.Close()
		waitQueue(t, tb, "pos", "the closed consumer's 4 messages released (in flight 0, consumers 0, ready 8)", func(v appliance.QueueView) bool {
			return v.InFlight == 0 && v.Consumers == 0 && v.Ready == 8
		})
		c2 := tb.Dial(t)
		sub2, _ := c2.Subscribe("/queue/pos", "client-individual", hdr("prefetch-count", "100"))
		for _, w := range []struct {
			body  string
			count int
		}{{"m1", 2}, {"m2", 3}, {"m3", 2}, {"m5", 2}, {"m6", 1}, {"m7", 1}, {"m8", 1}, {"m9", 1}} {
			wantMsg(t, recv(t, sub2), w.body, w.count)
		}
		// Proves absence: nothing else (m0 and m4 were acked) within 200ms.
		expectNone(t, sub2, 200*time.Millisecond)
	})
	t.Run("client cumulative", func(t *testing.T) {
		p := tb.Dial(t)
		sendN(t, p, "/queue/cum", 5, "m")
		c := tb.Dial(t)
		sub, _ := c.Subscribe("/queue/cum", "client")
		ms := []*stomp.Frame{}
		for i := 0; i < 5; i++ {
			ms = append(ms, recv(t, sub))
		}
		if _, err := c.Request(ctxT(t), stomp.NewFrame("ACK", "id", ms[2].Get("ack"))); err != nil {
			t.Fatal(err)
		}
		c.Close()
		c2 := tb.Dial(t)
		sub2, _ := c2.Subscribe("/queue/cum", "client")
		eq(t, bodies(t, sub2, 2), []string{"m3", "m4"})
		expectNone(t, sub2, 200*time.Millisecond)
	})
	t.Run("1.1 ack form", func(t *testing.T) {
		p := tb.Dial(t)
		sendN(t, p, "/queue/v11", 2, "m")
		c := tb.Dial(t, func(o *client.Options) { o.AcceptVersion = "1.1" })
		sub, _ := c.Subscribe("/queue/v11", "client-individual")
		m0, m1 := recv(t, sub), recv(t, sub)
		f := stomp.NewFrame("ACK", "message-id", m0.Get("message-id"), "subscription", m0.Get("subscription"))
		if _, err := c.Request(ctxT(t), f); err != nil {
			t.Fatal(err)
		}
		f = stomp.NewFrame("NACK", "message-id", m1.Get("message-id"), "subscription", m1.Get("subscription"))
		if _, err := c.Request(ctxT(t), f); err != nil {
			t.Fatal(err)
		}
		m := recv(t, sub)
		if string(m.Body) != "m1" || m.Get("redelivered") != "true" {
			t.Fatalf("got %q %v, want m1 redelivered", m.Body, m.Headers)
		}
	})
}

// TestQueue_NackRedeliversInOrder: a NACKed message comes back after its
// back-off, marked redelivered with its delivery count, at its original
// place: after the message that took its credit during the back-off, before
// every later one.
func TestQueue_NackRedeliversInOrder(t *testing.T) {
	const minDelay = 300 * time.Millisecond
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.RedeliveryMin = appliance.Duration{Duration: minDelay}
		c.Queues.RedeliveryMax = appliance.Duration{Duration: 2 * minDelay}
	})
	p := tb.Dial(t)
	sendN(t, p, "/queue/nack", 3, "m")
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/nack", "client-individual", hdr("prefetch-count", "1"))
	m0 := recv(t, sub)
	wantMsg(t, m0, "m0", 1)
	nacked := time.Now()
	ackNow(t, c, "NACK", m0)
	// In back-off: not ready, and the credit goes to m1.
	if v, _ := tb.B.Queue("nack"); v.Delayed != 1 {
		t.Fatalf("right after NACK: got %d delayed, want 1 (m0 in back-off)", v.Delayed)
	}
	m1 := recv(t, sub)
	wantMsg(t, m1, "m1", 1)
	// Hold m1 until the back-off is over: m0 is then ready ahead of m2.
	waitQueue(t, tb, "nack", "m0 out of back-off (delayed 0)", func(v appliance.QueueView) bool { return v.Delayed == 0 })
	ackNow(t, c, "ACK", m1)
	m := recv(t, sub)
	wantMsg(t, m, "m0", 2)
	// The back-off is redelivery_delay_min with at most 25% jitter.
	if d, least := time.Since(nacked), minDelay*3/4; d < least {
		t.Fatalf("m0 redelivered %s after its NACK, want at least %s", d, least)
	}
	ackNow(t, c, "ACK", m)
	m = recv(t, sub)
	wantMsg(t, m, "m2", 1)
	ackNow(t, c, "ACK", m)
	if v, _ := tb.B.Queue("nack"); v.Redelivered != 1 || v.Acked != 3 || v.Messages != 0 {
		t.Fatalf("got redelivered_total %d, acked_total %d, messages %d; want 1, 3, 0", v.Redelivered, v.Acked, v.Messages)
	}
}

func TestQueue_Restart(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Journal.Sync = "full" })
	p := tb.Dial(t)
	sendN(t, p, "/queue/durable", 20, "m")
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/durable", "client-individual", hdr("prefetch-count", "5"))
	// Ack the first five (receipted: durable), hold the next five unacked.
	for i := 0; i < 5; i++ {
		m := recv(t, sub)
		if _, err := c.Request(ctxT(t), stomp.NewFrame("ACK", "id", m.Get("ack"))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		recv(t, sub)
	}
	tb.Restart()
	c2 := tb.Dial(t)
	sub2, _ := c2.Subscribe("/queue/durable", "client-individual", hdr("prefetch-count", "100"))
	got := bodies(t, sub2, 15)
	eq(t, got, seq("m", 5, 20))
	expectNone(t, sub2, 200*time.Millisecond)
}

func TestQueue_CompetingConsumers(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const n = 300
	var subs []*client.Subscription
	var conns []*client.Conn
	for i := 0; i < 3; i++ {
		c := tb.Dial(t)
		s, err := c.SubscribeReceipt(ctxT(t), "/queue/work", "client-individual")
		if err != nil {
			t.Fatal(err)
		}
		subs, conns = append(subs, s), append(conns, c)
	}
	p := tb.Dial(t)
	for i := 0; i < n; i++ {
		if err := p.Send("/queue/work", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	per := make([]int, 3)
	lastSeen := make([]int, 3)
	for i := range lastSeen {
		lastSeen[i] = -1
	}
	deadline := time.After(10 * time.Second)
	for len(seen) < n {
		select {
		case m := <-subs[0].C():
			per[0]++
			conns[0].Ack(m)
			seen[string(m.Body)]++
		case m := <-subs[1].C():
			per[1]++
			conns[1].Ack(m)
			seen[string(m.Body)]++
		case m := <-subs[2].C():
			per[2]++
			conns[2].Ack(m)
			seen[string(m.Body)]++
		case <-deadline:
			t.Fatalf("got %d of %d messages", len(seen), n)
		}
	}
	for k, v := range seen {
		if v != 1 {
			t.Fatalf("message %s delivered %d times", k, v)
		}
	}
	for i, c := range per {
		if c == 0 {
			t.Fatalf("consumer %d got nothing: %v", i, per)
		}
	}
}

func TestQueue_KeptWhileNobodyListens(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	sendN(t, p, "/queue/later", 3, "x")
	// Receipted: stored, with nobody to deliver to.
	if v, _ := tb.B.Queue("later"); v.Messages != 3 || v.Ready != 3 || v.Consumers != 0 {
		t.Fatalf("before any subscriber: got messages %d, ready %d, consumers %d; want 3, 3, 0", v.Messages, v.Ready, v.Consumers)
	}
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/later", "auto")
	eq(t, bodies(t, sub, 3), seq("x", 0, 3))
}

func TestQueue_Transactions(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	for _, f := range []*stomp.Frame{
		stomp.NewFrame("BEGIN", "transaction", "t1"),
		stomp.NewFrame("SEND", "destination", "/queue/tx", "transaction", "t1"),
		stomp.NewFrame("SEND", "destination", "/queue/tx", "transaction", "t1"),
	} {
		f.Body = []byte("in-t1")
		if _, err := c.Request(ctxT(t), f); err != nil {
			t.Fatal(err)
		}
	}
	cons := tb.Dial(t)
	sub, _ := cons.Subscribe("/queue/tx", "client-individual")
	expectNone(t, sub, 150*time.Millisecond) // not visible before COMMIT
	if _, err := c.Request(ctxT(t), stomp.NewFrame("COMMIT", "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	m1, m2 := recv(t, sub), recv(t, sub)
	// Abort: nothing of t2 lands; its ACK is not applied.
	c.Request(ctxT(t), stomp.NewFrame("BEGIN", "transaction", "t2"))
	c.Request(ctxT(t), &stomp.Frame{Command: "SEND", Headers: stomp.Headers{hdr("destination", "/queue/tx"), hdr("transaction", "t2")}, Body: []byte("aborted")})
	if _, err := c.Request(ctxT(t), stomp.NewFrame("ABORT", "transaction", "t2")); err != nil {
		t.Fatal(err)
	}
	// ACKs in a transaction are applied at COMMIT.
	cons.Request(ctxT(t), stomp.NewFrame("BEGIN", "transaction", "a"))
	cons.Request(ctxT(t), stomp.NewFrame("ACK", "id", m1.Get("ack"), "transaction", "a"))
	cons.Request(ctxT(t), stomp.NewFrame("ACK", "id", m2.Get("ack"), "transaction", "a"))
	if _, err := cons.Request(ctxT(t), stomp.NewFrame("COMMIT", "transaction", "a")); err != nil {
		t.Fatal(err)
	}
	cons.Close()
	c3 := tb.Dial(t)
	sub3, _ := c3.Subscribe("/queue/tx", "auto")
	expectNone(t, sub3, 200*time.Millisecond)
}

func TestQueue_DeadLetterAfterMaxDeliveries(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.MaxDeliveries = 3
		c.Queues.RedeliveryMin = appliance.Duration{Duration: time.Millisecond}
		c.Queues.RedeliveryMax = appliance.Duration{Duration: 5 * time.Millisecond}
	})
	p := tb.Dial(t)
	sendN(t, p, "/queue/poison", 1, "bad")
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/poison", "client-individual")
	for i := 1; i <= 3; i++ {
		m := recv(t, sub)
		if m.Get("delivery-count") != strconv.Itoa(i) {
			t.Fatalf("delivery %d has delivery-count %s", i, m.Get("delivery-count"))
		}
		c.Nack(m)
	}
	expectNone(t, sub, 100*time.Millisecond)
	dsub, _ := c.Subscribe("/queue/DLQ.poison", "auto")
	m := recv(t, dsub)
	if string(m.Body) != "bad0" || m.Get("dlq-reason") != "max-deliveries" || m.Get("dlq-original-destination") != "/queue/poison" || m.Get("dlq-delivery-count") != "3" {
		t.Fatalf("DLQ message %q %v", m.Body, m.Headers)
	}
	t.Run("requeue false", func(t *testing.T) {
		sendN(t, p, "/queue/rq", 1, "x")
		s, _ := c.Subscribe("/queue/rq", "client-individual")
		m := recv(t, s)
		c.Nack(m, hdr("requeue", "false"))
		ds, _ := c.Subscribe("/queue/DLQ.rq", "auto")
		if d := recv(t, ds); d.Get("dlq-reason") != "nack" {
			t.Fatalf("reason %q, want nack", d.Get("dlq-reason"))
		}
	})
}

func TestQueue_Dedup(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	for i, alias := range []string{"dedup-id", "_AMQ_DUPL_ID", "Nats-Msg-Id", "dedup-id"} {
		r, err := p.SendReceipt(ctxT(t), "/queue/dd", []byte(fmt.Sprint(i)), hdr(alias, "vote-42"))
		if err != nil {
			t.Fatal(err)
		}
		if dup := r.Get("duplicate") == "true"; dup != (i > 0) {
			t.Fatalf("send %d: duplicate=%v", i, dup)
		}
	}
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/dd", "auto")
	eq(t, bodies(t, sub, 1), []string{"0"})
	expectNone(t, sub, 150*time.Millisecond)
}

// TestQueue_DeleteForgetsDedupIds: a queue delete forgets the queue's
// dedup ids, as it does its messages: a new queue of the name (a temporary
// queue's name comes again in a later run) takes a message with an id the
// deleted one had seen, and remembers it from then on, across a restart.
func TestQueue_DeleteForgetsDedupIds(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	send := func(body string) bool {
		t.Helper()
		r, err := p.SendReceipt(ctxT(t), "/queue/ddel", []byte(body), hdr("dedup-id", "job-1"))
		if err != nil {
			t.Fatal(err)
		}
		return r.Get("duplicate") == "true"
	}
	if send("old") || !send("old again") {
		t.Fatal("before the delete: want the first send stored, the second a duplicate")
	}
	if _, err := tb.B.DeleteQueue(ctxT(t), "ddel"); err != nil {
		t.Fatal(err)
	}
	if send("new") {
		t.Fatal("after the delete: job-1 is still a duplicate; the deleted queue's dedup ids were kept")
	}
	p.Close()
	tb.Restart()
	p = tb.Dial(t)
	if !send("new again") {
		t.Fatal("after a restart: job-1 of the new queue is forgotten")
	}
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/ddel", "auto")
	eq(t, bodies(t, sub, 1), []string{"new"})
	expectNone(t, sub, 150*time.Millisecond)
}

// TestQueue_StaleAckIgnored: an ACK or NACK carrying the token of an older
// delivery attempt is ignored (RECEIPT, no ERROR), never applied to the
// current attempt, and counted: exactly once per stale frame, on the queue
// and broker-wide.
func TestQueue_StaleAckIgnored(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	sendN(t, p, "/queue/stale", 1, "s")
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/stale", "client-individual", hdr("ack-timeout", "100"))
	m1 := recv(t, sub)
	wantMsg(t, m1, "s0", 1)
	// Held past the ack timeout: it comes back as a new attempt. (It may
	// time out again while the test runs: each new attempt goes to the
	// same, only, subscription, so the first token stays stale.)
	m2 := recv(t, sub)
	if m1.Get("ack") == m2.Get("ack") {
		t.Fatalf("redelivery after timeout reuses ack token %q, want a new one", m1.Get("ack"))
	}
	wantMsg(t, m2, "s0", 2)
	qBefore, _ := tb.B.Queue("stale")
	if qBefore.AckTimeouts < 1 {
		t.Fatalf("got ack_timeouts_total %d after a redelivery by ack timeout, want at least 1", qBefore.AckTimeouts)
	}
	before := tb.B.Stats().StaleAcks
	// The first attempt's token, as ACK and as NACK: both stale for the
	// queue. An ACK naming no held message at all: stale broker-wide.
	for _, f := range []*stomp.Frame{
		stomp.NewFrame("ACK", "id", m1.Get("ack")),
		stomp.NewFrame("NACK", "id", m1.Get("ack")),
		stomp.NewFrame("ACK", "id", "999999.1"),
	} {
		if _, err := c.Request(ctxT(t), f); err != nil {
			t.Fatalf("stale %s %s: got %v, want a RECEIPT", f.Command, f.Get("id"), err)
		}
	}
	if got := tb.B.Stats().StaleAcks - before; got != 3 {
		t.Fatalf("broker stale_acks_total rose by %d, want 3 (one per stale frame)", got)
	}
	q, _ := tb.B.Queue("stale")
	if got := q.StaleAcks - qBefore.StaleAcks; got != 2 {
		t.Fatalf("queue stale_acks_total rose by %d, want 2 (the ACK and NACK of the old attempt)", got)
	}
	// Neither was applied: no ack, no NACK back-off, the message is held.
	if q.Acked != 0 || q.Messages != 1 || q.InFlight != 1 || q.Delayed != 0 {
		t.Fatalf("after stale ACK and NACK: got acked %d, messages %d, in flight %d, delayed %d; want 0, 1, 1, 0",
			q.Acked, q.Messages, q.InFlight, q.Delayed)
	}
	c.Close()
	c2 := tb.Dial(t)
	sub2, _ := c2.Subscribe("/queue/stale", "auto")
	if m := recv(t, sub2); string(m.Body) != "s0" {
		t.Fatalf("got %q, want s0", m.Body)
	}
}

func TestQueue_DelayedDelivery(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	start := time.Now()
	if _, err := p.SendReceipt(ctxT(t), "/queue/later2", []byte("late"), hdr("AMQ_SCHEDULED_DELAY", "300")); err != nil {
		t.Fatal(err)
	}
	sendN(t, p, "/queue/later2", 1, "now")
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/later2", "auto")
	if m := recv(t, sub); string(m.Body) != "now0" {
		t.Fatalf("got %q first, want now0", m.Body)
	}
	if m := recv(t, sub); string(m.Body) != "late" || time.Since(start) < 299*time.Millisecond { // ms granularity
		t.Fatalf("got %q after %s, want late after 300ms", m.Body, time.Since(start))
	}
}

func TestQueue_FullPolicies(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MaxMessages = 2; c.Queues.FullPolicy = "reject" })
		p := tb.Dial(t)
		sendN(t, p, "/queue/full", 2, "x")
		_, err := p.SendReceipt(ctxT(t), "/queue/full", []byte("over"))
		if err == nil || !strings.Contains(err.Error(), "queue full") || !strings.Contains(err.Error(), "max_messages=2") {
			t.Fatalf("got %v, want ERROR queue full naming max_messages=2", err)
		}
	})
	t.Run("block", func(t *testing.T) {
		tb := mustStartBroker(t, func(c *appliance.Config) {
			c.Queues.MaxMessages = 2
			c.Queues.BlockTimeout = appliance.Duration{Duration: 5 * time.Second}
		})
		p := tb.Dial(t)
		sendN(t, p, "/queue/blk", 2, "x")
		res, err := p.SendAsync("/queue/blk", []byte("third"))
		if err != nil {
			t.Fatal(err)
		}
		// Proves absence: the third send does not complete within 200ms.
		select {
		case r := <-res:
			t.Fatalf("third send completed while full: %+v", r)
		case <-time.After(200 * time.Millisecond):
		}
		c := tb.Dial(t)
		sub, _ := c.Subscribe("/queue/blk", "client-individual")
		m := recv(t, sub)
		c.Ack(m)
		select {
		case r := <-res:
			if r.Err != nil {
				t.Fatalf("blocked send failed: %v", r.Err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("blocked send not released after space freed")
		}
	})
}
