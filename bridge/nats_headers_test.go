package bridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// TestBridge_HeaderKeysNATSRefusesAreEncoded: a STOMP header key that is
// legal in STOMP and in Herald but not in a NATS header ('/', '@' here;
// also ':', '=', non-ASCII...) goes out as herald-bridge-pct-KEY with the
// key percent-encoded, and the messages behind it go out too.
//
// Before: nats.go refused every publish of such a message
// (ErrBadHeaderMsg) before sending it: the link failed and came back
// forever, and nothing behind the message went out.
func TestBridge_HeaderKeysNATSRefusesAreEncoded(t *testing.T) {
	cl := natstest.Start(t, 1)
	a := testbroker.Start(t, nil)
	br := startBridge(t, a, oneNode(jsBridge("backbone", "site-a", "out", cl.URLs(),
		appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"}), "sites.a.orders"))
	waitUp(t, br)
	_, js := natstest.Connect(t, cl.URLs())
	pa := a.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pa.SendReceipt(ctx, "/queue/orders", []byte("first"), stomp.Header{Key: "trace/id", Value: "1"}, stomp.Header{Key: "k@y", Value: "2"}); err != nil {
		t.Fatal(err)
	}
	sendAll(t, pa, "/queue/orders", 0, 5, nil)
	if got := waitStreamCount(t, js, "sites.a.orders", 6, 10*time.Second); got != 6 {
		d := br.View().Directions[0]
		t.Fatalf("stream holds %d of 6 messages; out direction: state %s, failures %d, reconnects %d, last error %q", got, d.State, d.Failures, d.Reconnects, d.LastError)
	}
	st, err := js.Stream(ctx, "HERALD")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{bridge.HeaderPct + "trace%2Fid": "1", bridge.HeaderPct + "k%40y": "2"} {
		if g := m.Header.Get(k); g != v {
			t.Errorf("stream message 1: header %s is %q, want %q (headers %v)", k, g, v, m.Header)
		}
	}
	if d := br.View().Directions[0]; d.Failures != 0 {
		t.Errorf("%d failures (last error %q)", d.Failures, d.LastError)
	}
}

// TestBridge_HeadersCrossNATSUnchanged: header values NATS would alter
// (nats.go trims leading and trailing white space and turns CR and LF into
// spaces; the NATS header format cannot carry them) and keys NATS refuses
// cross a JetStream stream from one Herald to another unchanged: they go
// percent-encoded under herald-bridge-pct-KEY, and the in direction
// decodes them.
//
// Before: the values arrived trimmed and with CR/LF turned into spaces.
// (The review's test read them from the stream under their own keys and
// wanted them as sent: no NATS header can hold "a\nb" or a value with
// leading spaces, so what the stream holds is their encoding, checked
// here too.)
func TestBridge_HeadersCrossNATSUnchanged(t *testing.T) {
	cl := natstest.Start(t, 1)
	a := testbroker.Start(t, nil)
	b := testbroker.Start(t, nil)
	out := startBridge(t, a, oneNode(jsBridge("out-a", "site-a", "out", cl.URLs(),
		appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"}), "sites.a.orders"))
	in := startBridge(t, b, oneNode(jsBridge("in-b", "site-b", "in", cl.URLs(),
		appliance.BridgeMap{Local: "/queue/from-a", Remote: "sites.a.orders"}), "sites.a.orders"))
	waitUp(t, out, in)
	_, js := natstest.Connect(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	want := map[string]string{
		"padded": "  x  ", "lines": "a\nb", "crlf": "a\r\nb", "tab": "\tt", "pct": "100% \n",
		"trace/id": "1", "k@y": "é", "clé": "v", "a:b": "c", "x=y": "z", "plain": "as is", bridge.HeaderPct + "mine": "%zz",
	}
	var hdrs []stomp.Header
	for k, v := range want {
		hdrs = append(hdrs, stomp.Header{Key: k, Value: v})
	}
	if _, err := a.Dial(t).SendReceipt(ctx, "/queue/orders", []byte("m"), hdrs...); err != nil {
		t.Fatal(err)
	}
	sub, err := b.Dial(t).SubscribeReceipt(ctx, "/queue/from-a", "auto")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-sub.C():
		for k, v := range want {
			if g, ok := f.Headers.Lookup(k); !ok || g != v {
				t.Errorf("header %s: sent %q, B has %q (headers %v)", k, v, g, f.Headers)
			}
		}
		for _, h := range f.Headers {
			if strings.HasPrefix(h.Key, bridge.HeaderPct) && h.Key != bridge.HeaderPct+"mine" {
				t.Errorf("B has an encoded header: %s: %q", h.Key, h.Value)
			}
		}
	case <-ctx.Done():
		t.Fatalf("the message did not reach B: out %+v, in %+v", out.View().Directions[0], in.View().Directions[0])
	}
	// In the stream: the plain header as it is, the others encoded.
	st, err := js.Stream(ctx, "HERALD")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "sites.a.orders")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"plain": "as is", bridge.HeaderPct + "padded": "%20%20x%20%20", bridge.HeaderPct + "lines": "a%0Ab"} {
		if g := m.Header.Get(k); g != v {
			t.Errorf("the stream's header %s: %q, want %q", k, g, v)
		}
	}
}

// TestBridge_NATSMultiValuedHeaderJoined: a NATS header with several
// values comes in as one STOMP header, the values joined with commas.
//
// Before: they went into the local SEND as repeated STOMP headers; Herald
// keeps the first of a repeated header, so every later value was lost.
func TestBridge_NATSMultiValuedHeaderJoined(t *testing.T) {
	cl := natstest.Start(t, 1)
	b := testbroker.Start(t, nil)
	br := startBridge(t, b, oneNode(jsBridge("backbone", "site-b", "in", cl.URLs(),
		appliance.BridgeMap{Local: "/queue/from-nats", Remote: "sites.x.orders"}), "sites.x.orders"))
	waitUp(t, br)
	_, js := natstest.Connect(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := nats.NewMsg("sites.x.orders")
	m.Header.Add("route", "eu")
	m.Header.Add("route", "us")
	m.Data = []byte("0")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(ctx, "/queue/from-nats", "auto")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-sub.C():
		var got []string
		for _, h := range f.Headers {
			if h.Key == "route" {
				got = append(got, h.Value)
			}
		}
		if strings.Join(got, ",") != "eu,us" && f.Get("route") != "eu,us" {
			t.Errorf("NATS header route: [eu us]; the local message has %q (headers %v)", got, f.Headers)
		}
	case <-ctx.Done():
		t.Fatal("the message did not come in")
	}
}
