package appliance_test

import (
	"context"
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

// sendAll pipelines n SENDs with receipts and waits for every receipt.
func sendAll(t *testing.T, c *client.Conn, dest string, n int, body func(i int) string, hdrs ...stomp.Header) {
	t.Helper()
	chs := make([]<-chan client.Result, n)
	for i := range n {
		ch, err := c.SendAsync(dest, []byte(body(i)), hdrs...)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		chs[i] = ch
	}
	for i, ch := range chs {
		select {
		case r := <-ch:
			if r.Err != nil {
				t.Fatalf("send %d: %v", i, r.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no receipt for send %d", i)
		}
	}
}

// assertRecount checks that the broker's counts of every queue equal what
// the journal holds once the broker is quiet. An auto-ack delete may still
// be committing when the test's last MESSAGE arrives (the count drops only
// after the commit), so it compares until both agree, for up to 5 s, and
// fails with the last difference.
func assertRecount(t *testing.T, tb *testBroker) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		diffs := recountDiffs(t, tb)
		if len(diffs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, d := range diffs {
				t.Error(d)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func recountDiffs(t *testing.T, tb *testBroker) []string {
	t.Helper()
	states, err := tb.Store.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inJournal := map[string]appliance.QueueState{}
	for _, st := range states {
		inJournal[st.Name] = st
	}
	var diffs []string
	for _, v := range tb.B.Queues() {
		st := inJournal[v.Name]
		if v.Messages != st.Count || v.Bytes != st.Bytes {
			diffs = append(diffs, fmt.Sprintf("queue %s: broker counts %d messages, %d bytes; journal holds %d, %d", v.Name, v.Messages, v.Bytes, st.Count, st.Bytes))
		}
	}
	return diffs
}

// Delayed messages live outside the ready window: any number of them never
// hides a ready message, before or after a restart.
func TestQueue_DelayedDoNotBlockReady(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MemoryWindow = 50 })
	c := tb.Dial(t)
	sendAll(t, c, "/queue/sched", 500, func(int) string { return "later" }, hdr("AMQ_SCHEDULED_DELAY", "3600000"))
	sendAll(t, c, "/queue/sched", 5, func(i int) string { return "now-" + strconv.Itoa(i) })
	for round := range 2 {
		cc := tb.Dial(t)
		sub, err := cc.SubscribeReceipt(ctxT(t), "/queue/sched", "client-individual", hdr("prefetch-count", "10"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if f := recv(t, sub); string(f.Body) != "now-"+strconv.Itoa(i) {
				t.Fatalf("round %d: got %q, want now-%d", round, f.Body, i)
			}
		}
		if v, _ := tb.B.Queue("sched"); v.Delayed != 500 {
			t.Fatalf("round %d: delayed %d, want 500", round, v.Delayed)
		}
		cc.Close()
		tb.Restart() // the second round reads everything back from the journal
	}
}

// A group whose message is held unacknowledged blocks only itself: other
// groups and ungrouped messages keep flowing, however long the group.
func TestQueue_BlockedGroupDoesNotBlockOthers(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	sendAll(t, c, "/queue/grp", 1, func(int) string { return "g-0" }, hdr("JMSXGroupID", "g"))
	holder := tb.Dial(t)
	hsub, err := holder.SubscribeReceipt(ctxT(t), "/queue/grp", "client-individual", hdr("prefetch-count", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if f := recv(t, hsub); string(f.Body) != "g-0" {
		t.Fatalf("holder got %q, want g-0", f.Body)
	}
	sendAll(t, c, "/queue/grp", 5000, func(i int) string { return "g-" + strconv.Itoa(i+1) }, hdr("JMSXGroupID", "g"))
	sendAll(t, c, "/queue/grp", 5, func(i int) string { return "h-" + strconv.Itoa(i) }, hdr("JMSXGroupID", "h"))
	sendAll(t, c, "/queue/grp", 5, func(i int) string { return "u-" + strconv.Itoa(i) })
	other := tb.Dial(t)
	osub, err := other.SubscribeReceipt(ctxT(t), "/queue/grp", "client-individual", hdr("prefetch-count", "1"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 10 {
		f := recv(t, osub)
		got = append(got, string(f.Body))
		if err := other.Ack(f); err != nil {
			t.Fatal(err)
		}
	}
	// h and u interleave (h-1 waits for h-0's ack to commit), each in order.
	next := map[byte]int{}
	for _, b := range got {
		k, n := b[0], b[2:]
		if k != 'h' && k != 'u' || n != strconv.Itoa(next[k]) {
			t.Fatalf("other consumer got %v: want h-0..h-4 and u-0..u-4, each in order", got)
		}
		next[k]++
	}
	expectNone(t, osub, 200*time.Millisecond) // g stays blocked behind g-0
}

// With no redelivery back-off, a NACKed grouped message is redelivered at
// once and still ahead of the rest of its group.
func TestQueue_NackWithoutBackoffKeepsGroupOrder(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.RedeliveryMin = appliance.Duration{}
		c.Queues.RedeliveryMax = appliance.Duration{}
	})
	c := tb.Dial(t)
	sendAll(t, c, "/queue/g0", 3, func(i int) string { return "m" + strconv.Itoa(i) }, hdr("JMSXGroupID", "g"))
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/g0", "client-individual", hdr("prefetch-count", "10"))
	if err != nil {
		t.Fatal(err)
	}
	f := recv(t, sub)
	if string(f.Body) != "m0" {
		t.Fatalf("got %q, want m0", f.Body)
	}
	if err := c.Nack(f); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"m0", "m1", "m2"} {
		f = recv(t, sub)
		if string(f.Body) != want {
			t.Fatalf("got %q, want %s", f.Body, want)
		}
		if err := c.Ack(f); err != nil {
			t.Fatal(err)
		}
	}
}

// A purge whose journal batch fails changes nothing: every message is
// still delivered.
func TestQueue_FailedPurgeLosesNothing(t *testing.T) {
	tb, fj := startFaulty(t, nil)
	c := tb.Dial(t)
	sendAll(t, c, "/queue/p", 10, func(i int) string { return "m" + strconv.Itoa(i) })
	fj.setFail(func(b *appliance.Batch) bool { return hasOp(b, appliance.OpPurge) })
	if _, err := tb.B.Purge(ctxT(t), "p"); err == nil {
		t.Fatal("purge succeeded with a failing journal")
	}
	fj.setFail(nil)
	if v, _ := tb.B.Queue("p"); v.Messages != 10 || v.Ready != 10 {
		t.Fatalf("after a failed purge: messages %d ready %d, want 10 10", v.Messages, v.Ready)
	}
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/p", "auto")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if f := recv(t, sub); string(f.Body) != "m"+strconv.Itoa(i) {
			t.Fatalf("got %q, want m%d", f.Body, i)
		}
	}
	// A purge that works empties the queue.
	sendAll(t, c, "/queue/p2", 3, func(int) string { return "x" })
	if n, err := tb.B.Purge(ctxT(t), "p2"); err != nil || n != 3 {
		t.Fatalf("purge: %d, %v; want 3, nil", n, err)
	}
	assertRecount(t, tb)
}

// Deletes of auto-acked messages that fail (disk full, read-only) are
// retried after a back-off, not redelivered in a hot loop; the broker says
// the journal is failing until a write succeeds.
func TestQueue_FailedAutoAckBacksOff(t *testing.T) {
	tb, fj := startFaulty(t, nil)
	c := tb.Dial(t)
	sendAll(t, c, "/queue/ro", 10, func(i int) string { return "m" + strconv.Itoa(i) })
	fj.setFail(func(b *appliance.Batch) bool { return hasOp(b, appliance.OpDelete) })
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/ro", "auto")
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	deadline := time.After(1500 * time.Millisecond)
loop:
	for {
		select {
		case <-sub.C():
			frames++
		case <-deadline:
			break loop
		}
	}
	// 10 first deliveries, then retries at 250 ms, 500 ms, 1 s (+ the
	// streak): at most 4 deliveries each in 1.5 s.
	if frames < 10 || frames > 40 {
		t.Fatalf("%d MESSAGE frames for 10 messages in 1.5 s of failing deletes, want 10..40", frames)
	}
	if ok, _ := tb.B.JournalHealthy(); ok {
		t.Fatal("journal reported healthy while every delete fails")
	}
	fj.setFail(nil)
	waitFor(t, 10*time.Second, "queue empty after the journal recovers", func() bool {
		v, _ := tb.B.Queue("ro")
		return v.Messages == 0
	})
	if ok, _ := tb.B.JournalHealthy(); !ok {
		t.Fatal("journal still reported failing after writes succeed")
	}
	assertRecount(t, tb)
}

// blockingSink is a topic sink (a rate-limited multicast channel) that
// blocks in Publish until released.
type blockingSink struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockingSink) Name() string          { return "blocking" }
func (s *blockingSink) Matches(t string) bool { return strings.HasPrefix(t, "slow") }
func (s *blockingSink) Publish(string, stomp.Headers, []byte) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return nil
}

// A transaction whose topic message is published to a blocked channel
// delays only its own connection: other connections' RECEIPTs keep
// flowing, and no journal work is submitted from a completion.
func TestJournal_CompletionsOnlySignal(t *testing.T) {
	sink := &blockingSink{entered: make(chan struct{}), release: make(chan struct{})}
	fj := &faultJournal{}
	tb := startWrapped(t, nil, func(j appliance.Journal) appliance.Journal { fj.Journal = j; return fj }, sink)
	t.Cleanup(func() {
		if n := fj.submitsInCompletion.Load(); n > 0 {
			t.Errorf("%d journal submits from inside a journal completion", n)
		}
	})
	tx := tb.Dial(t)
	if err := tx.Begin("t1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Send("/topic/slow.x", []byte("tick"), hdr("transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Send("/queue/txq", []byte("in-tx"), hdr("transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	commit, err := tx.Request(ctxT(t), stomp.NewFrame(stomp.CmdCommit, "transaction", "t1"))
	_ = commit
	_ = err
	<-sink.entered

	// Meanwhile: queue traffic with claims, acks, nacks and dead letters.
	c := tb.Dial(t)
	sendAll(t, c, "/queue/busy", 200, func(i int) string { return strconv.Itoa(i) })
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/busy", "client-individual", hdr("prefetch-count", "50"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		f := recv(t, sub)
		if i%10 == 0 {
			if _, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdNack, "id", f.Get("ack"), "requeue", "false")); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := c.Ack(f); err != nil {
			t.Fatal(err)
		}
	}
	close(sink.release)
	waitFor(t, 10*time.Second, "busy queue drained", func() bool {
		v, _ := tb.B.Queue("busy")
		d, _ := tb.B.Queue("DLQ.busy")
		return v.Messages == 0 && d.Messages == 20
	})
	assertRecount(t, tb)
}

// max_bytes counts enqueues still being committed: a burst of pipelined
// SENDs cannot overshoot it.
func TestQueue_MaxBytesCountsPending(t *testing.T) {
	const limit = 20 * 1100
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.MaxBytes = limit
		c.Queues.FullPolicy = "reject"
	})
	c := tb.Dial(t)
	body := strings.Repeat("b", 1000)
	var chs []<-chan client.Result
	for range 100 {
		ch, err := c.SendAsync("/queue/mb", []byte(body))
		if err != nil {
			break // the connection was closed by the reject
		}
		chs = append(chs, ch)
	}
	accepted := 0
	for _, ch := range chs {
		if r := <-ch; r.Err == nil {
			accepted++
		}
	}
	v, _ := tb.B.Queue("mb")
	if v.Bytes > limit || accepted < 15 || v.Messages != accepted {
		t.Fatalf("bytes %d (limit %d), messages %d, receipts %d", v.Bytes, limit, v.Messages, accepted)
	}
}

// Counts and bytes stay equal to the journal through dead-lettering,
// requeue and expiry; expired messages are counted as expired, not acked.
func TestQueue_AccountingMatchesJournal(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	sendAll(t, c, "/queue/acc", 5, func(i int) string { return "m" + strconv.Itoa(i) }, hdr("app", "x"))
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/acc", "client-individual", hdr("prefetch-count", "5"))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		f := recv(t, sub)
		if _, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdNack, "id", f.Get("ack"), "requeue", "false")); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Unsubscribe(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "5 dead letters", func() bool { d, _ := tb.B.Queue("DLQ.acc"); return d.Messages == 5 })
	assertRecount(t, tb)
	if n, err := tb.B.Requeue(ctxT(t), "acc", 0); err != nil || n != 5 {
		t.Fatalf("requeue: %d, %v; want 5, nil", n, err)
	}
	waitFor(t, 5*time.Second, "requeued", func() bool { v, _ := tb.B.Queue("acc"); return v.Messages == 5 })
	if d, _ := tb.B.Queue("DLQ.acc"); d.Messages != 0 || d.Bytes != 0 {
		t.Fatalf("empty DLQ shows %d messages, %d bytes", d.Messages, d.Bytes)
	}
	assertRecount(t, tb)

	past := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
	sendAll(t, c, "/queue/exp", 3, func(int) string { return "old" }, hdr("expires", past))
	esub, err := c.SubscribeReceipt(ctxT(t), "/queue/exp", "auto")
	if err != nil {
		t.Fatal(err)
	}
	expectNone(t, esub, 300*time.Millisecond)
	v, _ := tb.B.Queue("exp")
	if v.Expired != 3 || v.Acked != 0 || v.Messages != 0 {
		t.Fatalf("expired %d acked %d messages %d; want 3 0 0", v.Expired, v.Acked, v.Messages)
	}
	assertRecount(t, tb)
}

// herald queue requeue moves what it was asked to even when the oldest
// dead letters are in flight.
func TestQueue_RequeueSkipsInFlight(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	sendAll(t, c, "/queue/rq", 100, func(i int) string { return strconv.Itoa(i) })
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/rq", "client-individual", hdr("prefetch-count", "100"))
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		f := recv(t, sub)
		if _, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdNack, "id", f.Get("ack"), "requeue", "false")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "100 dead letters", func() bool { d, _ := tb.B.Queue("DLQ.rq"); return d.Messages == 100 })
	holder := tb.Dial(t)
	hs, err := holder.SubscribeReceipt(ctxT(t), "/queue/DLQ.rq", "client-individual", hdr("prefetch-count", "80"))
	if err != nil {
		t.Fatal(err)
	}
	for range 80 {
		recv(t, hs)
	}
	n, err := tb.B.Requeue(ctxT(t), "rq", 10)
	if err != nil || n != 10 {
		t.Fatalf("requeue --max 10 with the 80 oldest in flight: %d, %v; want 10, nil", n, err)
	}
	waitFor(t, 5*time.Second, "10 requeued", func() bool { v, _ := tb.B.Queue("rq"); return v.Messages == 10 })
	assertRecount(t, tb)
}

// A delay that would overflow the clock is refused, not delivered at once.
func TestQueue_HugeDelayRefused(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	_, err := c.SendReceipt(ctxT(t), "/queue/far", []byte("x"), hdr("AMQ_SCHEDULED_DELAY", "9223372036854775000"))
	if err == nil || !strings.Contains(err.Error(), "invalid header") {
		t.Fatalf("send with a delay near the int64 maximum: %v, want an invalid header ERROR", err)
	}
	if v, ok := tb.B.Queue("far"); ok && v.Messages != 0 {
		t.Fatalf("%d messages stored", v.Messages)
	}
}

// A SUBSCRIBE racing with herald queue delete ends up on the queue that
// SENDs reach.
func TestQueue_DeleteRacesSubscribe(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	for i := range 20 {
		dest := "/queue/race" + strconv.Itoa(i)
		sendAll(t, c, dest, 1, func(int) string { return "old" })
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tb.B.DeleteQueue(context.Background(), strings.TrimPrefix(dest, "/queue/"))
		}()
		cc := tb.Dial(t)
		sub, err := cc.SubscribeReceipt(ctxT(t), dest, "auto")
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		sendAll(t, c, dest, 1, func(int) string { return "new" })
		for {
			f := recv(t, sub)
			if string(f.Body) == "new" {
				break
			}
		}
		cc.Close()
	}
}

// A blocked group far longer than the memory window still lets the rest of
// the queue through (its messages are parked in the journal), and once it
// moves, all of it comes in order.
func TestQueue_LongBlockedGroupParked(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MemoryWindow = 20 })
	c := tb.Dial(t)
	sendAll(t, c, "/queue/park", 1, func(int) string { return "g-0" }, hdr("JMSXGroupID", "g"))
	holder := tb.Dial(t)
	hsub, err := holder.SubscribeReceipt(ctxT(t), "/queue/park", "client-individual", hdr("prefetch-count", "1"))
	if err != nil {
		t.Fatal(err)
	}
	first := recv(t, hsub)
	sendAll(t, c, "/queue/park", 500, func(i int) string { return "g-" + strconv.Itoa(i+1) }, hdr("JMSXGroupID", "g"))
	sendAll(t, c, "/queue/park", 10, func(i int) string { return "u-" + strconv.Itoa(i) })
	other := tb.Dial(t)
	osub, err := other.SubscribeReceipt(ctxT(t), "/queue/park", "auto")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if f := recv(t, osub); string(f.Body) != "u-"+strconv.Itoa(i) {
			t.Fatalf("got %q, want u-%d: the blocked group hides the rest of the queue", f.Body, i)
		}
	}
	if v, _ := tb.B.Queue("park"); v.InMemory > 4*20+10 {
		t.Fatalf("%d messages in memory with a window of 20", v.InMemory)
	}
	ackNow(t, holder, "ACK", first)
	holder.Close() // what it was handed meanwhile goes back, in order
	for i := range 500 {
		if f := recv(t, osub); string(f.Body) != "g-"+strconv.Itoa(i+1) {
			t.Fatalf("got %q, want g-%d", f.Body, i+1)
		}
	}
	assertRecount(t, tb)
}

// Shutdown while queues page in and their timers run: the broker stops its
// timers before it waits for their goroutines, and closes in time.
func TestQueue_CloseWhilePaging(t *testing.T) {
	for round := range 5 {
		tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MemoryWindow = 10 })
		c := tb.Dial(t)
		sendAll(t, c, "/queue/close", 500, func(i int) string { return strconv.Itoa(i) })
		sendAll(t, c, "/queue/close", 50, func(int) string { return "later" }, hdr("AMQ_SCHEDULED_DELAY", "5"))
		sub, err := c.SubscribeReceipt(ctxT(t), "/queue/close", "client-individual", hdr("prefetch-count", "3"), hdr("ack-timeout", "5"))
		if err != nil {
			t.Fatal(err)
		}
		for range 20 + round*10 {
			recv(t, sub) // never acked: ack timeouts keep the timer busy
		}
		done := make(chan struct{})
		go func() { tb.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: broker did not close within 15 s while paging", round)
		}
	}
}

// A transaction that dead-letters a message (NACK requeue:false) and then
// SENDs to that dead-letter queue commits the moved message first (the
// lower ID): both are delivered from the DLQ, in that order. The moved
// one was reported to the DLQ after the SEND and taken for a message
// already paged in: never delivered until a restart.
func TestQueue_TransactionNackThenSendToDLQ(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), "/queue/txd", []byte("a")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/txd", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	f := recv(t, sub)
	if _, err := c.Request(ctxT(t), stomp.NewFrame("BEGIN", "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(stomp.NewFrame(stomp.CmdNack, "id", f.Get("ack"), "requeue", "false", "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Send("/queue/DLQ.txd", []byte("b"), hdr("transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdCommit, "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	waitQueue(t, tb, "DLQ.txd", "2 messages", func(v appliance.QueueView) bool { return v.Messages == 2 })
	d := tb.Dial(t)
	dsub, err := d.SubscribeReceipt(ctxT(t), "/queue/DLQ.txd", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, bodies(t, dsub, 2), []string{"a", "b"})
}

// TestQueue_DeleteRacesSends: producers SEND with receipts while the queue
// is deleted again and again. Whatever each delete purged, what the broker
// holds afterwards is what its journal holds: the count in memory equals
// the count after a restart, and a consumer gets exactly that many. (A
// message committed into a queue the delete had taken, or a SEND that
// waited for a delete, must land in a queue that counts it.)
func TestQueue_DeleteRacesSends(t *testing.T) {
	tb := mustStartBroker(t, nil)
	const name = "delrace"
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := tb.Dial(t)
			defer c.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.SendReceipt(ctxT(t), "/queue/"+name, []byte(fmt.Sprintf("%d-%d", p, i))); err != nil {
					t.Errorf("producer %d: %v", p, err)
					return
				}
			}
		}()
	}
	deletes := 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if _, err := tb.B.DeleteQueue(ctxT(t), name); err == nil {
			deletes++
		} else if !errors.Is(err, appliance.ErrNoQueue) {
			t.Fatalf("delete: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	waitFor(t, 10*time.Second, "producers' connections closed", func() bool { return tb.B.Stats().Connections == 0 })
	v, _ := tb.B.Queue(name)
	tb.Restart()
	after, _ := tb.B.Queue(name)
	t.Logf("%d deletes; %d messages left in memory, %d after a restart", deletes, v.Messages, after.Messages)
	if deletes == 0 || v.Messages != after.Messages {
		t.Fatalf("%d deletes; the broker counted %d messages, its journal %d (after a restart)", deletes, v.Messages, after.Messages)
	}
	if v.Messages > 0 {
		drain(t, tb.Addr, "/queue/"+name, v.Messages, v.Messages, nil)
	}
}
