package appliance_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

func streamView(t *testing.T, tb *testBroker, name string) appliance.StreamView {
	t.Helper()
	for _, v := range tb.B.StreamViews() {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no stream %s", name)
	return appliance.StreamView{}
}

// Many caught-up live readers of one stream are served new appends from
// the tail cache: each gets every message in order, and the journal is
// read far less than once per reader per append. A reader that starts
// behind the tail reads the journal and still gets everything in order.
func TestStream_TailServesLiveReaders(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Streams.TailBytes = 64 << 10 })
	const readers, appends = 40, 200
	// Messages before the readers come: 2,000 of 100 B, beyond the tail.
	p := tb.Dial(t)
	body := make([]byte, 100)
	for i := 0; i < 2000; i++ {
		if _, err := p.SendAsync("/stream/live", body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.SendReceipt(ctxT(t), "/stream/live", body); err != nil {
		t.Fatal(err)
	}
	before := streamView(t, tb, "live")
	if before.TailBytes == 0 || before.TailBytes > 64<<10 || before.TailFirst == nil || *before.TailFirst == 0 {
		t.Fatalf("tail after 2,001 appends: %d bytes from %v, want at most 64 KiB of the newest", before.TailBytes, before.TailFirst)
	}
	subs := make([]*client.Subscription, readers)
	for i := range subs {
		c := tb.Dial(t)
		sub, err := c.SubscribeReceipt(ctxT(t), "/stream/live", "auto", hdr("x-stream-offset", "next"))
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = sub
	}
	// One reader from the start: behind the tail, from the journal.
	c := tb.Dial(t)
	old, err := c.SubscribeReceipt(ctxT(t), "/stream/live", "auto", hdr("x-stream-offset", "first"))
	if err != nil {
		t.Fatal(err)
	}
	readsBefore := streamView(t, tb, "live").TailReads
	var wg sync.WaitGroup
	errs := make(chan string, readers+1)
	check := func(sub *client.Subscription, from, n int) {
		defer wg.Done()
		for i := 0; i < n; i++ {
			m := recv(t, sub)
			if got := m.Get("x-stream-offset"); got != strconv.Itoa(from+i) {
				errs <- "offset " + got + ", want " + strconv.Itoa(from+i)
				return
			}
		}
	}
	for _, sub := range subs {
		wg.Add(1)
		go check(sub, 2001, appends)
	}
	wg.Add(1)
	go check(old, 0, 2001+appends)
	for i := 0; i < appends; i++ {
		if _, err := p.SendReceipt(ctxT(t), "/stream/live", body); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	after := streamView(t, tb, "live")
	journal := after.TailReads - readsBefore
	// The old reader needs about 2,001/512 pages from the journal; without
	// the tail every live reader would read each append: 8,000 reads.
	if journal > readers*appends/20 {
		t.Errorf("%d journal reads for %d live readers x %d appends (tail hits %d): the tail did not serve them", journal, readers, appends, after.TailHits)
	}
	if after.TailHits < appends {
		t.Errorf("tail hits %d, want at least one per append (%d)", after.TailHits, appends)
	}
	t.Logf("journal reads %d, tail hits %d", journal, after.TailHits)
}

// The tail is charged to the memory budget and gives way to it: with a
// budget too small for it, it holds less than tail_bytes.
func TestStream_TailChargedToBudget(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Memory.BudgetBytes = 16 << 20 // the queues' half: 8 MiB
		c.Streams.TailBytes = 64 << 20
	})
	p := tb.Dial(t)
	body := make([]byte, 4096)
	for i := 0; i < 3000; i++ { // 12 MB
		if _, err := p.SendAsync("/stream/b", body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.SendReceipt(ctxT(t), "/stream/b", body); err != nil {
		t.Fatal(err)
	}
	v := streamView(t, tb, "b")
	if v.TailBytes == 0 || v.TailBytes > 8<<20 {
		t.Errorf("tail holds %d bytes under a 16 MiB budget, want some and at most its queues' half", v.TailBytes)
	}
	if used := tb.B.Stats().MemoryUsed; used < v.TailBytes {
		t.Errorf("memory used %d below the tail's %d bytes: the tail is not charged", used, v.TailBytes)
	}
}
