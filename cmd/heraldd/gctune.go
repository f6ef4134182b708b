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
// that the next goal is at least gcHeapFloor (GOGC 100 once the live heap
// is past half of it: a large heap behaves as before, and the soft memory
// limit still bounds the whole). GOGC in the environment turns this off.
const (
	gcHeapFloorMax = 64 << 20
	gcPercentMax   = 10000
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
// none): gcHeapFloorMax, or an eighth of a smaller limit.
func gcHeapFloor(limit int64) uint64 {
	if limit > 0 && limit/8 < gcHeapFloorMax {
		return uint64(limit / 8)
	}
	return gcHeapFloorMax
}

// gcTuner sets GOGC after every collection (see above).
type gcTuner struct {
	floor  uint64
	set    func(percent int) // debug.SetGCPercent, or a test's recorder
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
	if p != t.last {
		t.last = p
		t.set(p)
	}
}

func newGCTuner(floor uint64, set func(int)) *gcTuner {
	return &gcTuner{floor: floor, set: set, last: 100,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
}

// tuneGC starts the tuner unless GOGC is set in the environment. Call it
// after the soft memory limit is set.
func tuneGC(log *slog.Logger) {
	if os.Getenv("GOGC") != "" {
		return
	}
	floor := gcHeapFloor(debug.SetMemoryLimit(-1))
	newGCTuner(floor, func(p int) { debug.SetGCPercent(p) }).arm()
	log.Debug("Go heap goal floor set", "bytes", floor)
}
