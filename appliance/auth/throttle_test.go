package auth

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

var throttleSeeds = flag.Int("throttle.seeds", 200, "seeds of TestThrottle_Sim")

// TestThrottle_Sim drives the throttle with random failures from a few
// sources (compared with an unbounded model) and from many (bounded memory,
// never more than the model's delay).
func TestThrottle_Sim(t *testing.T) {
	for seed := range uint64(*throttleSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { simThrottle(t, seed) })
	}
}

func simThrottle(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	th := &Throttle{Base: 100 * time.Millisecond, Max: 3 * time.Second, Window: time.Minute, MaxSources: 50}
	type mstate struct {
		fails int
		last  int64
	}
	model := map[string]*mstate{}
	many := r.IntN(2) == 0 // many sources: eviction in play
	nsrc := 10
	if many {
		nsrc = 500
	}
	now := int64(r.IntN(1e6))
	for step := range 2000 {
		now += int64(r.ExpFloat64() * float64([]int{100, 5000, 70000}[r.IntN(3)]))
		src := fmt.Sprintf("10.0.%d.%d", r.IntN(nsrc)/256, r.IntN(nsrc)%256)
		m := model[src]
		if m == nil || now-m.last > time.Minute.Milliseconds() {
			m = &mstate{}
			model[src] = m
		}
		m.fails++
		m.last = now
		want := min(th.Base<<min(m.fails-1, 30), th.Max)
		got := th.Fail(src, now)
		if got < th.Base || got > th.Max {
			t.Fatalf("seed %d step %d: delay %s outside [%s, %s]", seed, step, got, th.Base, th.Max)
		}
		if th.Sources() > th.MaxSources {
			t.Fatalf("seed %d step %d: %d sources remembered, bound %d", seed, step, th.Sources(), th.MaxSources)
		}
		if many {
			if got > want {
				t.Fatalf("seed %d step %d: delay %s above the model's %s", seed, step, got, want)
			}
		} else if got != want {
			t.Fatalf("seed %d step %d: source %s failure %d: delay %s, want %s", seed, step, src, m.fails, got, want)
		}
	}
}

func TestThrottle_GrowsCapsAndForgets(t *testing.T) {
	th := NewThrottle()
	var got []time.Duration
	for i := range 7 {
		got = append(got, th.Fail("192.0.2.1", int64(i*1000)))
	}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	if d := th.Fail("192.0.2.2", 7000); d != 250*time.Millisecond {
		t.Fatalf("another source starts at %s, want 250ms", d)
	}
	if d := th.Fail("192.0.2.1", 6000+th.Window.Milliseconds()+1); d != 250*time.Millisecond {
		t.Fatalf("after a quiet window: %s, want 250ms", d)
	}
}

func TestSource(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":            "192.0.2.7",
		"::ffff:192.0.2.7":     "192.0.2.7",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"2001:db8:1:3:ffff::1": "2001:db8:1:3::/64",
	} {
		if got := Source(netip.MustParseAddr(in)); got != want {
			t.Errorf("Source(%s) = %s, want %s", in, got, want)
		}
	}
}
