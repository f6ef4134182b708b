package appliance_test

import (
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// subscribeRaw connects r in version v and subscribes it to dest (ack auto),
// waiting for the subscription's RECEIPT.
func subscribeRaw(t *testing.T, r *raw, v, dest string) {
	t.Helper()
	r.connect(v)
	r.write("SUBSCRIBE\ndestination:" + dest + "\nid:s\nack:auto\nreceipt:sub\n\n\x00")
	if f := r.frame(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "sub" {
		t.Fatalf("got %s %v, want RECEIPT receipt-id:sub", f.Command, f.Headers)
	}
}

// TestSend_NULInHeaderRefused: a SEND whose header holds a NUL followed by a
// forged frame is refused with an ERROR naming the NUL and the connection
// closed; subscribers of 1.0 and 1.2, on a topic and a queue, get nothing of
// it: the next frame each reads is the next real message.
func TestSend_NULInHeaderRefused(t *testing.T) {
	tb := mustStartBroker(t, nil)
	type sub struct {
		name string
		r    *raw
	}
	var subs []sub
	for _, v := range []string{stomp.V10, stomp.V12} {
		for _, dest := range []string{"/topic/inj", "/queue/inj." + v} {
			r := dialRaw(t, tb)
			subscribeRaw(t, r, v, dest)
			subs = append(subs, sub{v + " " + dest, r})
		}
	}
	forged := "MESSAGE\ndestination:/queue/inj\nsubscription:s\nmessage-id:forged\n\nforged\x00"
	for _, pv := range []string{stomp.V10, stomp.V12} {
		for _, dest := range []string{"/topic/inj", "/queue/inj.1.0", "/queue/inj.1.2"} {
			p := dialRaw(t, tb)
			p.connect(pv)
			p.write("SEND\ndestination:" + dest + "\nx:1\x00" + forged + "\n\nforged body\x00")
			f := p.frame()
			if f.Command != stomp.CmdError || !strings.Contains(f.Get("message"), "NUL byte in a header line") {
				t.Fatalf("producer %s to %s: got %s %v %q, want ERROR with a message naming the NUL byte in a header line", pv, dest, f.Command, f.Headers, f.Body)
			}
			p.closed()
		}
	}
	c := tb.Dial(t)
	for _, dest := range []string{"/topic/inj", "/queue/inj.1.0", "/queue/inj.1.2"} {
		if _, err := c.SendReceipt(ctxT(t), dest, []byte("real"), hdr("x", "1")); err != nil {
			t.Fatalf("send to %s: %v", dest, err)
		}
	}
	for _, s := range subs {
		f := s.r.frame()
		if f.Command != stomp.CmdMessage || string(f.Body) != "real" || f.Get("x") != "1" || f.Get("message-id") == "forged" {
			t.Errorf("subscriber %s: got %s %v %q, want the real MESSAGE (x:1, body \"real\")", s.name, f.Command, f.Headers, f.Body)
		}
	}
}

// TestSend_HeadersA10SubscriberCannotCarry: a 1.2 producer's headers holding
// (escaped) LF or CR, or a colon in the key, reach a 1.2 subscriber as sent
// and are left out of the MESSAGE to a 1.0 subscriber, which has no escaping:
// written raw they would forge headers (a key "content-length:1") or frames.
func TestSend_HeadersA10SubscriberCannotCarry(t *testing.T) {
	tb := mustStartBroker(t, nil)
	s10, s12 := dialRaw(t, tb), dialRaw(t, tb)
	subscribeRaw(t, s10, stomp.V10, "/topic/esc")
	subscribeRaw(t, s12, stomp.V12, "/topic/esc")
	p := dialRaw(t, tb)
	p.connect(stomp.V12)
	p.write("SEND\ndestination:/topic/esc\nreceipt:p\n" +
		`lf:1\n\nA\cMESSAGE` + "\n" +
		`cr:a\rb` + "\n" +
		`content-length\c1:x` + "\n" +
		"ok:yes\n\nA\x00")
	if f := p.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("producer: got %s %v %q, want RECEIPT", f.Command, f.Headers, f.Body)
	}
	want12 := map[string]string{"lf": "1\n\nA:MESSAGE", "cr": "a\rb", "content-length:1": "x", "ok": "yes"}
	f := s12.frame()
	for k, v := range want12 {
		if got, ok := f.Headers.Lookup(k); !ok || got != v {
			t.Errorf("1.2 subscriber header %q: got %q (present %v), want %q", k, got, ok, v)
		}
	}
	f = s10.frame()
	if f.Command != stomp.CmdMessage || string(f.Body) != "A" || f.Get("ok") != "yes" {
		t.Fatalf("1.0 subscriber: got %s %v %q, want MESSAGE ok:yes body \"A\"", f.Command, f.Headers, f.Body)
	}
	var lengths []string
	for _, h := range f.Headers {
		switch h.Key {
		case "lf", "cr":
			t.Errorf("1.0 subscriber: got header %q:%q, want it left out", h.Key, h.Value)
		case "content-length":
			lengths = append(lengths, h.Value)
		}
		if strings.ContainsAny(h.Key+h.Value, "\n\r\x00") {
			t.Errorf("1.0 subscriber: got header %q:%q, want no LF, CR or NUL", h.Key, h.Value)
		}
	}
	if len(lengths) != 1 || lengths[0] != "1" {
		t.Errorf("1.0 subscriber: got content-length headers %q, want [\"1\"]", lengths)
	}
}
