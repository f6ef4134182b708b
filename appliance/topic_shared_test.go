package appliance_test

import (
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// A topic message is encoded once per protocol version and shared by its
// subscribers, each with its own head: every subscriber still gets the
// frame its version and subscription call for (subscription id escaped,
// an ack header only for client acks, a header its version cannot carry
// left out, the publisher's dropped-before removed).
func TestTopic_SharedEncodingPerSubscriber(t *testing.T) {
	tb := mustStartBroker(t, nil)
	type subr struct {
		r       *raw
		version string
		id      string
		ack     string
	}
	subs := []*subr{
		{version: "1.2", id: "a:1", ack: "auto"},
		{version: "1.2", id: "b", ack: "client"},
		{version: "1.1", id: "c:3", ack: "client-individual"},
		{version: "1.1", id: "d", ack: "auto"},
	}
	for _, s := range subs {
		s.r = dialRaw(t, tb)
		s.r.connect(s.version)
		esc := map[string]string{"a:1": `a\c1`, "c:3": `c\c3`}[s.id]
		if esc == "" {
			esc = s.id
		}
		s.r.write("SUBSCRIBE\nid:" + esc + "\ndestination:/topic/shared\nack:" + s.ack + "\nreceipt:r\n\n\x00")
		if f := s.r.frame(); f.Command != stomp.CmdReceipt {
			t.Fatalf("got %s, want the SUBSCRIBE receipt", f.Command)
		}
	}
	p := dialRaw(t, tb)
	p.connect("1.2")
	// k holds a CR (1.2 escapes it, 1.1 cannot carry it), c a colon.
	p.write("SEND\ndestination:/topic/shared\nk:x\\ry\nc:p\\cq\ndropped-before:7\nreceipt:s\n\nbody-1\x00")
	if f := p.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("got %s, want the SEND receipt", f.Command)
	}
	for _, s := range subs {
		f := s.r.frame()
		if f.Command != stomp.CmdMessage || string(f.Body) != "body-1" {
			t.Fatalf("%s: got %s %q", s.id, f.Command, f.Body)
		}
		if got := f.Get("subscription"); got != s.id {
			t.Errorf("%s: subscription %q", s.id, got)
		}
		if f.Get("destination") != "/topic/shared" || f.Get("message-id") == "" {
			t.Errorf("%s: destination %q message-id %q", s.id, f.Get("destination"), f.Get("message-id"))
		}
		if ack, ok := f.Headers.Lookup("ack"); (s.ack != "auto") != ok || (ok && ack != f.Get("message-id")) {
			t.Errorf("%s (ack %s): ack header %q (present %v), message-id %q", s.id, s.ack, ack, ok, f.Get("message-id"))
		}
		if f.Get("c") != "p:q" {
			t.Errorf("%s: header c = %q, want p:q", s.id, f.Get("c"))
		}
		k, ok := f.Headers.Lookup("k")
		if s.version == "1.2" && k != "x\ry" || s.version == "1.1" && ok {
			t.Errorf("%s (STOMP %s): header k = %q (present %v)", s.id, s.version, k, ok)
		}
		if _, ok := f.Headers.Lookup("dropped-before"); ok {
			t.Errorf("%s: the publisher's dropped-before reached a subscriber", s.id)
		}
		n := 0
		for _, h := range f.Headers {
			if h.Key == "subscription" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d subscription headers", s.id, n)
		}
	}
}
