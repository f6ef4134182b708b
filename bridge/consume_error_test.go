package bridge_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridgeInConsumerDeletedWarnsAndRecovers: the in direction's durable
// consumer is deleted under it (an operator's `nats consumer rm`). The
// pull ends with "consumer deleted", which the bridge logs at Warn (it was
// logged at Debug only), connects again and makes the consumer anew; every
// message of the stream reaches the local queue once, in order, the ones
// brought in before the deletion not twice.
func TestBridgeInConsumerDeletedWarnsAndRecovers(t *testing.T) {
	const durable = "herald-site-b-backbone"
	cl := natstest.Start(t, 1)
	_, js := natstest.Connect(t, cl.URLs())
	b := testbroker.Start(t, nil)
	cfg := oneNode(jsBridge("backbone", "site-b", "in", cl.URLs(), appliance.BridgeMap{Local: "/queue/from-a", Remote: "sites.a.orders"}), "sites.a.orders")
	rec := newWarnRecorder()
	br, err := bridge.New(bridge.Options{Config: appliance.BridgeDefaults(cfg), LocalAddr: b.Addr, Logger: slog.New(rec), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	br.Start()
	t.Cleanup(br.Close)
	waitUp(t, br)

	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := js.Publish(ctx, "sites.a.orders", []byte(strconv.Itoa(i)), jetstream.WithMsgID("m-"+strconv.Itoa(i)))
			cancel()
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	waitQueued := func(k uint64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			q, _ := b.B.Queue("from-a")
			if q.Messages >= int(k) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the local queue holds %d messages, want %d; bridge %+v", q.Messages, k, br.View().Directions[0])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	publish(0, 50)
	waitQueued(50)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = js.DeleteConsumer(ctx, "HERALD", durable)
	cancel()
	if err != nil {
		t.Fatalf("delete the bridge's consumer: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(rec.matching("JetStream pull failed")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no Warn line about the failed pull within 30 s of deleting the consumer; lines: %v", rec.matching(""))
		}
		time.Sleep(20 * time.Millisecond)
	}
	l := rec.matching("JetStream pull failed")[0]
	if !strings.Contains(strings.ToLower(l.attrs["err"]), "consumer deleted") || l.attrs["consumer"] != durable || l.attrs["direction"] != "in" {
		t.Errorf("the Warn line does not name the deletion, the consumer and the direction: %q %v", l.msg, l.attrs)
	}
	publish(50, 100)
	c := b.Dial(t)
	sub, err := c.SubscribeReceipt(context.Background(), "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	receiveExactly(t, c, sub, 100, 60*time.Second, 2*time.Second)
}
