package auth

import "testing"

// /kv/ patterns grant on key-value keys only, segment by segment as the
// others.
func TestPattern_KV(t *testing.T) {
	p, err := ParsePattern("/kv/config.site1.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kind, name string
		want       bool
	}{
		{KindKV, "config.site1.db", true},
		{KindKV, "config.site1.>", true},
		{KindKV, "config.site2.db", false},
		{KindKV, "config.>", false},
		{KindTopic, "config.site1.db", false},
		{KindQueue, "config.site1.db", false},
	} {
		if got := p.Covers(c.kind, c.name); got != c.want {
			t.Errorf("/kv/config.site1.> covers %s%s = %v, want %v", c.kind, c.name, got, c.want)
		}
	}
	if _, err := ParsePattern("/kv/"); err == nil {
		t.Error("/kv/ with no name accepted")
	}
}
