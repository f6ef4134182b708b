package bridge_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_NATSHeadersHeraldRefusesDoNotStopIn: NATS messages carrying
// headers Herald would refuse in the bridge's local SEND come in without
// them (counted in headers_dropped_total), and so do the messages behind
// them: a header named "transaction" (any NATS publisher may set it), and
// expires, delay and AMQ_SCHEDULED_DELAY with values that are not
// numbers in range.
//
// Before: the local SEND carried them. Herald took "transaction" for a
// STOMP transaction id and answered ERROR "no such transaction", and an
// invalid expires or delay ERROR "invalid header", closing the bridge's
// connection; the in direction sent the message again at every attempt,
// forever, and nothing behind it came in.
func TestBridge_NATSHeadersHeraldRefusesDoNotStopIn(t *testing.T) {
	cl := natstest.Start(t, 1)
	b := testbroker.Start(t, nil)
	br := startBridge(t, b, oneNode(jsBridge("backbone", "site-b", "in", cl.URLs(),
		appliance.BridgeMap{Local: "/queue/from-nats", Remote: "sites.x.orders"}), "sites.x.orders"))
	waitUp(t, br)
	_, js := natstest.Connect(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bad := [][2]string{
		{"transaction", "t-1"}, // e.g. an application's own header
		{"expires", "tomorrow"},
		{"delay", "-5"},
		{"AMQ_SCHEDULED_DELAY", "soon"},
	}
	for i, h := range bad {
		m := nats.NewMsg("sites.x.orders")
		m.Header.Set(h[0], h[1])
		m.Header.Set("seq", strconv.Itoa(i))
		m.Data = []byte(strconv.Itoa(i))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	n := len(bad) + 3
	for i := len(bad); i < n; i++ {
		if _, err := js.Publish(ctx, "sites.x.orders", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(ctx, "/queue/from-nats", "auto")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		select {
		case f := <-sub.C():
			if got := string(f.Body); got != strconv.Itoa(i) {
				t.Fatalf("message %d: got %q", i, got)
			}
			if i < len(bad) {
				if v := f.Get(bad[i][0]); v != "" {
					t.Errorf("message %d came in with %s: %q", i, bad[i][0], v)
				}
				if f.Get("seq") != strconv.Itoa(i) {
					t.Errorf("message %d lost its other headers: %v", i, f.Headers)
				}
			}
		case <-ctx.Done():
			d := br.View().Directions[0]
			t.Fatalf("%d of %d messages came in; in direction: state %s, failures %d, last error %q", i, n, d.State, d.Failures, d.LastError)
		}
	}
	if d := br.View().Directions[0]; d.HeadersDropped != uint64(len(bad)) || d.Failures != 0 {
		t.Errorf("headers dropped %d, want %d; failures %d, want 0 (last error %q)", d.HeadersDropped, len(bad), d.Failures, d.LastError)
	}
}
