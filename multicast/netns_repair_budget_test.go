package multicast

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestNetns_HostileNAKer: one host NAKs the whole window every millisecond while two honest
// receivers behind 10% loss (nftables numgen) recover everything. The hostile host's repairs
// stay within its per-source budget (docs/multicast-protocol.md, section 3, "Repair budgets").
func TestNetns_HostileNAKer(t *testing.T) {
	tp := newTopo(t, "s", "r1", "r2", "x")
	const group, port, n = "239.255.7.9:7409", 7409, 20000
	const repairRate = 8 << 20
	tp.dropShare("r1", port)
	tp.dropShare("r2", port)
	rs := []*child{
		tp.startReceiver("r1", helperConfig{Group: group, Count: n}),
		tp.startReceiver("r2", helperConfig{Group: group, Count: n}),
	}
	s := tp.startSender("s", SenderConfig{Group: group, RepairRate: repairRate})
	src, _ := netip.ParseAddrPort(s.LocalAddr().String())
	to := netip.AddrPortFrom(tp.Addr["s"], src.Port())
	stop := make(chan struct{})
	done := make(chan int)
	var conn *net.UDPConn
	tp.in("x", func() {
		var err error
		if conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: tp.Addr["x"].AsSlice()}); err != nil {
			t.Fatal(err)
		}
	})
	hostileStart := time.Now()
	go func() {
		defer conn.Close()
		k := 0
		for {
			select {
			case <-stop:
				done <- k
				return
			default:
			}
			k++
			b, _ := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeNAK, Session: s.Session(), Seq: uint64(k)},
				Receiver: 666, Ranges: []Range{{1, 1 << 40}}})
			conn.WriteToUDPAddrPort(b, to)
			time.Sleep(time.Millisecond) // not synchronisation: the hostile host's pace
		}
	}()
	count := publishN(t, s, nil, n, 20000, 64)
	var stats []ReceiverStats
	for _, r := range rs {
		stats = append(stats, r.wait(t, 30*time.Second))
	}
	close(stop)
	naks := <-done
	elapsed := time.Since(hostileStart)
	for i, r := range rs {
		msgs, gaps := r.check(t, []map[string]uint64{count})
		if msgs != n || gaps != 0 {
			t.Errorf("honest receiver %s: %d messages and %d gaps, want %d and 0", r.name, msgs, gaps, n)
		}
		t.Logf("honest receiver %s: %d NAKs, %d repairs", r.name, stats[i].NAKs, stats[i].Repairs)
		if stats[i].NAKs == 0 {
			t.Errorf("honest receiver %s sent no NAK: is the nft rule dropping?", r.name)
		}
	}
	ss := s.Stats()
	var hostile NAKSourceStats
	for _, src := range ss.TopSources {
		t.Logf("NAK source %s: %d NAKs (%d dropped), %d sequences refused, %d catalog requests refused, %d repairs, %d repair bytes",
			src.Source, src.NAKs, src.NAKsDropped, src.Refused, src.CatalogRefused, src.Repairs, src.RepairBytes)
		if src.Source == tp.Addr["x"] {
			hostile = src
		} else if src.Refused*100 > src.Repairs {
			// An honest source is under the same per-source budget: one that
			// falls behind (the race detector on a loaded machine) and then
			// NAKs a burst past the burst allowance is deferred and asks
			// again. What the hostile host must not do is eat its budget.
			t.Errorf("honest source %s: %d sequences refused for %d repairs, want at most 1%% (the hostile host must not eat its budget)", src.Source, src.Refused, src.Repairs)
		}
	}
	share := float64(hostile.RepairBytes) / float64(max(ss.RepairBytes, 1))
	rate := float64(repairRate / 4)
	bound := max(rate/50, 4*DefaultMTU) + rate*elapsed.Seconds() + MaxDatagram
	t.Logf("hostile host: %d NAKs in %v; %d of the sender's %d repair bytes (%.0f%%), %.0f B/s; bound %.0f bytes",
		naks, elapsed.Round(time.Millisecond), hostile.RepairBytes, ss.RepairBytes, 100*share,
		float64(hostile.RepairBytes)/elapsed.Seconds(), bound)
	if hostile.NAKs == 0 {
		t.Fatalf("the sender accepted no NAK from the hostile host %s: the test did not run", tp.Addr["x"])
	}
	if float64(hostile.RepairBytes) > bound {
		t.Errorf("the hostile host got %d repair bytes in %v, want at most %.0f (its source budget)", hostile.RepairBytes, elapsed, bound)
	}
}

// TestNetns_RepairsOverSourceBudget: a receiver behind 10% loss whose repairs take far longer
// than the budget to come, because its host's repair share is small: the sender answers in
// order what the share allows and leaves the rest unanswered, the receiver asks again, and it
// gives up on nothing while repairs keep coming (revision 5, section 4.4). With the give-up
// counted only from the first NAK, the later holes expired while the sender still held them.
func TestNetns_RepairsOverSourceBudget(t *testing.T) {
	tp := newTopo(t, "s", "r1")
	const group, port, n = "239.255.7.10:7410", 7410, 20000
	const share = 100 << 10 // bytes/s of repairs for the receiver's host
	tp.dropShare("r1", port)
	r := tp.startReceiver("r1", helperConfig{Group: group, Count: n})
	s := tp.startSender("s", SenderConfig{Group: group, SourceRepairRate: share})
	start := time.Now()
	count := publishN(t, s, nil, n, 40000, 64)
	st := r.wait(t, 60*time.Second)
	elapsed := time.Since(start)
	msgs, gaps := r.check(t, []map[string]uint64{count})
	ss := s.Stats()
	var refused, repairBytes uint64
	for _, src := range ss.TopSources {
		refused += src.Refused
		repairBytes += src.RepairBytes
	}
	t.Logf("receiver: %d messages, %d gaps, %d NAKs, %d repairs in %v; sender: %d repair bytes, %d sequences refused over the %d B/s share",
		msgs, gaps, st.NAKs, st.Repairs, elapsed.Round(time.Millisecond), repairBytes, refused, share)
	if msgs != n || gaps != 0 {
		t.Errorf("receiver: %d messages and %d gaps, want %d and 0: a hole was given up while the sender was still repairing", msgs, gaps, n)
	}
	if refused == 0 {
		t.Errorf("the sender refused no sequence: the source share did not bind, the test proved nothing")
	}
	if elapsed < 2*ProfileLowLatency.timing().budget {
		t.Errorf("done in %v: the repairs took less than twice the budget, the test proved nothing", elapsed)
	}
}
