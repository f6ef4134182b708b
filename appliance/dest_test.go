package appliance

import (
	"errors"
	"testing"
)

// TestParseDest: the segment rules for topic and KV destinations, for SEND and SUBSCRIBE.
func TestParseDest(t *testing.T) {
	for _, c := range []struct {
		d    string
		sub  bool
		ok   bool
		kind destKind
		name string
	}{
		{"/topic/a.b.c", false, true, destTopic, "a.b.c"},
		{"/topic/a", false, true, destTopic, "a"},
		{"/topic/a.*.c", true, true, destTopic, "a.*.c"},
		{"/topic/a.>", true, true, destTopic, "a.>"},
		{"/topic/>", true, true, destTopic, ">"},
		{"/topic/a.>", false, false, 0, ""},  // wildcards only in SUBSCRIBE
		{"/topic/a.>.b", true, false, 0, ""}, // > must be last
		{"/topic/a..b", false, false, 0, ""}, // empty segment
		{"/topic/a.", false, false, 0, ""},   // empty last segment
		{"/topic/.a", false, false, 0, ""},   // empty first segment
		{"/topic/a.b*", true, false, 0, ""},  // * not a whole segment
		{"/kv/cfg.x.y", false, true, destKV, "cfg.x.y"},
		{"/kv/cfg.>", true, true, destKV, "cfg.>"},
		{"/queue/a.b", false, true, destQueue, "a.b"},
		{"/queue/a.*", false, false, 0, ""},
	} {
		kind, name, err := parseDest(c.d, c.sub)
		if c.ok {
			if err != nil || kind != c.kind || name != c.name {
				t.Errorf("parseDest(%q, %v) = %v, %q, %v; want %v, %q, nil", c.d, c.sub, kind, name, err, c.kind, c.name)
			}
		} else if !errors.Is(err, ErrBadDest) {
			t.Errorf("parseDest(%q, %v): got %v, want ErrBadDest", c.d, c.sub, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { parseDest("/topic/prices.eu.fx.eurusd", false) }); n != 0 {
		t.Errorf("parseDest of a topic SEND allocates %v times, want 0 (it runs for every SEND)", n)
	}
}

// A session's remembered destination answers only SENDs to the same one,
// and a SUBSCRIBE's parse (wildcards allowed) never stands in for a SEND's.
func TestSessionParseDest_RemembersOnlySends(t *testing.T) {
	s := &session{}
	for _, c := range []struct {
		d           string
		subscribing bool
		name        string // "" = an error
	}{
		{"/topic/a.b", false, "a.b"},
		{"/topic/a.b", false, "a.b"},
		{"/topic/a.*", true, "a.*"},
		{"/topic/a.*", false, ""},
		{"/topic/a.*", true, "a.*"},
		{"/topic/a.*", false, ""},
		{"/queue/q", false, "q"},
		{"/topic/a..b", false, ""},
		{"/queue/q", false, "q"},
		{"/topic/a.b", false, "a.b"},
	} {
		kind, name, err := s.parseDest(c.d, c.subscribing)
		wk, wn, werr := parseDest(c.d, c.subscribing)
		if name != c.name || (err == nil) != (c.name != "") || kind != wk || name != wn || (err == nil) != (werr == nil) {
			t.Fatalf("parseDest(%q, subscribing %v): got %v %q %v, want %q (parseDest: %v %q %v)", c.d, c.subscribing, kind, name, err, c.name, wk, wn, werr)
		}
	}
}
