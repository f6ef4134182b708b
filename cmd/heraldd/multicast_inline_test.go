package main

import (
	"bytes"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/multicast"
)

// TestLoneInline: a channel's lone_inline follows its profile unless set.
func TestLoneInline(t *testing.T) {
	for _, c := range []struct {
		profile, set string
		want         bool
	}{
		{"", "", true}, // low-latency is the default profile
		{"low-latency", "", true},
		{"dashboard", "", false},
		{"low-latency", "off", false},
		{"dashboard", "on", true},
		{"", "off", false},
	} {
		if got := loneInline(appliance.ChannelConfig{Profile: c.profile, LoneInline: c.set}); got != c.want {
			t.Errorf("profile %q, lone_inline %q: %v, want %v", c.profile, c.set, got, c.want)
		}
	}
}

// A topic message's headers go to the multicast sender as they are (no
// copy per message), and encode the same as a copy would.
func TestMcastHeaders_SameWithoutCopy(t *testing.T) {
	h := stomp.Headers{{Key: "destination", Value: "/topic/a"}, {Key: "k", Value: "v:1"}, {Key: "", Value: ""}}
	var copied []multicast.Header
	for _, kv := range h {
		copied = append(copied, multicast.Header{Key: kv.Key, Value: kv.Value})
	}
	got, err1 := multicast.AppendMessage(nil, mcastHeaders(h), []byte("body"))
	want, err2 := multicast.AppendMessage(nil, copied, []byte("body"))
	if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
		t.Fatalf("encoded %x (%v), want %x (%v)", got, err1, want, err2)
	}
	if n := testing.AllocsPerRun(100, func() { _ = mcastHeaders(h) }); n != 0 {
		t.Fatalf("%v allocations per conversion, want none", n)
	}
	if mcastHeaders(nil) != nil {
		t.Fatal("no headers: want nil")
	}
}
