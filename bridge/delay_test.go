package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// delayHeaders are the headers that delay a queue message on SEND.
var delayHeaders = []string{"delay", "AMQ_SCHEDULED_DELAY"}

// receiveDelayed reads one message from sub, acknowledging it, and checks
// it arrived between min and max after sent, without a delay header.
func receiveDelayed(t *testing.T, c *client.Conn, sub *client.Subscription, sent time.Time, min, max time.Duration) {
	t.Helper()
	select {
	case f := <-sub.C():
		el := time.Since(sent)
		if f.Get("ack") != "" {
			if err := c.Ack(f); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range delayHeaders {
			if v := f.Get(k); v != "" {
				t.Errorf("message %q arrived with %s:%s: the delay crossed the bridge", f.Body, k, v)
			}
		}
		if el < min || el > max {
			t.Errorf("message %q arrived %s after it was sent, want between %s and %s (a delay served twice takes twice as long)", f.Body, el.Round(10*time.Millisecond), min, max)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no message within 15s")
	}
}

// TestBridge_DelayServedOnceStompPeer: a queue message sent here with a
// delay (delay or AMQ_SCHEDULED_DELAY) waits here, then crosses to a
// Herald peer over STOMP, where it is delivered at once: the delay was
// served where the message was sent.
//
// Before: the bridge carried the delay header, and the peer delayed the
// message a second time (about 3s for a 1.5s delay).
func TestBridge_DelayServedOnceStompPeer(t *testing.T) {
	a := testbroker.Start(t, nil)
	b := testbroker.Start(t, nil)
	push := startBridge(t, a, stompBridge("push-b", "site-a", "out", b.Addr, appliance.BridgeMap{Local: "/queue/orders", Remote: "/queue/from-a"}))
	waitUp(t, push)
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(context.Background(), "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	pa := a.Dial(t)
	for _, k := range delayHeaders {
		t.Run(k, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sent := time.Now()
			if _, err := pa.SendReceipt(ctx, "/queue/orders", []byte(k), stomp.Header{Key: k, Value: "1500"}); err != nil {
				t.Fatal(err)
			}
			receiveDelayed(t, cb, sub, sent, 1400*time.Millisecond, 2700*time.Millisecond)
		})
	}
}

// TestBridge_DelayServedOnceJetStream: the same through JetStream, from
// one Herald to another: the stream's copy carries no delay, and the far
// Herald delivers at once. A delay a plain NATS publisher sets is still
// honoured coming in.
//
// Before: the delay header went into the stream, and the far Herald
// delayed the message a second time.
func TestBridge_DelayServedOnceJetStream(t *testing.T) {
	cl := natstest.Start(t, 1)
	a := testbroker.Start(t, nil)
	b := testbroker.Start(t, nil)
	outA := startBridge(t, a, oneNode(jsBridge("backbone", "site-a", "out", cl.URLs(), appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"}), "sites.a.orders"))
	inB := startBridge(t, b, oneNode(jsBridge("backbone", "site-b", "in", cl.URLs(), appliance.BridgeMap{Local: "/queue/from-a", Remote: "sites.a.orders"}), "sites.a.orders"))
	waitUp(t, outA, inB)
	nc, js := natstest.Connect(t, cl.URLs())
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(context.Background(), "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	pa := a.Dial(t)
	for _, k := range delayHeaders {
		t.Run(k, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sent := time.Now()
			if _, err := pa.SendReceipt(ctx, "/queue/orders", []byte(k), stomp.Header{Key: k, Value: "1500"}); err != nil {
				t.Fatal(err)
			}
			receiveDelayed(t, cb, sub, sent, 1400*time.Millisecond, 2700*time.Millisecond)
		})
	}
	t.Run("stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "HERALD")
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= 2; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range delayHeaders {
				if v := m.Header.Get(k); v != "" {
					t.Errorf("stream message %d carries %s:%s", seq, k, v)
				}
			}
		}
	})
	t.Run("nats-publisher", func(t *testing.T) {
		// A plain NATS publisher's delay is served here, once.
		m := nats.NewMsg("sites.a.orders")
		m.Data = []byte("from nats")
		m.Header.Set("delay", "1500")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sent := time.Now()
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID("plain-1")); err != nil {
			t.Fatal(err)
		}
		select {
		case f := <-sub.C():
			if el := time.Since(sent); el < 1400*time.Millisecond {
				t.Errorf("a NATS publisher's delay:1500 message arrived after %s: its delay was not honoured", el.Round(10*time.Millisecond))
			}
			if err := cb.Ack(f); err != nil {
				t.Fatal(err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the NATS publisher's message did not arrive within 15s")
		}
	})
	_ = nc
}
