package multicast

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The least held stream sequence, kept as records are held and dropped,
// is always what a scan of the held records finds, and holds answers as
// the map does.
func TestRStream_MinHeldFollowsChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	st := &rstream{held: map[uint64]held{}}
	for i := range 20000 {
		switch op := rng.IntN(10); {
		case op < 5:
			st.put(rng.Uint64N(500), held{})
		case op < 9 && len(st.held) > 0:
			// drop the least one half the time (as drain does), else any
			q := st.minHeld()
			if rng.IntN(2) == 0 {
				for k := range st.held {
					q = k
					break
				}
			}
			st.del(q)
		case op == 9 && rng.IntN(50) == 0:
			clear(st.held)
			st.hminOK = false
		}
		q := rng.Uint64N(520)
		if _, ok := st.held[q]; st.holds(q) != ok {
			t.Fatalf("step %d: holds(%d) %v, the map says %v", i, q, st.holds(q), ok)
		}
		if len(st.held) > 0 && st.minHeld() != minKey(st.held) {
			t.Fatalf("step %d: minHeld %d, a scan finds %d", i, st.minHeld(), minKey(st.held))
		}
	}
}

// BenchmarkReceiverCore_HolesRepaired: a receiver far behind at 10% loss
// (every 10th datagram lost, all the others held behind the first hole),
// then the repairs in order: each one moves the frontier and the stream's
// least held record is asked for again. The cost per datagram must not grow
// with what is held (it was a scan of every held record per repair).
func BenchmarkReceiverCore_HolesRepaired(b *testing.B) {
	const n = 12000 // below MaxHole: the first hole stays open until repaired
	g := dgb{session: 0x6567000011112222}
	dgs := [][]byte{g.cat(1, 1, CatalogEntry{1, 1, "px.eu"})}
	var repairs [][]byte
	for i := uint64(1); i <= n; i++ {
		if i%10 == 5 {
			repairs = append(repairs, g.rdata(i+1, 1, rec(1, i, "x")))
			continue
		}
		dgs = append(dgs, g.data(i+1, 1, rec(1, i, "x")))
	}
	dgs = append(dgs, repairs...)
	t0 := time.Unix(1700000000, 0)
	b.ResetTimer()
	for range b.N {
		r, err := NewReceiverCore(ReceiverCoreConfig{Rand: rand.New(rand.NewPCG(3, 4))})
		if err != nil {
			b.Fatal(err)
		}
		delivered := 0
		for _, d := range dgs {
			if err := r.Handle(t0, sndAddr, d); err != nil {
				b.Fatal(err)
			}
			ev, _ := r.Ready()
			for _, e := range ev {
				if _, ok := e.(Message); ok {
					delivered++
				}
			}
		}
		if delivered != n {
			b.Fatalf("%d messages delivered, want %d (%+v)", delivered, n, r.Counters())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(dgs)), "ns/datagram")
}
