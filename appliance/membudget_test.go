package appliance_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// What clients make the broker hold is charged to the memory budget and
// released again: after topic traffic, queue traffic with acks,
// transactions committed, aborted and left open, bodies large and small,
// and every client gone with its queues drained, nothing is left charged.
func TestMemory_AccountingReturnsToZero(t *testing.T) {
	tb := mustStartBroker(t, nil)
	big := bytes.Repeat([]byte("b"), 300<<10)
	sub := tb.Dial(t)
	ts, err := sub.SubscribeReceipt(ctxT(t), "/topic/mem", "auto")
	if err != nil {
		t.Fatal(err)
	}
	p := tb.Dial(t)
	for i := range 20 {
		if _, err := p.SendReceipt(ctxT(t), "/topic/mem", big[:i*1000]); err != nil {
			t.Fatal(err)
		}
		if _, err := p.SendReceipt(ctxT(t), "/queue/mem", big[:i*15000]); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		recv(t, ts)
	}
	if err := p.Begin("t1"); err != nil {
		t.Fatal(err)
	}
	p.Send("/queue/mem", big, hdr("transaction", "t1"))
	p.Abort("t1")
	p.Begin("t2")
	p.Send("/queue/mem", big, hdr("transaction", "t2"))
	p.Commit("t2")
	p.Begin("t3") // left open: the connection closes with it
	p.Send("/queue/mem", big, hdr("transaction", "t3"))
	if _, err := p.SendReceipt(ctxT(t), "/queue/mem", nil); err != nil {
		t.Fatal(err)
	}
	if used := tb.B.Stats().MemoryUsed; used < 300<<10 {
		t.Fatalf("memory used %d while a queue holds 20 messages and a transaction %d bytes", used, len(big))
	}
	p.Close()
	sub.Close()
	c := tb.Dial(t)
	qs, err := c.SubscribeReceipt(ctxT(t), "/queue/mem", "client-individual", hdr("prefetch-count", "5"))
	if err != nil {
		t.Fatal(err)
	}
	for range 22 {
		ackNow(t, c, "ACK", recv(t, qs))
	}
	c.Close()
	waitFor(t, 10*time.Second, "memory used back to 0", func() bool {
		st := tb.B.Stats()
		return st.Connections == 0 && st.MemoryUsed == 0
	})
}

// Queue windows share the memory budget: queues nobody consumes, each
// under its own 32 MiB window, together hold about the queues' half of the
// budget, not the sum of their windows; what does not fit stays in the
// journal, producers are never held for it, every SEND is receipted, and
// every message is delivered afterwards, in order.
func TestMemory_BudgetBoundsQueueWindows(t *testing.T) {
	const budget = 32 << 20
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Memory.BudgetBytes = budget
		c.Queues.MemoryWindowBytes = 32 << 20
		c.Queues.MemoryWindow = 100000
	})
	heap0 := heapInUse()
	const queues, per, size = 6, 48, 512 << 10 // 144 MiB in all
	body := bytes.Repeat([]byte("w"), size)
	var wg sync.WaitGroup
	errs := make(chan error, queues)
	for q := range queues {
		c := tb.Dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				b := append([]byte(strconv.Itoa(i)+":"), body...)
				if _, err := c.SendReceipt(context.Background(), fmt.Sprintf("/queue/w%d", q), b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := tb.B.Stats()
	grown := heapInUse() - heap0
	t.Logf("after %d MiB sent to %d queues: memory used %d MiB of %d, heap grew %d MiB", queues*per*size>>20, queues, st.MemoryUsed>>20, budget>>20, grown>>20)
	if st.MemoryUsed > budget/2+queues*(1<<20) {
		t.Fatalf("memory used %d bytes with nothing but queues, budget %d (half for queues)", st.MemoryUsed, budget)
	}
	if st.MemoryWaits != 0 {
		t.Fatalf("producers held %d times for memory that queues can leave on disk", st.MemoryWaits)
	}
	if grown > budget+24<<20 {
		t.Fatalf("heap grew %d MiB beside a budget of %d MiB (queue windows alone would hold %d MiB)", grown>>20, budget>>20, queues*per*size>>20)
	}
	c := tb.Dial(t)
	for q := range queues {
		sub, err := c.SubscribeReceipt(ctxT(t), fmt.Sprintf("/queue/w%d", q), "client-individual", hdr("prefetch-count", "4"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range per {
			f := recv(t, sub)
			if !strings.HasPrefix(string(f.Body), strconv.Itoa(i)+":") || len(f.Body) != size+len(strconv.Itoa(i))+1 {
				t.Fatalf("queue w%d: message %d is %q... (%d bytes)", q, i, f.Body[:min(8, len(f.Body))], len(f.Body))
			}
			ackNow(t, c, "ACK", f)
		}
		if err := sub.Unsubscribe(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// Near the budget the broker stops reading producers (memory
// backpressure), whatever holds the memory: here topic subscribers that do
// not read, each within its own subscriber_buffer_bytes. The producer is
// held, not failed, and goes on once the memory is freed; the heap stays
// near the budget meanwhile.
func TestMemory_BackpressureHoldsProducers(t *testing.T) {
	const budget = 24 << 20
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Memory.BudgetBytes = budget
		c.Topics.SubscriberBufferBytes = 16 << 20
		c.Topics.SubscriberBuffer = 100000
	})
	var slow []*raw
	for i := range 4 {
		r := dialRaw(t, tb)
		r.connect("1.2")
		r.write("SUBSCRIBE\nid:" + strconv.Itoa(i) + "\ndestination:/topic/flood\nreceipt:ok\n\n\x00")
		if f := r.frame(); f.Command != "RECEIPT" {
			t.Fatalf("got %s, want RECEIPT", f.Command)
		}
		slow = append(slow, r)
	}
	heap0 := heapInUse()
	p := tb.Dial(t)
	body := bytes.Repeat([]byte("t"), 256<<10)
	const total = 200 // 50 MiB, 200 MiB buffered over 4 subscribers without a budget
	sent := make(chan int, total)
	go func() {
		defer close(sent)
		for i := range total {
			if _, err := p.SendReceipt(context.Background(), "/topic/flood", body); err != nil {
				return
			}
			sent <- i
		}
	}()
	waitFor(t, 10*time.Second, "the producer held", func() bool { return tb.B.Stats().MemoryWaits > 0 })
	time.Sleep(300 * time.Millisecond)
	st := tb.B.Stats()
	grown := heapInUse() - heap0
	t.Logf("producer held after %d of %d sends: memory used %d MiB of %d, heap grew %d MiB", len(sent), total, st.MemoryUsed>>20, budget>>20, grown>>20)
	if len(sent) == total {
		t.Fatal("every SEND was taken although 4 subscribers read nothing and the budget is spent")
	}
	if grown > budget+16<<20 {
		t.Fatalf("heap grew %d MiB with a budget of %d MiB", grown>>20, budget>>20)
	}
	for _, r := range slow { // the subscribers go: their buffers are freed
		r.c.Close()
	}
	n := 0
	deadline := time.After(20 * time.Second)
	for range sent {
		n++
		select {
		case <-deadline:
			t.Fatalf("the producer got only %d receipts after the memory was freed", n)
		default:
		}
	}
	if n != total {
		t.Fatalf("%d of %d SENDs receipted after the memory was freed", n, total)
	}
	_ = stomp.CmdSend
}

// Scheduled messages count against the queues' half of the budget too:
// thousands of them due in an hour stay mostly in the journal once that
// half is short, and other queues go on.
func TestMemory_DelayedMessagesBounded(t *testing.T) {
	const budget = 32 << 20
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Memory.BudgetBytes = budget
		c.Queues.MemoryWindowBytes = 4 << 20
	})
	c := tb.Dial(t)
	body := bytes.Repeat([]byte("d"), 16<<10)
	for i := range 3000 { // 48 MiB due in an hour
		ch, err := c.SendAsync("/queue/later", body, hdr("AMQ_SCHEDULED_DELAY", "3600000"))
		if err != nil {
			t.Fatal(err)
		}
		if i%200 == 199 {
			select {
			case r := <-ch:
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("no receipt for scheduled message %d: %+v", i, tb.B.Stats())
			}
		}
	}
	if _, err := c.SendReceipt(ctxT(t), "/queue/now", []byte("now")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeReceipt(ctxT(t), "/queue/now", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	if f := recv(t, sub); string(f.Body) != "now" {
		t.Fatalf("got %d bytes, want the ready message", len(f.Body))
	}
	st := tb.B.Stats()
	v, _ := tb.B.Queue("later")
	t.Logf("3000 scheduled messages of 16 KiB: %d in memory, memory used %d MiB of %d", v.InMemory, st.MemoryUsed>>20, budget>>20)
	if v.Messages != 3000 {
		t.Fatalf("queue holds %d messages, want 3000", v.Messages)
	}
	if st.MemoryUsed > budget/2+2<<20 {
		t.Fatalf("memory used %d MiB with a budget of %d MiB (half for queues)", st.MemoryUsed>>20, budget>>20)
	}
}
