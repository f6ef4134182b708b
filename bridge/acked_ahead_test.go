package bridge_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridgeInAckedAheadByEarlierRun: an earlier run of the in direction
// brought stream messages 1..20 into the local queue and acknowledged
// them, but the acknowledgement of 11 never reached the server (it was
// published while the connection to NATS was reconnecting, or the
// consumer's leader died with it), and the run ended (kill -9) before 11
// came again. The consumer's ack floor is 10; 12..20 are acknowledged and
// are never delivered again. The next run starts at the floor: 11 comes
// again after its ack wait, then 21..40.
//
// Before: the sequencer, having passed 11, waited for 12 (the stream's
// next message of the consumer's subject, found by its probe) forever,
// holding 21..40, and nothing logged it: the pull was healthy (heartbeats
// came) and the server delivered nothing more (21..40 pending, held).
// TestBridgeKillNine stalled that way at site B (597 of 1500 after 300 s,
// B killed with SIGKILL while a NATS node was down).
func TestBridgeInAckedAheadByEarlierRun(t *testing.T) {
	const durable = "herald-site-b-backbone"
	cl := natstest.Start(t, 1)
	_, js := natstest.Connect(t, cl.URLs())
	b := testbroker.Start(t, nil)
	cfg := oneNode(jsBridge("backbone", "site-b", "in", cl.URLs(), appliance.BridgeMap{Local: "/queue/from-a", Remote: "sites.a.orders"}), "sites.a.orders")

	// A first run makes the stream and the consumer, with nothing to bring.
	br := startBridgeB(t, b, cfg)
	waitUp(t, br)
	br.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 40; i++ {
		if _, err := js.Publish(ctx, "sites.a.orders", []byte(strconv.Itoa(i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	st, err := js.Stream(ctx, "HERALD")
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The bridge's dedup id of stream message q (js:BRIDGE:STREAM:CREATED:q).
	id := func(q uint64) string {
		return "js:backbone:HERALD:" + strconv.FormatInt(si.Created.UnixNano(), 36) + ":" + strconv.FormatUint(q, 10)
	}

	// The earlier run: 1..20 delivered, committed locally, acknowledged
	// but for 11.
	cons, err := js.Consumer(ctx, "HERALD", durable)
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for len(got) < 20 {
		batch, err := cons.Fetch(20-len(got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got = append(got, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Dial(t)
	for _, m := range got {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		q := md.Sequence.Stream
		if _, err := c.SendReceipt(ctx, "/queue/from-a", m.Data(), stomp.Header{Key: "dedup-id", Value: id(q)}); err != nil {
			t.Fatal(err)
		}
		if q == 11 {
			continue // its acknowledgement is lost
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("ack %d: %v", q, err)
		}
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.AckFloor.Stream != 10 || ci.NumAckPending != 1 {
		t.Fatalf("consumer: ack floor %d, %d pending; want 10 and 1 (11)", ci.AckFloor.Stream, ci.NumAckPending)
	}

	// The next run.
	br = startBridgeB(t, b, cfg)
	waitUp(t, br)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bridge: %+v", br.View().Directions[0])
		}
	})
	sub, err := c.SubscribeReceipt(ctx, "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	receiveExactly(t, c, sub, 40, 30*time.Second, 2*time.Second)
}
