package queuecore

import (
	"strconv"
	"testing"
)

// Scripted tests of review findings on the queue (the simulation covers
// them too; these name them).

func claims(b []*Batch) (ops []Op) {
	for _, x := range b {
		for _, op := range x.Ops {
			if op.Kind == OpClaim {
				ops = append(ops, op)
			}
		}
	}
	return ops
}

// A claim that commits after its consumer left does not count as a
// delivery: the journal's count is put back, and the next consumer gets
// the message as attempt 1.
func TestCore_ClaimAfterConsumerLeftIsReverted(t *testing.T) {
	c := New(Config{Window: 10}, 1)
	c.Committed(&Msg{ID: 1, Size: 1}, false, 0)
	a := &Consumer{Prefetch: 1, Mode: AckClientIndividual}
	c.Subscribe(a, 0)
	out := c.Take()
	cl := claims(out.Batches)
	if len(cl) != 1 || cl[0].Deliveries != 1 {
		t.Fatalf("claims %+v, want one claim of delivery 1", cl)
	}
	c.Unsubscribe(a, 1)
	c.Done(out.Batches[0].Seq, Result{}, nil, 2)
	out = c.Take()
	if len(out.Deliver) != 0 {
		t.Fatalf("delivered %d to a consumer that left", len(out.Deliver))
	}
	cl = claims(out.Batches)
	if len(cl) != 1 || cl[0].Deliveries != 0 || cl[0].Msg.ID != 1 {
		t.Fatalf("claims after the late commit %+v, want the count of 1 put back to 0", cl)
	}
	b := &Consumer{Prefetch: 1, Mode: AckClientIndividual}
	c.Subscribe(b, 3)
	out = c.Take()
	if cl = claims(out.Batches); len(cl) != 1 || cl[0].Deliveries != 1 {
		t.Fatalf("next claim %+v, want delivery 1", cl)
	}
}

// A failed claim keeps its message at the head of its group: the next
// message of the group is not delivered before it.
func TestCore_FailedClaimKeepsGroupOrder(t *testing.T) {
	c := New(Config{Window: 10, RetryMin: 100, RetryMax: 100}, 1)
	c.Committed(&Msg{ID: 1, Size: 1, Group: "g"}, false, 0)
	c.Committed(&Msg{ID: 2, Size: 1, Group: "g"}, false, 0)
	a := &Consumer{Prefetch: 5, Mode: AckClientIndividual}
	c.Subscribe(a, 0)
	out := c.Take()
	if cl := claims(out.Batches); len(cl) != 1 || cl[0].Msg.ID != 1 {
		t.Fatalf("claims %+v, want message 1 only", cl)
	}
	c.Done(out.Batches[0].Seq, Result{}, errTest, 1)
	out = c.Take()
	// 1 waits out the back-off in the delay heap, which the delivered mark
	// may pass: a row of its own says it was not delivered.
	if cl := claims(out.Batches); len(cl) != 1 || cl[0].Msg.ID != 1 || cl[0].Deliveries != 0 || cl[0].Mark {
		t.Fatalf("after the failed claim of 1: claims %+v, want only a row of count 0 for 1 (2 must wait for 1)", cl)
	}
	if out.Wake != 101 {
		t.Fatalf("wake %d, want 101 (the retry back-off)", out.Wake)
	}
	c.Tick(101)
	out = c.Take()
	if cl := claims(out.Batches); len(cl) != 1 || cl[0].Msg.ID != 1 || cl[0].Deliveries != 1 {
		t.Fatalf("after the back-off: claims %+v, want message 1 as delivery 1", cl)
	}
}

// A NACK with no back-off returns the message at once, still first of its
// group.
func TestCore_NackWithoutBackoffReleasesGroup(t *testing.T) {
	c := New(Config{Window: 10}, 1)
	c.Committed(&Msg{ID: 1, Size: 1, Group: "g"}, false, 0)
	c.Committed(&Msg{ID: 2, Size: 1, Group: "g"}, false, 0)
	a := &Consumer{Prefetch: 5, Mode: AckClientIndividual}
	c.Subscribe(a, 0)
	out := c.Take()
	c.Done(out.Batches[0].Seq, Result{}, nil, 0)
	if out = c.Take(); len(out.Deliver) != 1 {
		t.Fatalf("delivered %d, want 1", len(out.Deliver))
	}
	b, stale := c.Nack(a, 1, 1, true, 0)
	if stale || b == nil {
		t.Fatal("nack of the current delivery reported stale")
	}
	out = c.Take()
	if cl := claims(out.Batches); len(cl) != 1 || cl[0].Msg.ID != 1 || cl[0].Deliveries != 2 {
		t.Fatalf("after the nack: claims %+v, want message 1 again as delivery 2", cl)
	}
}

var errTest = errTestT("journal: disk I/O error")

type errTestT string

func (e errTestT) Error() string { return string(e) }

// A bogus ACK is refused without scanning the consumer's deliveries: its
// cost does not grow with the prefetch window.
func BenchmarkCore_StaleAck(b *testing.B) {
	for _, inflight := range []int{10, 65535} {
		b.Run("inflight="+strconv.Itoa(inflight), func(b *testing.B) {
			c := New(Config{Window: inflight}, 1)
			con := &Consumer{Prefetch: inflight, Mode: AckClientIndividual}
			for i := 1; i <= inflight; i++ {
				c.Committed(&Msg{ID: uint64(i), Size: 1}, false, 0)
			}
			c.Subscribe(con, 0)
			for _, bt := range c.Take().Batches {
				c.Done(bt.Seq, Result{}, nil, 0)
			}
			c.Take()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, stale := c.Ack(con, uint64(inflight+1+i%1000), 1, 0); !stale {
					b.Fatal("bogus ack accepted")
				}
			}
		})
	}
}

// A window cap (the broker's memory budget is short) keeps messages
// committed past it in the journal, and page-ins ask for no more than it;
// lifting the cap pages the rest in.
func TestCore_WindowCapSpills(t *testing.T) {
	c := New(Config{Window: 100, WindowBytes: 10000}, 1)
	c.SetWindowCap(250, 0)
	for i := range 10 {
		c.Committed(&Msg{ID: uint64(i + 1), Size: 100}, false, 0)
	}
	if got := c.MemBytes(); got != 300 {
		t.Fatalf("%d bytes in memory under a cap of 250, want 300 (the window fills, then spills)", got)
	}
	c.Take()
	c.SetWindowCap(0, 1)
	out := c.Take()
	if out.PageIn == nil || out.PageIn.MaxBytes != 9700 || out.PageIn.After != 3 {
		t.Fatalf("page-in after the cap is lifted: %+v, want after 3 up to 9700 bytes (the window less the 300 in memory)", out.PageIn)
	}
	var rest []*Msg
	for i := 3; i < 10; i++ {
		rest = append(rest, &Msg{ID: uint64(i + 1), Size: 100})
	}
	c.Paged(out.PageIn, rest, nil, 2)
	if got := c.MemBytes(); got != 1000 {
		t.Fatalf("%d bytes in memory after the page-in, want 1000", got)
	}
}

// Batches already in the journal's hands when it fails are one round of
// failure: eight ACKs whose deletes fail together retry after RetryMin,
// not after RetryMin doubled seven times. A second round (batches
// submitted after the first failure) doubles it.
func TestCore_ConcurrentFailuresAreOneRound(t *testing.T) {
	const n = 8
	c := New(Config{Window: 10, RetryMin: 100, RetryMax: 100_000}, 1)
	for i := 1; i <= n; i++ {
		c.Committed(&Msg{ID: uint64(i), Size: 1}, false, 0)
	}
	a := &Consumer{Prefetch: n, Mode: AckClientIndividual}
	c.Subscribe(a, 0)
	out := c.Take()
	for _, b := range out.Batches {
		c.Done(b.Seq, Result{}, nil, 0)
	}
	if out = c.Take(); len(out.Deliver) != n {
		t.Fatalf("delivered %d, want %d", len(out.Deliver), n)
	}
	var seqs []uint64
	for i := 1; i <= n; i++ {
		b, stale := c.Ack(a, uint64(i), 1, 1)
		if stale || b == nil {
			t.Fatalf("ack %d: stale %v batch %v", i, stale, b)
		}
		seqs = append(seqs, b.Seq)
	}
	c.Take()
	for _, s := range seqs {
		c.Done(s, Result{}, errTest, 10)
	}
	out = c.Take()
	if out.Wake != 110 {
		t.Fatalf("wake %d after %d concurrent failed deletes, want 110 (one round: RetryMin)", out.Wake, n)
	}
	c.Tick(110)
	out = c.Take()
	cl := claims(out.Batches)
	if len(cl) != n {
		t.Fatalf("after the back-off: %d claims, want all %d messages again", len(cl), n)
	}
	for _, b := range out.Batches {
		c.Done(b.Seq, Result{}, errTest, 120)
	}
	if out = c.Take(); out.Wake != 320 {
		t.Fatalf("wake %d after the second round failed, want 320 (RetryMin doubled once)", out.Wake)
	}
}

// Commits reported out of ID order (the shell's duty 3 broken: a
// transaction reported its SEND before the dead-letter move it made first)
// are reported as EvOutOfOrder, and the backlog cache, which relies on the
// order, is given up.
func TestCore_OutOfOrderCommitReported(t *testing.T) {
	c := New(Config{Window: 1, CacheBytes: 1 << 20}, 1)
	c.Committed(&Msg{ID: 1, Size: 1}, true, 0)
	c.Committed(&Msg{ID: 3, Size: 1}, true, 0) // past the window: cached
	if c.Cached() != 1 {
		t.Fatalf("cached %d, want 1", c.Cached())
	}
	for _, ev := range c.Take().Events {
		t.Fatalf("event %+v for commits in order", ev)
	}
	c.Committed(&Msg{ID: 2, Size: 1}, true, 0)
	var got []Event
	for _, ev := range c.Take().Events {
		if ev.Kind == EvOutOfOrder {
			got = append(got, ev)
		}
	}
	if len(got) != 1 || got[0].ID != 2 || c.Cached() != 0 || c.cacheAll {
		t.Fatalf("events %+v, cached %d (all %v): want one EvOutOfOrder for 2 and no cache", got, c.Cached(), c.cacheAll)
	}
}

// pageEvents returns the page-in run events of out.
func pageEvents(out Output) (evs []Event) {
	for _, ev := range out.Events {
		if ev.Kind == EvPageInFailed || ev.Kind == EvPageInRecovered {
			evs = append(evs, ev)
		}
	}
	return evs
}

// A run of failed page-ins starts at the first failure, keeps that time
// through later failures (with the last error), and ends at the next
// page-in that reads; each failure and the end are events.
func TestCore_PageInFailingRun(t *testing.T) {
	c := New(Config{Window: 1, RetryMin: 100, RetryMax: 100}, 1)
	c.Recover(3, 3, 3, 0, 0)
	out := c.Take()
	if out.PageIn == nil {
		t.Fatal("no page-in after Recover")
	}
	if _, _, failing := c.PageInFailing(); failing {
		t.Fatal("failing before any page-in failed")
	}
	c.Paged(out.PageIn, nil, errTestT("disk I/O error a"), 10)
	out = c.Take()
	if evs := pageEvents(out); len(evs) != 1 || evs[0].Kind != EvPageInFailed || evs[0].Since != 10 || evs[0].Failures != 1 || evs[0].Err == nil {
		t.Fatalf("events after the first failure: %+v, want one EvPageInFailed since 10, 1 failure", evs)
	}
	if since, err, failing := c.PageInFailing(); !failing || since != 10 || err != "disk I/O error a" {
		t.Fatalf("PageInFailing() = %d %q %v, want 10 \"disk I/O error a\" true", since, err, failing)
	}
	if out.Wake != 110 {
		t.Fatalf("wake %d, want 110 (the retry)", out.Wake)
	}
	c.Tick(110)
	out = c.Take()
	if out.PageIn == nil {
		t.Fatal("no page-in retried at 110")
	}
	c.Paged(out.PageIn, nil, errTestT("disk I/O error b"), 115)
	out = c.Take()
	if evs := pageEvents(out); len(evs) != 1 || evs[0].Kind != EvPageInFailed || evs[0].Since != 10 || evs[0].Failures != 2 {
		t.Fatalf("events after the second failure: %+v, want one EvPageInFailed since 10, 2 failures", evs)
	}
	if since, err, failing := c.PageInFailing(); !failing || since != 10 || err != "disk I/O error b" {
		t.Fatalf("PageInFailing() = %d %q %v, want 10 (the run's start) \"disk I/O error b\" (the last error) true", since, err, failing)
	}
	c.Tick(215)
	out = c.Take()
	if out.PageIn == nil {
		t.Fatal("no page-in retried at 215")
	}
	c.Paged(out.PageIn, []*Msg{{ID: 1, Size: 1}}, nil, 220)
	out = c.Take()
	if evs := pageEvents(out); len(evs) != 1 || evs[0].Kind != EvPageInRecovered || evs[0].Since != 10 || evs[0].Failures != 2 {
		t.Fatalf("events after the page-in that read: %+v, want one EvPageInRecovered since 10, 2 failures", evs)
	}
	if since, err, failing := c.PageInFailing(); failing || since != 0 || err != "" {
		t.Fatalf("PageInFailing() after a page-in that read = %d %q %v, want no run", since, err, failing)
	}
}

// A run that starts at time 0 is a run (no zero time stands for "none").
func TestCore_PageInFailingFromTimeZero(t *testing.T) {
	c := New(Config{Window: 1, RetryMin: 100, RetryMax: 100}, 1)
	c.Recover(1, 1, 1, 0, 0)
	out := c.Take()
	if out.PageIn == nil {
		t.Fatal("no page-in after Recover")
	}
	c.Paged(out.PageIn, nil, errTest, 0)
	if since, err, failing := c.PageInFailing(); !failing || since != 0 || err != errTest.Error() {
		t.Fatalf("PageInFailing() after a failure at 0 = %d %q %v, want 0 %q true", since, err, failing, errTest.Error())
	}
}

// A purge pauses page-ins, but not the retries of failing ones: a run of
// failures ends at the first read that works, not at the end of the purge
// (the shell reports a long run: not ready). A page-in is asked again once
// the purge ends.
func TestCore_PurgeKeepsRetryingFailedPageIns(t *testing.T) {
	c := New(Config{Window: 2, RetryMin: 100, RetryMax: 100}, 1)
	c.Recover(10, 10, 10, 0, 0)
	out := c.Take()
	if out.PageIn == nil {
		t.Fatal("no page-in after Recover")
	}
	c.Paged(out.PageIn, nil, errTestT("disk I/O error"), 10)
	c.Take()
	pb := c.Purge(20)
	if pb == nil {
		t.Fatal("no purge")
	}
	out = c.Take()
	if out.Wake != 110 {
		t.Fatalf("wake %d during the purge, want 110 (the page-in's retry)", out.Wake)
	}
	c.Tick(110)
	out = c.Take()
	if out.PageIn == nil {
		t.Fatal("no page-in retried during the purge")
	}
	c.Paged(out.PageIn, []*Msg{{ID: 1, Size: 1}, {ID: 2, Size: 1}}, nil, 115)
	out = c.Take()
	if evs := pageEvents(out); len(evs) != 1 || evs[0].Kind != EvPageInRecovered {
		t.Fatalf("events after the page-in that read: %+v, want EvPageInRecovered", evs)
	}
	if out.PageIn != nil {
		t.Fatal("a page-in asked while the purge runs and page-ins work")
	}
	// The purge's part deletes 1-4; then the rest.
	c.Done(pb.Seq, Result{Affected: 4, Bytes: 4, PurgedTo: 4}, nil, 120)
	out = c.Take()
	if len(out.Batches) != 1 || out.Batches[0].Ops[0].After != 4 || out.PageIn != nil {
		t.Fatalf("after the first part: %d batches (%+v), page-in %v; want the next part after 4 and no page-in", len(out.Batches), out.Batches, out.PageIn)
	}
	c.Done(out.Batches[0].Seq, Result{Affected: 6, Bytes: 6, PurgedTo: 10}, nil, 130)
	out = c.Take()
	var ended bool
	for _, ev := range out.Events {
		ended = ended || ev.Kind == EvPurged && ev.Err == nil && ev.Count == 10
	}
	if !ended || c.Snapshot().Count != 0 || c.Snapshot().Purging {
		t.Fatalf("after the last part: events %+v, snapshot %+v; want EvPurged of 10 and an empty queue", out.Events, c.Snapshot())
	}
}
