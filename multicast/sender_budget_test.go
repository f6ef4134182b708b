package multicast

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

// Repair budgets (docs/multicast-protocol.md, section 3, "Repair budgets"): seeded simulations of
// the sender core. These use only the core's original API so that they also run against the
// sender before the budgets existed (and fail there).

// fill publishes n DATA datagrams of size bytes each (one message each) at t0.
func fillSender(t *testing.T, s *SenderCore, n, size int) {
	t.Helper()
	body := make([]byte, size-HeaderSize-2-RecordHeader-2)
	for i := 0; i < n; i++ {
		if err := s.Publish(t0, "a", body); err != nil {
			t.Fatal(err)
		}
		s.Flush(t0)
	}
	s.Ready()
}

type repairTally struct {
	repaired  map[uint64]int
	bytes     int
	catalogs  int
	ncfRanges map[NCFStatus]int // sequences per NCF status
}

func tallyRepairs(t *testing.T, r *repairTally, bs [][]byte) {
	t.Helper()
	for _, b := range bs {
		var p Packet
		if err := Decode(b, &p); err != nil {
			t.Fatal(err)
		}
		switch {
		case p.Type == TypeRData:
			r.repaired[p.Seq]++
			r.bytes += len(b)
		case p.Type == TypeCatalog:
			r.catalogs++
		case p.Type == TypeNCF:
			for _, rg := range p.Ranges {
				r.ncfRanges[p.Status] += int(rg.To - rg.From + 1)
			}
		}
	}
}

func newRepairTally() *repairTally {
	return &repairTally{repaired: map[uint64]int{}, ncfRanges: map[NCFStatus]int{}}
}

// TestSenderCore_HostileNAKSourceBudget: one source NAKs the whole window every millisecond for
// a second; two honest sources NAK a few random sequences every 10 ms. Every honest sequence is
// repaired, and the repairs the hostile source obtains stay within its per-source budget.
func TestSenderCore_HostileNAKSourceBudget(t *testing.T) {
	const repairRate = 4 << 20
	s := mustSenderCore(t, SenderCoreConfig{RepairRate: repairRate})
	fillSender(t, s, 3000, 1000) // seqs 2..3001
	rng := rand.New(rand.NewPCG(7, 11))
	hostile := netip.MustParseAddrPort("198.18.9.9:5000")
	honest := []netip.AddrPort{netip.MustParseAddrPort("198.18.1.1:40000"), netip.MustParseAddrPort("198.18.1.2:40000")}
	asked := map[uint64]time.Time{}
	var hc, cs [2]uint64
	r := newRepairTally()
	end := t0.Add(time.Second)
	for now := t0; now.Before(end); now = now.Add(time.Millisecond) {
		hc[0]++
		s.Step(now, hostile, nak(t, s.Session(), hc[0], nil, Range{2, 3001}))
		tallyRepairs(t, r, s.Ready())
		if now.Sub(t0)%(10*time.Millisecond) == 0 {
			for i, h := range honest {
				var rs []Range
				for k := 0; k < 3; k++ {
					q := 2 + rng.Uint64N(3000)
					if _, ok := asked[q]; !ok {
						asked[q] = now
					}
					rs = append(rs, Range{q, q})
				}
				cs[i]++
				s.Step(now, h, nak(t, s.Session(), cs[i], nil, rs...))
				tallyRepairs(t, r, s.Ready())
			}
		}
		s.Tick(now)
		tallyRepairs(t, r, s.Ready())
	}
	// Let the queue drain (no more NAKs).
	for now := end; now.Before(end.Add(2 * time.Second)); now = now.Add(time.Millisecond) {
		s.Tick(now)
		tallyRepairs(t, r, s.Ready())
	}
	missed := 0
	for q := range asked {
		if r.repaired[q] == 0 {
			missed++
		}
	}
	srcRate := float64(repairRate / 4)
	bound := srcRate*1.0 + s.sourceBurst() + float64(len(asked)*1100)
	t.Logf("hostile NAKs: %d; honest sequences asked %d, never repaired %d; repair bytes %d (bound %.0f: one source's budget for 1 s plus the honest repairs)",
		hc[0], len(asked), missed, r.bytes, bound)
	if missed != 0 {
		t.Errorf("%d of %d sequences the honest sources asked for were never repaired: the hostile source starved them", missed, len(asked))
	}
	if float64(r.bytes) > bound {
		t.Errorf("repair bytes %d, want at most %.0f: the hostile source got more than its budget", r.bytes, bound)
	}
}

// TestSenderCore_SourceTableKeepsActiveSources: thousands of new sources do not make the sender
// forget an active one (the table used to be cleared wholesale at 4,096 entries, which reset
// every NAK counter and budget).
func TestSenderCore_SourceTableKeepsActiveSources(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	fillSender(t, s, 10, 200)
	a := netip.MustParseAddrPort("198.18.0.1:40000")
	now := t0
	last := uint64(1000)
	s.Step(now, a, nak(t, s.Session(), last, nil, Range{5, 5}))
	s.Ready()
	replays := 0
	for i := 0; i < 10000; i++ {
		now = now.Add(time.Millisecond)
		ip := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		s.Step(now, netip.AddrPortFrom(ip, 40000), nak(t, s.Session(), 1, nil, Range{6, 6}))
		s.Ready()
		if i%100 == 0 { // a stays active
			last++
			s.Step(now, a, nak(t, s.Session(), last, nil, Range{5, 5}))
			s.Ready()
		}
		// A replay of a's last NAK (as a forger with a captured NAK would send) must be dropped.
		before := s.Counters().NAKsDropped
		s.Step(now, a, nak(t, s.Session(), last, nil, Range{7, 7}))
		s.Ready()
		if s.Counters().NAKsDropped != before+1 {
			replays++
		}
	}
	if replays != 0 {
		t.Errorf("%d replayed NAKs of an active source accepted among 10,000 other sources: its state was forgotten", replays)
	}
	if c := s.Counters(); c.NAKSources != DefaultNAKSources || c.SourcesEvicted != 10001-DefaultNAKSources {
		t.Errorf("tracking %d sources, %d evicted; want %d and %d (bounded, least recently heard evicted)",
			c.NAKSources, c.SourcesEvicted, DefaultNAKSources, 10001-DefaultNAKSources)
	}
}

// TestSenderCore_NAKLimits: one NAK for the whole window yields at most one source burst of
// repairs (however many bytes the window holds); catalog requests are answered at most once per
// catalog interval per source.
func TestSenderCore_NAKLimits(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	fillSender(t, s, 6000, 1400)
	src := netip.MustParseAddrPort("198.18.2.2:40000")
	k := nak(t, s.Session(), 1, nil, Range{1, 1 << 40})
	s.Step(t0, src, k)
	r := newRepairTally()
	tallyRepairs(t, r, s.Ready())
	for now := t0; now.Before(t0.Add(time.Second)); now = now.Add(time.Millisecond) {
		s.Tick(now)
		tallyRepairs(t, r, s.Ready())
	}
	bound := s.sourceBurst() + DefaultMTU
	t.Logf("one %d-byte NAK for the whole window: %d bytes of repair (%.0fx), bound %.0f", len(k), r.bytes, float64(r.bytes)/float64(len(k)), bound)
	if float64(r.bytes) > bound {
		t.Errorf("one NAK yielded %d bytes of repair, want at most %.0f (the source's burst)", r.bytes, bound)
	}
	answered := r.ncfRanges[NCFWillSend] + r.ncfRanges[NCFDelayed]
	if answered > MaxNAKSequences {
		t.Errorf("one NAK got %d sequences confirmed, want at most %d", answered, MaxNAKSequences)
	}

	s2 := mustSenderCore(t, SenderCoreConfig{})
	fillSender(t, s2, 10, 200)
	r2 := newRepairTally()
	for i := 0; i < 500; i++ { // a catalog request every ms for 500 ms
		now := t0.Add(time.Duration(i) * time.Millisecond)
		s2.Step(now, src, nak(t, s2.Session(), uint64(i+1), nil, Range{0, 0}))
		tallyRepairs(t, r2, s2.Ready())
	}
	if r2.catalogs != 1 {
		t.Errorf("500 catalog requests in 500 ms from one source got %d catalogs, want 1 (once per catalog interval)", r2.catalogs)
	}
	// 200 sources asking within one second: at most ten full catalogs in all.
	s3 := mustSenderCore(t, SenderCoreConfig{})
	fillSender(t, s3, 10, 200)
	r3 := newRepairTally()
	for i := 0; i < 200; i++ {
		now := t0.Add(time.Duration(i) * 5 * time.Millisecond)
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 4, byte(i)}), 40000)
		s3.Step(now, from, nak(t, s3.Session(), 1, nil, Range{0, 0}))
		tallyRepairs(t, r3, s3.Ready())
	}
	if r3.catalogs > 10 || r3.catalogs == 0 {
		t.Errorf("200 sources asking for the catalog in 1 s got %d catalogs, want 1 to 10", r3.catalogs)
	}
}

// TestSenderCore_DelayedIsRepaired: sequences confirmed "delayed" (queued behind the repair
// budget) are repaired once the budget allows; they used to be dropped.
func TestSenderCore_DelayedIsRepaired(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	fillSender(t, s, 8000, 100)
	s.repairRate.tokens = -1e6 // the repair budget is spent: repairs queue
	r := newRepairTally()
	asked := 0
	for i := 0; i < 3; i++ { // three sources, 1,500 sequences each (within one source burst)
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 3, byte(i + 1)}), 40000)
		lo := uint64(2 + 1500*i)
		s.Step(t0, from, nak(t, s.Session(), 1, nil, Range{lo, lo + 1499}))
		asked += 1500
		tallyRepairs(t, r, s.Ready())
	}
	if r.ncfRanges[NCFDelayed] == 0 {
		t.Fatalf("NCFs %v: want some sequences confirmed delayed (more than 4,096 queued)", r.ncfRanges)
	}
	s.repairRate.tokens = 0
	for now := t0; now.Before(t0.Add(30 * time.Second)); now = now.Add(10 * time.Millisecond) {
		s.Tick(now)
		tallyRepairs(t, r, s.Ready())
	}
	if len(r.repaired) != asked {
		t.Errorf("NCF will-send %d, delayed %d; repaired %d of %d: delayed sequences must be repaired",
			r.ncfRanges[NCFWillSend], r.ncfRanges[NCFDelayed], len(r.repaired), asked)
	}
}

// TestSenderCore_LostCountBounded: one NAK for a huge range below the trailing edge gets one NCF
// gone range, and counts at most MaxNAKSequences lost sequences (the losses_total a loss alert
// watches is not a forger's to inflate at will).
func TestSenderCore_LostCountBounded(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{Window: 4 * DefaultMTU})
	fillSender(t, s, 6000, 100) // the window holds the last 4
	s.Step(t0, rcvAddr, nak(t, s.Session(), 1, nil, Range{1, 1 << 40}))
	got := decodeAll(t, s.Ready())
	var gone []Range
	for _, p := range got {
		if p.Type == TypeNCF && p.Status == NCFGone {
			gone = append(gone, p.Ranges...)
		}
	}
	tr := s.Counters().Trailing
	if len(gone) != 1 || gone[0] != (Range{1, tr - 1}) {
		t.Errorf("NCF gone ranges %v, want [1-%d]", gone, tr-1)
	}
	if c := s.Counters(); c.Lost != MaxNAKSequences {
		t.Errorf("lost %d after one NAK for %d gone sequences, want %d", c.Lost, tr-1, MaxNAKSequences)
	}
}

// TestSenderCore_SlowNAKerGetsItsRate: a receiver that asks only every quarter budget (backed
// off, or behind its socket) for more than its source's burst still gets its source's whole
// repair rate. With a burst of 1/50 s, a source asking every 50 ms got 160 kB a round of the
// default 8 MiB/s, 40% of its rate: a receiver behind 10% loss fell further behind and lost
// datagrams to MaxHole.
func TestSenderCore_SlowNAKerGetsItsRate(t *testing.T) {
	s := mustSenderCore(t, SenderCoreConfig{})
	fillSender(t, s, 20000, 1400) // 28 MB, within the window
	src := netip.MustParseAddrPort("198.18.4.4:40000")
	every := s.t.budget / 4
	r := newRepairTally()
	next := uint64(2) // the first sequence not yet repaired
	var counter uint64
	end := t0.Add(time.Second)
	for now := t0; now.Before(end); now = now.Add(every) {
		counter++
		s.Step(now, src, nak(t, s.Session(), counter, nil, Range{next, next + 4000}))
		tallyRepairs(t, r, s.Ready())
		for q := next; r.repaired[q] > 0; q++ {
			next = q + 1
		}
		for tick := now; tick.Before(now.Add(every)); tick = tick.Add(time.Millisecond) {
			s.Tick(tick)
			tallyRepairs(t, r, s.Ready())
		}
	}
	rate := float64(DefaultRepairRate / 4)
	t.Logf("a source asking every %v for 1 s: %d repair bytes, its rate %.0f bytes/s", every, r.bytes, rate)
	if float64(r.bytes) < 0.9*rate {
		t.Errorf("a source asking every %v got %d repair bytes in 1 s, want at least 90%% of its rate %.0f", every, r.bytes, rate)
	}
}
