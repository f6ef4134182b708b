package main

import (
	"runtime"
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
		{1, gcPercentMax},      // capped
		{4 << 20, 1500},        // 4 MiB live: goal 64 MiB
		{16 << 20, 300},        // 16 MiB: goal 64 MiB
		{32 << 20, 100},        // half the floor: Go's default from here
		{1 << 30, 100},         // a large heap as before
		{floor/2 - 1<<20, 107}, // just below half
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
	if got := gcHeapFloor(0); got != gcHeapFloorMax {
		t.Errorf("floor without a limit %d, want %d", got, gcHeapFloorMax)
	}
	if got := gcHeapFloor(128 << 20); got != 16<<20 {
		t.Errorf("floor for a 128 MiB limit %d, want 16 MiB", got)
	}
	if got := gcHeapFloor(8 << 30); got != gcHeapFloorMax {
		t.Errorf("floor for an 8 GiB limit %d, want %d", got, gcHeapFloorMax)
	}
}

// The tuner runs after real collections and sets what gcPercent says for
// the live heap it reads: with a small live heap and a 1 GiB floor, well
// above 100.
func TestGCTuner_SetsAfterCollections(t *testing.T) {
	var mu sync.Mutex
	var got []int
	tu := newGCTuner(1<<30, func(p int) {
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
