package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// Power cuts (powercut_test.go) against what a queue journals besides
// SENDs: ACKs, delivery counts, dead-letter moves, dedup ids and
// transactions. All run with journal.sync = "full". The [queues] lines are
// appended after the [journal] ones newPowerCut writes.

// sendAll SENDs bodies to queue with receipts, pipelined, and returns the
// message-id of each RECEIPT; any failure is fatal.
func sendAll(t *testing.T, c *client.Conn, queue string, bodies []string, hdrs func(body string) []stomp.Header) map[string]string {
	t.Helper()
	chans := make([]<-chan client.Result, len(bodies))
	for i, b := range bodies {
		var h []stomp.Header
		if hdrs != nil {
			h = hdrs(b)
		}
		ch, err := c.SendAsync("/queue/"+queue, []byte(b), h...)
		if err != nil {
			t.Fatalf("send %s: %v", b, err)
		}
		chans[i] = ch
	}
	ids := make(map[string]string, len(bodies))
	timeout := time.After(20 * time.Second)
	for i, ch := range chans {
		select {
		case r := <-ch:
			if r.Err != nil {
				t.Fatalf("send %s: %v", bodies[i], r.Err)
			}
			ids[bodies[i]] = r.Receipt.Get("message-id")
		case <-timeout:
			t.Fatalf("%s: RECEIPTs of %d SENDs missing after 20 s", queue, len(bodies)-i)
		}
	}
	return ids
}

// collect reads sub until done (called after each frame) says all
// expected frames came, then for grace more (a frame that should not come
// at all gets its chance). It fails the test if done is not reached within
// 10 s, naming what missing returns.
func collect(t *testing.T, what string, sub *client.Subscription, grace time.Duration, on func(*stomp.Frame), done func() bool, missing func() []string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !done() {
		select {
		case m, ok := <-sub.C():
			if !ok {
				t.Fatalf("%s: subscription ended: %v", what, sub)
			}
			on(m)
		case <-deadline:
			miss := missing()
			if len(miss) > 10 {
				miss = append(miss[:10], "...")
			}
			t.Fatalf("%s: %d messages did not come within 10 s: %s", what, len(missing()), strings.Join(miss, " "))
		}
	}
	end := time.After(grace)
	for {
		select {
		case m, ok := <-sub.C():
			if !ok {
				t.Fatalf("%s: subscription ended", what)
			}
			on(m)
		case <-end:
			return
		}
	}
}

// drainQueue consumes queue with an auto-ack subscription after a restart
// and returns how often each body came, and the frame of each body's last
// delivery. A marker SENT first (FIFO: after every message that
// survived; the delays of NACKed messages are 1 ms here) ends the drain,
// after grace.
func drainQueue(t *testing.T, c *client.Conn, queue string, grace time.Duration) (map[string]int, map[string]*stomp.Frame) {
	t.Helper()
	marker := queue + ":marker:" + strconv.Itoa(rand.Int())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.SendReceipt(ctx, "/queue/"+queue, []byte(marker)); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe("/queue/"+queue, "auto", stomp.Header{Key: "prefetch-count", Value: "1000"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	last := map[string]*stomp.Frame{}
	gotMarker := false
	collect(t, "drain "+queue, sub, grace, func(m *stomp.Frame) {
		b := string(m.Body)
		if b == marker {
			gotMarker = true
			return
		}
		seen[b]++
		last[b] = m
	}, func() bool { return gotMarker }, func() []string { return []string{marker} })
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	return seen, last
}

func deliveryCount(t *testing.T, m *stomp.Frame) int {
	t.Helper()
	n, err := strconv.Atoi(m.Get("delivery-count"))
	if err != nil || n < 1 {
		t.Fatalf("MESSAGE %q has delivery-count %q", m.Body, m.Get("delivery-count"))
	}
	return n
}

func request(c *client.Conn, f *stomp.Frame) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Request(ctx, f)
	return err
}

// TestPowerCut_AcksAndDeliveryCounts: over 6 power cuts, each right after
// the RECEIPT of an ACK, NACK or DISCONNECT or right after a MESSAGE, a
// message whose ACK (client-individual, with a receipt) was receipted is
// never delivered again; every message not acked comes back, and one that
// was delivered N times (delivery-count N) comes back with a
// delivery-count of at least N+1: the count is durable before the MESSAGE
// is sent. Each round adds new messages, consumes all, ACKs some, NACKs
// some once or twice (mostly reading each redelivery) and leaves the rest
// unacked. Some rounds end with ACKs without receipts and a DISCONNECT
// with one: its RECEIPT says they are durable, so they count as receipted.
func TestPowerCut_AcksAndDeliveryCounts(t *testing.T) {
	start := time.Now()
	p := newPowerCut(t, "full", `checkpoint_interval = "100ms"`,
		"[queues]", "max_deliveries = 1000", `redelivery_delay_min = "1ms"`, `redelivery_delay_max = "1ms"`)
	const queue, cuts = "pc-acks", 6
	acked := map[string]bool{} // ACK receipted before a cut
	live := map[string]int{}   // not acked: highest delivery-count seen (0: never delivered)
	var nAcks, nNacks, redelivered int
	for round := 0; ; round++ {
		c := dial2(t, p.addr)
		var bodies []string
		for i := range 50 + rand.IntN(100) {
			bodies = append(bodies, fmt.Sprintf("r%d-%d", round, i))
		}
		sendAll(t, c, queue, bodies, nil)
		for _, b := range bodies {
			live[b] = 0
		}
		sub, err := c.Subscribe("/queue/"+queue, "client-individual", stomp.Header{Key: "prefetch-count", Value: "10000"})
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]*stomp.Frame{}
		check := func(m *stomp.Frame) {
			b := string(m.Body)
			n := deliveryCount(t, m)
			switch before, ok := live[b]; {
			case acked[b]:
				t.Errorf("round %d: %s delivered again (delivery-count %d) after its ACK was receipted before a power cut", round, b, n)
			case !ok:
				t.Errorf("round %d: unknown message %q", round, b)
			case held[b] != nil:
				t.Errorf("round %d: %s delivered twice (delivery-counts %s and %d) without a NACK or restart between", round, b, held[b].Get("delivery-count"), n)
			case n < before+1:
				t.Errorf("round %d: %s delivered with delivery-count %d, but delivery %d was seen before the power cut", round, b, n, before)
			default:
				if before > 0 {
					redelivered++
				}
				live[b] = n
			}
			held[b] = m
		}
		collect(t, fmt.Sprintf("round %d", round), sub, 200*time.Millisecond, check,
			func() bool { return len(held) >= len(live) },
			func() (miss []string) {
				for b := range live {
					if held[b] == nil {
						miss = append(miss, b)
					}
				}
				return miss
			})
		if t.Failed() {
			t.FailNow()
		}
		if round == cuts {
			c.Close()
			break
		}
		// ACK some (receipted), NACK some once or twice, leave the rest,
		// in random order; the power is cut right after the last RECEIPT.
		order := make([]string, 0, len(held))
		for b := range held {
			order = append(order, b)
		}
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		var last string
		pending := map[string]bool{} // NACKed, redelivery not read yet
		// redelivery reads MESSAGEs until the redelivery (or first
		// delivery) of b; others must be redeliveries of earlier NACKs.
		redelivery := func(b string) *stomp.Frame {
			for {
				select {
				case m := <-sub.C():
					x := string(m.Body)
					if x != b && !pending[x] {
						t.Fatalf("waiting for the redelivery of %s, got %s (delivery-count %s), not NACKed", b, x, m.Get("delivery-count"))
					}
					if n := deliveryCount(t, m); n != live[x]+1 {
						t.Errorf("%s redelivered after a NACK with delivery-count %d, want %d", x, n, live[x]+1)
					}
					live[x] = deliveryCount(t, m)
					held[x] = m
					delete(pending, x)
					if x == b {
						return m
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s not redelivered within 10 s of its NACK", b)
				}
			}
		}
		for _, b := range order {
			if pending[b] {
				continue
			}
			m := held[b]
			switch r := rand.IntN(100); {
			case r < 35:
				if err := request(c, stomp.NewFrame("ACK", "id", m.Get("ack"))); err != nil {
					t.Fatalf("ACK %s: %v", b, err)
				}
				acked[b] = true
				delete(live, b)
				nAcks++
				last = "RECEIPT of the ACK of " + b
			case r < 55:
				for k := 1 + rand.IntN(2); k > 0; k-- {
					if err := request(c, stomp.NewFrame("NACK", "id", m.Get("ack"))); err != nil {
						t.Fatalf("NACK %s: %v", b, err)
					}
					nNacks++
					last = "RECEIPT of the NACK of " + b
					if k == 1 && rand.IntN(2) == 0 {
						// The redelivery may come before or after the cut.
						pending[b] = true
						break
					}
					m = redelivery(b)
				}
			}
		}
		switch rand.IntN(4) {
		case 0:
			// Or right after a first delivery: nothing synced the journal
			// since the claim it carries.
			b := fmt.Sprintf("r%d-last", round)
			live[b] = 0
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.SendReceipt(ctx, "/queue/"+queue, []byte(b))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			m := redelivery(b)
			last = "MESSAGE " + b + " with delivery-count " + m.Get("delivery-count")
		case 1:
			// Or right after a redelivery.
			for _, b := range order {
				if m := held[b]; live[b] > 0 && !pending[b] {
					if err := request(c, stomp.NewFrame("NACK", "id", m.Get("ack"))); err != nil {
						t.Fatalf("NACK %s: %v", b, err)
					}
					nNacks++
					m = redelivery(b)
					last = "MESSAGE " + b + " with delivery-count " + m.Get("delivery-count")
					break
				}
			}
		case 2:
			// Or right after the RECEIPT of a DISCONNECT that follows
			// ACKs without receipts: it comes once everything sent
			// before it is durable.
			n := 0
			for _, b := range order {
				if m := held[b]; live[b] > 0 && !pending[b] && n < 20 {
					if err := c.AckBuffered(m); err != nil {
						t.Fatalf("ACK %s: %v", b, err)
					}
					acked[b] = true
					delete(live, b)
					nAcks++
					n++
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.Disconnect(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			last = fmt.Sprintf("RECEIPT of a DISCONNECT after %d ACKs without receipts", n)
		}
		t.Logf("round %d: %d live messages, %d acked so far; cut right after the %s", round, len(live), len(acked), last)
		p.cut()
		c.Close()
	}
	t.Logf("cuts %d, ACKs %d, NACKs %d, redeliveries after cuts checked %d, fsyncs %d, %.1fs",
		p.cuts, nAcks, nNacks, redelivered, p.fsyncs+p.fs.Fsyncs(), time.Since(start).Seconds())
	if len(acked) < cuts*10 || redelivered < cuts*10 {
		t.Errorf("only %d ACKs and %d redeliveries after cuts: the test exercised little", len(acked), redelivered)
	}
}

// TestPowerCut_DeadLetters: with max_deliveries = 3 a consumer NACKs (with
// receipts, several at a time) every delivery, so each message goes to
// DLQ.<queue> at its third NACK, or (every other round) lets every
// delivery's ack-timeout (30 ms) expire, so each goes there at its third
// timeout; in NACK rounds every tenth message is NACKed with requeue:false
// instead, which dead-letters it at once. The power is cut at a random
// moment of that, 6 times (a fresh queue each time). After each restart
// every message is in exactly one of the queue and its DLQ, never both,
// never neither; one whose dead-lettering NACK was receipted is in the
// DLQ; every dead letter has dlq-reason max-deliveries and
// dlq-delivery-count 3 (nack: REASON and 1 for requeue:false); a message
// left in the queue comes back with a delivery-count above any seen
// before the cut, and never above max_deliveries (one delivered 3 times
// before the cut goes to the DLQ instead).
func TestPowerCut_DeadLetters(t *testing.T) {
	start := time.Now()
	const maxDeliveries = 3
	// Every dead-lettering logs a warning: the last --log-level wins.
	p := newPowerCutArgs(t, []string{"--log-level", "error"}, true, "full", `checkpoint_interval = "100ms"`,
		"[queues]", fmt.Sprintf("max_deliveries = %d", maxDeliveries), `redelivery_delay_min = "1ms"`, `redelivery_delay_max = "1ms"`)
	var totalDead, totalMoved int
	refused := func(b string) bool { return strings.HasSuffix(b, "0") }
	for round := 0; round < 6; round++ {
		timeouts := round%2 == 1
		queue := "pc-dlq-" + strconv.Itoa(round)
		dlq := "DLQ." + queue // queues.dead_letter_prefix, default "DLQ."
		c := dial2(t, p.addr)
		var bodies []string
		for i := range 100 {
			bodies = append(bodies, fmt.Sprintf("%s:%d", queue, i))
		}
		sendAll(t, c, queue, bodies, nil)

		var mu sync.Mutex
		seen := map[string]int{}  // highest delivery-count before the cut
		dead := map[string]bool{} // dead-lettering NACK receipted
		third := 0                // third deliveries seen (timeouts)
		enough := make(chan struct{})
		target := 1 + rand.IntN(70)
		hdrs := []stomp.Header{{Key: "prefetch-count", Value: "20"}}
		if timeouts {
			hdrs = append(hdrs, stomp.Header{Key: "ack-timeout", Value: "30"})
		}
		sub, err := c.Subscribe("/queue/"+queue, "client-individual", hdrs...)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range sub.C() {
				n, _ := strconv.Atoi(m.Get("delivery-count"))
				b := string(m.Body)
				mu.Lock()
				seen[b] = max(seen[b], n)
				if timeouts && n >= maxDeliveries {
					if third++; third == target {
						close(enough)
					}
				}
				mu.Unlock()
				if timeouts {
					continue
				}
				// Every tenth message is refused for good at once.
				refuse := refused(b)
				nack := stomp.NewFrame("NACK", "id", m.Get("ack"))
				if refuse {
					nack = stomp.NewFrame("NACK", "id", m.Get("ack"), "requeue", "false", "reason", "power-cut test")
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if request(c, nack) != nil {
						return // the power was cut
					}
					if n >= maxDeliveries || refuse {
						mu.Lock()
						dead[b] = true
						if len(dead) == target {
							close(enough)
						}
						mu.Unlock()
					}
				}()
			}
		}()
		select {
		case <-enough:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: fewer than %d messages dead-lettered in 20 s", queue, target)
		}
		// Not synchronisation: the cut comes at a random moment of the load
		// (for timeouts: before or after the 30 ms of the deliveries seen).
		time.Sleep(time.Duration(rand.IntN(10)+rand.IntN(2)*rand.IntN(60)) * time.Millisecond)
		p.cut()
		c.Close()
		wg.Wait()

		c = dial2(t, p.addr)
		inQ, lastQ := drainQueue(t, c, queue, 200*time.Millisecond)
		inD, lastD := drainQueue(t, c, dlq, 200*time.Millisecond)
		c.Close()
		for _, b := range bodies {
			switch q, d := inQ[b], inD[b]; {
			case q+d == 0:
				t.Errorf("%s: %s in neither the queue nor %s after the power cut (delivered %d times before)", queue, b, dlq, seen[b])
			case q > 0 && d > 0:
				t.Errorf("%s: %s both in the queue and in %s after the power cut", queue, b, dlq)
			case q+d > 1:
				t.Errorf("%s: %s stored %d times", queue, b, q+d)
			case dead[b] && q > 0:
				t.Errorf("%s: %s back in the queue (delivery-count %s) after the RECEIPT of the NACK that dead-lettered it", queue, b, lastQ[b].Get("delivery-count"))
			case q > 0:
				if n := deliveryCount(t, lastQ[b]); n < seen[b]+1 {
					t.Errorf("%s: %s delivered with delivery-count %d after the cut, but delivery %d was seen before", queue, b, n, seen[b])
				} else if n > maxDeliveries {
					t.Errorf("%s: %s delivered with delivery-count %d after the cut, max_deliveries is %d", queue, b, n, maxDeliveries)
				}
			case d > 0:
				m := lastD[b]
				reason, count := "max-deliveries", maxDeliveries
				if !timeouts && refused(b) {
					reason, count = "nack: power-cut test", 1
				}
				if m.Get("dlq-reason") != reason || m.Get("dlq-delivery-count") != strconv.Itoa(count) || m.Get("dlq-original-destination") != "/queue/"+queue {
					t.Errorf("%s: dead letter %s has dlq-reason %q, dlq-delivery-count %q, dlq-original-destination %q",
						queue, b, m.Get("dlq-reason"), m.Get("dlq-delivery-count"), m.Get("dlq-original-destination"))
				}
			}
		}
		for b := range inQ {
			if !strings.HasPrefix(b, queue+":") {
				t.Errorf("%s: unknown message %q", queue, b)
			}
		}
		for b := range inD {
			if !strings.HasPrefix(b, queue+":") {
				t.Errorf("%s: unknown message %q in %s", queue, b, dlq)
			}
		}
		totalDead += len(dead)
		totalMoved += len(inD)
		how := "NACKs"
		if timeouts {
			how = "ack timeouts"
		}
		t.Logf("%s (%s): dead-lettering NACKs receipted %d, third deliveries seen %d, in %s after the cut %d, left in the queue %d", queue, how, len(dead), third, dlq, len(inD), len(inQ))
		if t.Failed() {
			break
		}
	}
	t.Logf("cuts %d, dead-lettering NACKs receipted %d, dead letters after the cuts %d, fsyncs %d, %.1fs",
		p.cuts, totalDead, totalMoved, p.fsyncs+p.fs.Fsyncs(), time.Since(start).Seconds())
}

// TestPowerCut_DedupIds: producers SEND with dedup-id headers and receipts
// while a consumer ACKs (with receipts) what it gets; the power is cut at a
// random moment, 4 times (a fresh queue each time). After each restart
// every id sent is sent again: an id whose RECEIPT came before the cut
// gets a RECEIPT with duplicate:true naming the message its first RECEIPT
// named, consumed or not. The queue then holds every id at most once: not
// at all if its ACK was receipted, once if it never reached the consumer.
func TestPowerCut_DedupIds(t *testing.T) {
	start := time.Now()
	p := newPowerCut(t, "full", `checkpoint_interval = "100ms"`)
	var totalReceipted int
	for round := 0; round < 4; round++ {
		queue := "pc-dedup-" + strconv.Itoa(round)
		var mu sync.Mutex
		receipted := map[string]string{} // id -> message-id of its RECEIPT
		var attempted []string
		delivered := map[string]bool{} // reached the consumer
		consumed := map[string]bool{}  // its ACK receipted
		target := 20 + rand.IntN(400)
		enough := make(chan struct{})
		var wg sync.WaitGroup
		cc := dial2(t, p.addr)
		sub, err := cc.Subscribe("/queue/"+queue, "client-individual", stomp.Header{Key: "prefetch-count", Value: "10"})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cc.Close()
			for m := range sub.C() {
				id := string(m.Body)
				mu.Lock()
				delivered[id] = true
				mu.Unlock()
				if request(cc, stomp.NewFrame("ACK", "id", m.Get("ack"))) != nil {
					return // the power was cut
				}
				mu.Lock()
				consumed[id] = true
				mu.Unlock()
			}
		}()
		for w := range 3 {
			c := dial2(t, p.addr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				for seq := 0; ; seq++ {
					id := fmt.Sprintf("%s:%d:%d", queue, w, seq)
					mu.Lock()
					attempted = append(attempted, id)
					mu.Unlock()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					r, err := c.SendReceipt(ctx, "/queue/"+queue, []byte(id), stomp.Header{Key: "dedup-id", Value: id})
					cancel()
					if err != nil {
						return // the power was cut
					}
					mu.Lock()
					receipted[id] = r.Get("message-id")
					if len(receipted) == target {
						close(enough)
					}
					mu.Unlock()
				}
			}()
		}
		select {
		case <-enough:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: fewer than %d SENDs receipted in 20 s", queue, target)
		}
		p.cut()
		wg.Wait()

		c := dial2(t, p.addr)
		dup := 0
		chans := make([]<-chan client.Result, len(attempted))
		for i, id := range attempted {
			ch, err := c.SendAsync("/queue/"+queue, []byte(id), stomp.Header{Key: "dedup-id", Value: id})
			if err != nil {
				t.Fatalf("resend %s: %v", id, err)
			}
			chans[i] = ch
		}
		for i, id := range attempted {
			var r *stomp.Frame
			select {
			case res := <-chans[i]:
				if res.Err != nil {
					t.Fatalf("resend %s: %v", id, res.Err)
				}
				r = res.Receipt
			case <-time.After(20 * time.Second):
				t.Fatalf("resend %s: no RECEIPT in 20 s", id)
			}
			if r.Get("duplicate") == "true" {
				dup++
			}
			if mid, ok := receipted[id]; ok {
				if r.Get("duplicate") != "true" {
					t.Errorf("%s: %s receipted before the power cut, sent again after it: RECEIPT without duplicate:true (%v)", queue, id, r.Headers)
				} else if r.Get("message-id") != mid {
					t.Errorf("%s: %s: duplicate RECEIPT names message %s, the first RECEIPT named %s", queue, id, r.Get("message-id"), mid)
				}
			}
		}
		seen, _ := drainQueue(t, c, queue, 200*time.Millisecond)
		c.Close()
		sent := map[string]bool{}
		for _, id := range attempted {
			sent[id] = true
			_, rc := receipted[id]
			switch n := seen[id]; {
			case n > 1:
				t.Errorf("%s: %s (receipted before the cut: %v) stored %d times", queue, id, rc, n)
			case n == 1 && consumed[id]:
				t.Errorf("%s: %s stored again after the cut, though its ACK was receipted before it (SEND receipted: %v)", queue, id, rc)
			case n == 0 && !delivered[id]:
				t.Errorf("%s: %s (receipted before the cut: %v) never consumed, not in the queue after it was sent again", queue, id, rc)
			}
		}
		for id := range seen {
			if !sent[id] {
				t.Errorf("%s: unknown message %q", queue, id)
			}
		}
		totalReceipted += len(receipted)
		t.Logf("%s: receipted before the cut %d (consumed %d), sent %d, duplicates after the cut %d", queue, len(receipted), len(consumed), len(attempted), dup)
		if t.Failed() {
			break
		}
	}
	t.Logf("cuts %d, dedup ids receipted before cuts %d, fsyncs %d, %.1fs", p.cuts, totalReceipted, p.fsyncs+p.fs.Fsyncs(), time.Since(start).Seconds())
}

// TestPowerCut_Transactions: workers take two messages from a source queue
// (client-individual), then BEGIN, SEND three messages to a target queue,
// ACK the two, COMMIT with a receipt; the power is cut at a random moment,
// 5 times (fresh queues each time). After each restart every transaction
// is all or nothing: its three SENDs are in the target and its two
// messages gone from the source, or its SENDs absent and its messages
// still in the source. Every receipted COMMIT is all. Every source message
// is either in the source or acked by a transaction that is there.
func TestPowerCut_Transactions(t *testing.T) {
	start := time.Now()
	p := newPowerCut(t, "full", `checkpoint_interval = "100ms"`)
	const sends, acks, srcSize = 3, 2, 300
	type txn struct {
		id        string
		acked     []string
		receipted bool
	}
	var totalTx, totalCommitted, totalApplied int
	for round := 0; round < 5; round++ {
		src, dst := "pc-tx-src-"+strconv.Itoa(round), "pc-tx-dst-"+strconv.Itoa(round)
		c := dial2(t, p.addr)
		var bodies []string
		for i := range srcSize {
			bodies = append(bodies, fmt.Sprintf("%s:%d", src, i))
		}
		sendAll(t, c, src, bodies, nil)
		c.Close()

		var mu sync.Mutex
		var txs []*txn
		committed := 0
		target := 1 + rand.IntN(40)
		enough := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 3 {
			c := dial2(t, p.addr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				sub, err := c.Subscribe("/queue/"+src, "client-individual", stomp.Header{Key: "prefetch-count", Value: strconv.Itoa(acks)})
				if err != nil {
					return
				}
				for n := 0; ; n++ {
					var got []*stomp.Frame
					for len(got) < acks {
						select {
						case m, ok := <-sub.C():
							if !ok {
								return // the power was cut
							}
							got = append(got, m)
						case <-time.After(5 * time.Second):
							return // the source is empty
						}
					}
					tx := &txn{id: fmt.Sprintf("%s:w%d:%d", dst, w, n)}
					for _, m := range got {
						tx.acked = append(tx.acked, string(m.Body))
					}
					mu.Lock()
					txs = append(txs, tx)
					mu.Unlock()
					if c.Begin(tx.id) != nil {
						return
					}
					th := stomp.Header{Key: "transaction", Value: tx.id}
					for i := range sends {
						if c.Send("/queue/"+dst, []byte(tx.id+":"+strconv.Itoa(i)), th) != nil {
							return
						}
						if i < len(got) && c.Ack(got[i], th) != nil {
							return
						}
					}
					if request(c, stomp.NewFrame("COMMIT", "transaction", tx.id)) != nil {
						return
					}
					mu.Lock()
					tx.receipted = true
					committed++
					if committed == target {
						close(enough)
					}
					mu.Unlock()
				}
			}()
		}
		select {
		case <-enough:
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: fewer than %d COMMITs receipted in 20 s", round, target)
		}
		// Not synchronisation: the cut comes at a random moment of the load.
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		p.cut()
		wg.Wait()

		c = dial2(t, p.addr)
		inDst, _ := drainQueue(t, c, dst, 200*time.Millisecond)
		inSrc, _ := drainQueue(t, c, src, 200*time.Millisecond)
		c.Close()
		applied, stored := 0, map[string]bool{}
		ackedBy := map[string]string{}
		for _, tx := range txs {
			present := 0
			for i := range sends {
				b := tx.id + ":" + strconv.Itoa(i)
				stored[b] = true
				switch inDst[b] {
				case 0:
				case 1:
					present++
				default:
					t.Errorf("%s: SEND %s of transaction %s stored %d times", dst, b, tx.id, inDst[b])
				}
			}
			gone := 0
			for _, b := range tx.acked {
				if inSrc[b] == 0 {
					gone++
				}
			}
			switch {
			case present == sends && gone == acks:
				applied++
				for _, b := range tx.acked {
					ackedBy[b] = tx.id
				}
			case present == 0 && gone == 0 && !tx.receipted:
			default:
				t.Errorf("transaction %s (COMMIT receipted: %v) after the power cut: %d of %d SENDs stored, %d of %d ACKs applied",
					tx.id, tx.receipted, present, sends, gone, acks)
			}
		}
		for b, n := range inDst {
			if !stored[b] {
				t.Errorf("%s: unknown message %q stored %d times", dst, b, n)
			}
		}
		for _, b := range bodies {
			switch n := inSrc[b]; {
			case n == 0 && ackedBy[b] == "":
				t.Errorf("%s: %s gone after the power cut, though no transaction that ACKed it is there", src, b)
			case n > 1:
				t.Errorf("%s: %s stored %d times", src, b, n)
			}
		}
		totalTx += len(txs)
		totalCommitted += committed
		totalApplied += applied
		t.Logf("round %d: transactions begun %d, COMMITs receipted %d, applied after the cut %d", round, len(txs), committed, applied)
		if t.Failed() {
			break
		}
	}
	t.Logf("cuts %d, transactions %d, COMMITs receipted %d, applied after the cuts %d, fsyncs %d, %.1fs",
		p.cuts, totalTx, totalCommitted, totalApplied, p.fsyncs+p.fs.Fsyncs(), time.Since(start).Seconds())
}

// TestPowerCut_AcksUnderLoad: producers SEND with receipts while consumers
// (client-individual) ACK or NACK each delivery with a receipt; the power
// is cut at a random moment of that, 5 times, on one queue. No message is
// delivered after the RECEIPT of its ACK, every delivery of a message has
// a higher delivery-count than any before it (across cuts too), and at
// the end every receipted message not acked is still there, once.
func TestPowerCut_AcksUnderLoad(t *testing.T) {
	start := time.Now()
	p := newPowerCut(t, "full", `checkpoint_interval = "100ms"`,
		"[queues]", "max_deliveries = 1000", `redelivery_delay_min = "1ms"`, `redelivery_delay_max = "1ms"`)
	const queue, cuts = "pc-acks-load", 5
	var mu sync.Mutex
	receipted := map[string]bool{}
	acked := map[string]bool{}   // ACK receipted
	ackSent := map[string]bool{} // an ACK sent: applied if it was journaled before a cut, RECEIPT or not
	maxCount := map[string]int{}
	var deliveries, nAcks int
	for life := 0; life < cuts; life++ {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 2 {
			c := dial2(t, p.addr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				for seq := 0; ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					b := fmt.Sprintf("l%d-p%d-%d", life, w, seq)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := c.SendReceipt(ctx, "/queue/"+queue, []byte(b))
					cancel()
					if err != nil {
						return // the power was cut
					}
					mu.Lock()
					receipted[b] = true
					mu.Unlock()
				}
			}()
		}
		for range 3 {
			c := dial2(t, p.addr)
			sub, err := c.Subscribe("/queue/"+queue, "client-individual", stomp.Header{Key: "prefetch-count", Value: "8"})
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				for m := range sub.C() {
					b := string(m.Body)
					n, _ := strconv.Atoi(m.Get("delivery-count"))
					mu.Lock()
					deliveries++
					if acked[b] {
						t.Errorf("life %d: %s delivered (delivery-count %d) after the RECEIPT of its ACK", life, b, n)
					}
					if n <= maxCount[b] {
						t.Errorf("life %d: %s delivered with delivery-count %d, after a delivery with %d", life, b, n, maxCount[b])
					}
					maxCount[b] = max(maxCount[b], n)
					mu.Unlock()
					cmd := "ACK"
					if rand.IntN(5) == 0 {
						cmd = "NACK"
					} else {
						mu.Lock()
						ackSent[b] = true
						mu.Unlock()
					}
					if request(c, stomp.NewFrame(cmd, "id", m.Get("ack"))) != nil {
						return // the power was cut
					}
					if cmd == "ACK" {
						mu.Lock()
						acked[b] = true
						nAcks++
						mu.Unlock()
					}
				}
			}()
		}
		// served: this daemon has receipted SENDs and ACKs before the cut.
		progress := func() (int, int) {
			mu.Lock()
			defer mu.Unlock()
			return len(receipted), len(acked)
		}
		r0, a0 := progress()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if r, a := progress(); r > r0+50 && a > a0+50 {
				break
			}
			if time.Now().After(deadline) {
				close(stop)
				t.Fatalf("life %d: too few SENDs or ACKs receipted in 15 s", life)
			}
		}
		// Not synchronisation: the cut comes at a random moment of the load.
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
		p.cut()
		close(stop)
		wg.Wait() // no frame of a life before the cut is looked at after it
		if t.Failed() {
			t.FailNow()
		}
	}
	c := dial2(t, p.addr)
	seen, last := drainQueue(t, c, queue, 300*time.Millisecond)
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	lost := 0
	for b := range receipted {
		if !ackSent[b] && seen[b] == 0 {
			if lost++; lost <= 10 {
				t.Errorf("%s receipted, never acked, gone after the power cuts", b)
			}
		}
	}
	for b, n := range seen {
		switch c := deliveryCount(t, last[b]); {
		case acked[b]:
			t.Errorf("%s delivered after the last cut (delivery-count %d), after the RECEIPT of its ACK", b, c)
		case n > 1:
			t.Errorf("%s stored %d times", b, n)
		case c <= maxCount[b]:
			t.Errorf("%s delivered after the last cut with delivery-count %d, after a delivery with %d", b, c, maxCount[b])
		}
	}
	t.Logf("cuts %d, SENDs receipted %d, deliveries %d, ACKs receipted %d, left at the end %d, lost %d, fsyncs %d, %.1fs",
		p.cuts, len(receipted), deliveries, nAcks, len(seen), lost, p.fsyncs+p.fs.Fsyncs(), time.Since(start).Seconds())
}
