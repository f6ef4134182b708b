package bridge

import (
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// TestSubjectCovers: which stream subjects lie within a map's remote
// pattern (the out direction warns about the others).
func TestSubjectCovers(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"sites.a.orders", "sites.a.orders", true},
		{"sites.a.>", "sites.a.orders", true},
		{"sites.a.>", "sites.a.*.x", true},
		{"sites.a.>", "sites.a", false},
		{"sites.a.>", "sites.>", false},
		{"sites.*.orders", "sites.a.orders", true},
		{"sites.*.orders", "sites.*.orders", true},
		{"sites.a.orders", "sites.*.orders", false},
		{"sites.a.orders", "sites.>", false},
		{">", "anything.at.all", true},
		{"sites.a", "sites.a.b", false},
		{"sites.a.b", "sites.a", false},
	} {
		if got := subjectCovers(tc.p, tc.s); got != tc.want {
			t.Errorf("subjectCovers(%q, %q) = %v, want %v", tc.p, tc.s, got, tc.want)
		}
	}
	maps := []appliance.BridgeMap{{Local: "/queue/orders", Remote: "sites.a.orders"}, {Local: "/topic/x.>", Remote: "sites.a.x.>"}}
	if got := uncovered([]string{"sites.a.orders", "sites.a.x.>", "sites.>", "mesh.>"}, maps); len(got) != 2 || got[0] != "sites.>" || got[1] != "mesh.>" {
		t.Errorf("uncovered: %v, want [sites.> mesh.>]", got)
	}
}
