package main

import (
	"testing"

	"github.com/herald-mq/herald/appliance"
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
