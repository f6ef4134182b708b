package appliance

import (
	"strconv"
	"testing"
)

// A subscription change costs the same with 10 or 50,000 other
// subscriptions: only its own topic's list is copied.
func BenchmarkTopicRegistry_Subscribe(b *testing.B) {
	for _, others := range []int{10, 50000} {
		b.Run("others="+strconv.Itoa(others), func(b *testing.B) {
			br := New(Options{Config: DefaultConfig()})
			r := br.topics
			for i := range others {
				r.add(br, &subscription{name: "metrics.host" + strconv.Itoa(i)})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s := &subscription{name: "metrics.new"}
				r.add(br, s)
				r.remove(s)
			}
		})
	}
}

func TestTopicRegistry_AddRemove(t *testing.T) {
	br := New(Options{Config: DefaultConfig()})
	r := br.topics
	a, b2, w := &subscription{name: "x.y"}, &subscription{name: "x.y"}, &subscription{name: "x.>"}
	r.add(br, a)
	r.add(br, b2)
	r.add(br, w)
	if got := len(r.exactSubs("x.y")); got != 2 {
		t.Fatalf("exact subscriptions of x.y: got %d, want 2", got)
	}
	if got := len(r.wildSubs()); got != 1 {
		t.Fatalf("wildcard subscriptions: got %d, want 1", got)
	}
	r.remove(a)
	if subs := r.exactSubs("x.y"); len(subs) != 1 || subs[0] != b2 {
		t.Fatalf("after removing one: got %v, want [b]", subs)
	}
	r.remove(b2)
	r.remove(w)
	n := 0
	r.rangeExact(func(string, []*subscription) bool { n++; return true })
	if n != 0 || len(r.wildSubs()) != 0 {
		t.Fatalf("after removing all: %d names, %d patterns left", n, len(r.wildSubs()))
	}
}
