package bridge_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_InTempReplyToNotTheBridges: a message coming in with a
// reply-to naming a temporary queue (/temp-queue/NAME as a NATS publisher
// or a non-Herald peer sets it, or /queue/#tmp.SESSION.NAME, a Herald
// peer's rewriting of it) names a queue private to a connection on the
// other side; it means nothing here. The bridge drops that reply-to
// (counted with the headers dropped) instead of letting its local SEND
// turn it into a temporary queue of the bridge's own connection; a
// reply-to naming an ordinary queue crosses as it is.
//
// Before: the local SEND rewrote /temp-queue/rN to /queue/#tmp.BRIDGE.rN,
// a queue of the bridge's connection that nobody reads (replies were
// lost), and with more distinct names than queues.max_queues the
// appliance failed the bridge's connection ("too many temporary queues"),
// a link failure and a reconnection every max_queues messages.
func TestBridge_InTempReplyToNotTheBridges(t *testing.T) {
	cl := natstest.Start(t, 1)
	b := testbroker.Start(t, func(c *appliance.Config) { c.Queues.MaxQueues = 3 })
	in := startBridge(t, b, oneNode(jsBridge("backbone", "site-b", "in", cl.URLs(), appliance.BridgeMap{Local: "/queue/requests", Remote: "sites.b.requests"}), "sites.b.requests"))
	waitUp(t, in)
	_, js := natstest.Connect(t, cl.URLs())
	replyTos := []string{"/temp-queue/r0", "/temp-queue/r1", "/temp-queue/r2", "/temp-queue/r3", "/temp-queue/r4", "/queue/#tmp.1.r5", "/queue/replies"}
	for i, rt := range replyTos {
		m := nats.NewMsg("sites.b.requests")
		m.Data = []byte(strconv.Itoa(i))
		m.Header.Set("reply-to", rt)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID("req-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(context.Background(), "/queue/requests", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	for i, rt := range replyTos {
		select {
		case f := <-sub.C():
			if got := string(f.Body); got != strconv.Itoa(i) {
				t.Fatalf("message %d: got %q", i, got)
			}
			want := ""
			if rt == "/queue/replies" {
				want = rt
			}
			if got := f.Get("reply-to"); got != want {
				t.Errorf("message %d, sent with reply-to:%s, arrived with reply-to:%q, want %q", i, rt, got, want)
			}
			if err := cb.Ack(f); err != nil {
				t.Fatal(err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d of %d messages arrived within 15s; view %+v", i, len(replyTos), in.View().Directions[0])
		}
	}
	d := in.View().Directions[0]
	if d.Failures != 0 {
		t.Errorf("%d link failures (last error %q), want none", d.Failures, d.LastError)
	}
	if d.HeadersDropped != 6 {
		t.Errorf("headers_dropped_total %d, want 6 (the temporary reply-tos)", d.HeadersDropped)
	}
}

// TestBridge_OutTempReplyToDropped: a local requester's reply-to
// /temp-queue/NAME is rewritten here to /queue/#tmp.SESSION.NAME, which
// names a temporary queue of this appliance; at a Herald peer the same
// name is one of the peer's own connections' temporary queues, where a
// responder's reply would land in a stranger's queue. The bridge drops
// such a reply-to going out (counted); a reply-to naming an ordinary queue
// goes as it is.
//
// Before: it crossed as /queue/#tmp.SESSION.NAME.
func TestBridge_OutTempReplyToDropped(t *testing.T) {
	a := testbroker.Start(t, nil)
	b := testbroker.Start(t, nil)
	push := startBridge(t, a, stompBridge("push-b", "site-a", "out", b.Addr, appliance.BridgeMap{Local: "/queue/orders", Remote: "/queue/from-a"}))
	waitUp(t, push)
	pa := a.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, rt := range []string{"/temp-queue/mine", "/queue/replies"} {
		if _, err := pa.SendReceipt(ctx, "/queue/orders", []byte(strconv.Itoa(i)), stomp.Header{Key: "reply-to", Value: rt}); err != nil {
			t.Fatal(err)
		}
	}
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(ctx, "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", "/queue/replies"} {
		select {
		case f := <-sub.C():
			if got := f.Get("reply-to"); got != want {
				t.Errorf("message %q arrived at the peer with reply-to:%q, want %q", f.Body, got, want)
			}
			if err := cb.Ack(f); err != nil {
				t.Fatal(err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("message %d did not arrive within 15s", i)
		}
	}
	if d := push.View().Directions[0]; d.HeadersDropped != 1 {
		t.Errorf("headers_dropped_total %d, want 1", d.HeadersDropped)
	}
}
