package bridge_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_QueueNATSRefusesDeadLettered: a queue message NATS refuses
// for good (over the server's max_payload: nats.go refuses the publish
// before sending it) goes to the queue's dead-letter queue here, with
// dlq-original-destination and dlq-reason, counted (dead_lettered_total);
// the queue messages behind it go out in order and the link does not fail.
//
// Before: its publish failed the link at every attempt (retried with
// back-off), and nothing behind it went out.
func TestBridge_QueueNATSRefusesDeadLettered(t *testing.T) {
	cl := natstest.Start(t, 1)
	a := testbroker.Start(t, nil)
	cfg := oneNode(jsBridge("backbone", "site-a", "out", cl.URLs(),
		appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"}), "sites.a.orders")
	br := startBridge(t, a, cfg)
	waitUp(t, br)
	_, js := natstest.Connect(t, cl.URLs())
	pa := a.Dial(t)
	sendAll(t, pa, "/queue/orders", 0, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pa.SendReceipt(ctx, "/queue/orders", bytes.Repeat([]byte("x"), 2<<20)); err != nil { // over NATS's 1 MiB
		t.Fatal(err)
	}
	sendAll(t, pa, "/queue/orders", 1, 4, nil)
	if got := waitStreamCount(t, js, "sites.a.orders", 5, 10*time.Second); got != 5 {
		t.Fatalf("stream holds %d of the 5 queue messages NATS takes: the out direction is stuck behind one it refuses; view %+v", got, br.View().Directions[0])
	}
	streamHolds(t, js, "sites.a.orders", upTo(5), 2*time.Minute)
	checkDeadLettered(t, pa, "/queue/DLQ.orders", "/queue/orders", 2<<20, "maximum payload exceeded")
	d := br.View().Directions[0]
	if d.DeadLettered != 1 || d.Failures != 0 {
		t.Errorf("dead_lettered_total %d, want 1; failures %d, want 0 (last error %q)", d.DeadLettered, d.Failures, d.LastError)
	}
	if q, _ := a.Queue("orders"); q.Messages != 0 {
		t.Errorf("queue orders still holds %d messages", q.Messages)
	}
}

// checkDeadLettered reads one message of size bytes from dlq, which must
// name orig as where it came from, and as the reason the bridge's NACK
// (dlq-reason "nack: bridge backbone: ...") with the refusal, why.
func checkDeadLettered(t *testing.T, c *client.Conn, dlq, orig string, size int, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := c.SubscribeReceipt(ctx, dlq, "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe(ctx)
	select {
	case f := <-sub.C():
		if got := f.Get("dlq-original-destination"); got != orig {
			t.Errorf("%s: dlq-original-destination %q, want %q", dlq, got, orig)
		}
		if r := f.Get("dlq-reason"); !strings.HasPrefix(r, "nack: bridge backbone: ") || !strings.Contains(r, why) {
			t.Errorf("%s: dlq-reason %q, want the bridge's NACK naming %q", dlq, r, why)
		}
		if len(f.Body) != size {
			t.Errorf("%s: a message of %d bytes, want %d", dlq, len(f.Body), size)
		}
		if err := c.Ack(f); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Errorf("nothing in %s within 10s", dlq)
	}
}

// TestBridge_QueueStreamRefusesDeadLettered: a queue message the stream
// refuses when it reaches it (larger than the stream's max_msg_size: an
// error answer to the publish, with the forwards behind it on their way)
// goes to the queue's dead-letter queue, counted; the link fails once (the
// forwards behind it, which the stream refused for their order condition,
// go again) and the messages behind it are stored once each, in order.
//
// Before: the answer failed the link, the message was sent again at every
// attempt, and nothing behind it went out.
func TestBridge_QueueStreamRefusesDeadLettered(t *testing.T) {
	cl := natstest.Start(t, 1)
	_, js := natstest.Connect(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HERALD", Subjects: []string{"sites.a.orders"},
		MaxMsgSize: 4096, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	a := testbroker.Start(t, nil)
	br := startBridge(t, a, oneNode(jsBridge("backbone", "site-a", "out", cl.URLs(),
		appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"}), "sites.a.orders"))
	waitUp(t, br)
	pa := a.Dial(t)
	// Sent without waiting for each receipt, so that the bridge has
	// messages in flight behind the big one.
	var rs []<-chan client.Result
	for i := range 20 {
		body := []byte(strconv.Itoa(i))
		if i == 5 {
			body = bytes.Repeat([]byte("x"), 8192)
		}
		ch, err := pa.SendAsync("/queue/orders", body)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, ch)
	}
	for _, ch := range rs {
		select {
		case r := <-ch:
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		case <-ctx.Done():
			t.Fatal("no receipt")
		}
	}
	if got := waitStreamCount(t, js, "sites.a.orders", 19, 15*time.Second); got != 19 {
		t.Fatalf("stream holds %d of the 19 messages it takes: the out direction is stuck behind one it refuses; view %+v", got, br.View().Directions[0])
	}
	checkDeadLettered(t, pa, "/queue/DLQ.orders", "/queue/orders", 8192, "message size exceeds maximum allowed")
	d := br.View().Directions[0]
	if d.DeadLettered != 1 {
		t.Errorf("dead_lettered_total %d, want 1 (last error %q)", d.DeadLettered, d.LastError)
	}
	// The stream's order: 0..4, 6..19.
	want := upTo(20)
	streamHolds(t, js, "sites.a.orders", append(want[:5:5], want[6:]...), 30*time.Second)
}
