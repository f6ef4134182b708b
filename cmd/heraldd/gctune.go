package main

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// A floor under the Go heap's goal. The collector starts a cycle when the
// heap has grown by GOGC percent (100) of what was live after the last one.
// A broker's live heap is often a few MiB while it allocates tens of MiB a
// second on a busy topic, so it collected ten or more times a second, and
// the collections' CPU (mark workers and allocation assists, about a tenth
// of heraldd's in a 4 x 50k msg/s fan-out profile) came in the middle of
// deliveries: a latency tail. After every collection heraldd sets GOGC so
// that the next goal is at least gcHeapFloor, while clients hold less than
// an eighth of the memory budget. Otherwise (and once the live heap is past
// half the floor) GOGC is Go's 100: under a flood the heap collects as
// before, and the soft memory limit still bounds the whole. GOGC in the
// environment turns this off.
//
// GOGC is at most gcPercentMax (400): Go's goal counts goroutine stacks
// too, multiplied by GOGC. Uncapped (GOGC in the thousands for a 1 MiB live
// heap and a 36 MiB floor), 200 connections' stacks lifted a flood's peak
// resident set from about 210 to 280 MiB in a 384 MiB cgroup; capped at
// 400 it stays at 204-218 MiB, and a 4 x 50k fan-out kept most of the
// gain.
const (
	gcHeapFloorMax = 64 << 20
	gcPercentMax   = 400
)

// gcPercent is the GOGC that makes the heap's next goal about floor when
// live bytes survived the last collection: never below Go's default of
// 100, never above gcPercentMax.
func gcPercent(live, floor uint64) int {
	if live == 0 {
		return gcPercentMax
	}
	if live >= floor/2 {
		return 100
	}
	return int(min(((floor-live)*100+live-1)/live, gcPercentMax)) // rounded up
}

// gcHeapFloor is the floor for a soft memory limit of limit bytes (0:
// none) and a memory budget (memory.budget_bytes, in force) of budget
// bytes: gcHeapFloorMax, or an eighth of a smaller limit, or half of a
// smaller budget. An operator who gives heraldd a 16 MiB budget gets a heap
// that collects as Go's default does.
func gcHeapFloor(limit, budget int64) uint64 {
	f := int64(gcHeapFloorMax)
	if limit > 0 {
		f = min(f, limit/8)
	}
	if budget > 0 {
		f = min(f, budget/2)
	}
	return uint64(f)
}

// gcTuner sets GOGC after every collection (see above).
type gcTuner struct {
	floor  uint64
	held   func() (held, budget int64) // the broker's memory budget, or nil
	set    func(percent int)           // debug.SetGCPercent, or a test's recorder
	sample []metrics.Sample
	last   int
}

// gcSentinel is garbage made on purpose: its cleanup runs after the
// collection that found it unreachable. It holds a pointer so that it is
// not packed with other small objects by the allocator.
type gcSentinel struct{ _ *byte }

func (t *gcTuner) arm() {
	runtime.AddCleanup(&gcSentinel{}, func(t *gcTuner) { t.tune(); t.arm() }, t)
}

func (t *gcTuner) tune() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := gcPercent(t.sample[0].Value.Uint64(), t.floor)
	if t.held != nil {
		if held, budget := t.held(); held > budget/8 {
			p = 100
		}
	}
	if p != t.last {
		t.last = p
		t.set(p)
	}
}

func newGCTuner(floor uint64, held func() (int64, int64), set func(int)) *gcTuner {
	return &gcTuner{floor: floor, held: held, set: set, last: 100,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
}

// tuneGC starts the tuner unless GOGC is set in the environment; held is
// the broker's Broker.MemoryHeld. Call it after the soft memory limit is
// set.
func tuneGC(log *slog.Logger, held func() (int64, int64)) {
	if os.Getenv("GOGC") != "" {
		return
	}
	_, budget := held()
	floor := gcHeapFloor(debug.SetMemoryLimit(-1), budget)
	newGCTuner(floor, held, func(p int) { debug.SetGCPercent(p) }).arm()
	log.Debug("Go heap goal floor set", "bytes", floor)
}
