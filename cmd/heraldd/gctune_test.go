package main

import (
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

func TestGCPercent(t *testing.T) {
	const floor = 64 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, gcPercentMax},
		{1, gcPercentMax},       // capped
		{4 << 20, gcPercentMax}, // 4 MiB live: 1500 for the floor, capped
		{16 << 20, 300},         // 16 MiB: goal 64 MiB
		{32 << 20, 100},         // half the floor: Go's default from here
		{1 << 30, 100},          // a large heap as before
		{floor/2 - 1<<20, 107},  // just below half
	} {
		got := gcPercent(c.live, floor)
		if got != c.want {
			t.Errorf("gcPercent(%d, %d) = %d, want %d", c.live, floor, got, c.want)
		}
		if c.live > 0 && got < gcPercentMax {
			if goal := c.live + c.live*uint64(got)/100; goal < floor && got > 100 {
				t.Errorf("live %d: goal %d below the floor %d", c.live, goal, floor)
			}
		}
	}
	for _, c := range []struct {
		limit, budget int64
		want          uint64
	}{
		{0, 0, gcHeapFloorMax},
		{128 << 20, 0, 16 << 20},         // an eighth of a small limit
		{8 << 30, 0, gcHeapFloorMax},     // capped
		{8 << 30, 16 << 20, 8 << 20},     // half of a small budget
		{288 << 20, 153 << 20, 36 << 20}, // the flood test's cgroup
		{18 << 30, 9830 << 20, gcHeapFloorMax},
	} {
		if got := gcHeapFloor(c.limit, c.budget); got != c.want {
			t.Errorf("gcHeapFloor(%d, %d) = %d, want %d", c.limit, c.budget, got, c.want)
		}
	}
}

// The tuner runs after real collections and sets what gcPercent says for
// the live heap it reads: with a small live heap and a 1 GiB floor, well
// above 100.
func TestGCTuner_SetsAfterCollections(t *testing.T) {
	var mu sync.Mutex
	var got []int
	tu := newGCTuner(1<<30, nil, func(p int) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	tu.arm()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no GOGC set within 10 s of collections")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if got[0] <= 100 {
		t.Fatalf("GOGC %d set for a test binary's heap under a 1 GiB floor, want above 100", got[0])
	}
}

// While clients hold more than an eighth of the memory budget the heap
// collects as Go's default does, whatever the floor.
func TestGCTuner_DefaultWhileClientsHoldMemory(t *testing.T) {
	var got []int
	held := int64(0)
	tu := newGCTuner(1<<30, func() (int64, int64) { return held, 1000 }, func(p int) { got = append(got, p) })
	runtime.GC()
	tu.tune()
	if len(got) != 1 || got[0] <= 100 {
		t.Fatalf("clients holding nothing: set %v, want one GOGC above 100", got)
	}
	held = 126
	tu.tune()
	if len(got) != 2 || got[1] != 100 {
		t.Fatalf("clients holding 126 of a 1000-byte budget: set %v, want 100 after the first", got)
	}
}

// GOGC in the environment is the operator's: heraldd starts no tuner and
// the percent stays what the runtime was given.
func TestTuneGC_GOGCEnvironmentWins(t *testing.T) {
	t.Setenv("GOGC", "100")
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	tuneGC(slog.New(slog.DiscardHandler), func() (int64, int64) { return 0, 1 << 30 })
	for range 3 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC %d after collections with GOGC=100 in the environment, want 100 (no tuner)", got)
	}
}
