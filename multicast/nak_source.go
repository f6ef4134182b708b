package multicast

import (
	"net/netip"
	"slices"
	"time"
)

// Repair budget defaults (docs/multicast-protocol.md, section 3, "Repair budgets").
const (
	DefaultNAKSources = 1024 // NAK sources tracked; the least recently heard is evicted past it
	// MaxNAKSequences is how many sequences of one NAK a sender considers, in the order of its
	// ranges; the rest are ignored (the receiver asks again).
	MaxNAKSequences = 4096
	// receiversPerSource is how many receiver ids (NAK counters) one source keeps.
	receiversPerSource = 8
	// nakSourceBytes is an upper estimate of one tracked source's memory, for the documented
	// bound (nak_sources x nakSourceBytes).
	nakSourceBytes = 400
)

// NAKSourceStats are one NAK source's counters.
type NAKSourceStats struct {
	Source      netip.Addr
	NAKs        uint64 // NAK datagrams accepted
	NAKsDropped uint64 // over the NAK rate, or replayed
	Refused     uint64 // sequences not answered: over the source's byte budget or past MaxNAKSequences
	// CatalogRefused counts catalog requests (range 0-0) not answered: a
	// second within the catalog interval, or over the byte budget.
	CatalogRefused uint64
	// HistoryRefused counts history requests (late join) not answered: a second within
	// historyInterval, or over the byte budget.
	HistoryRefused uint64
	Repairs        uint64 // repair datagrams sent because of this source
	RepairBytes    uint64
}

// nakSource is one NAK source: an IP address (the port and the NAK's receiver id are not part
// of it: both are the sender's choice and free to forge).
type nakSource struct {
	addr       netip.Addr
	naks       bucket // NAK datagrams per second
	bytes      bucket // repair bytes per second
	rcv        [receiversPerSource]struct{ id, counter uint64 }
	nrcv, rot  int
	catalogAt  time.Time // last catalog request answered
	historyAt  time.Time // last history request answered
	prev, next *nakSource
	st         NAKSourceStats
}

// accept checks the NAK counter of receiver id: it must be above the last one seen.
func (n *nakSource) accept(id, counter uint64) bool {
	for i := 0; i < n.nrcv; i++ {
		if n.rcv[i].id == id {
			if counter <= n.rcv[i].counter {
				return false
			}
			n.rcv[i].counter = counter
			return true
		}
	}
	i := n.nrcv
	if i < receiversPerSource {
		n.nrcv++
	} else {
		i = n.rot
		n.rot = (n.rot + 1) % receiversPerSource
	}
	n.rcv[i].id, n.rcv[i].counter = id, counter
	return true
}

// sourceTable is a bounded table of NAK sources, least recently heard evicted first.
type sourceTable struct {
	max     int
	m       map[netip.Addr]*nakSource
	head    nakSource // sentinel: head.next is the most recent
	evicted uint64
}

func newSourceTable(max int) *sourceTable {
	t := &sourceTable{max: max, m: make(map[netip.Addr]*nakSource)}
	t.head.next, t.head.prev = &t.head, &t.head
	return t
}

func (t *sourceTable) unlink(n *nakSource) {
	n.prev.next, n.next.prev = n.next, n.prev
}

func (t *sourceTable) pushFront(n *nakSource) {
	n.prev, n.next = &t.head, t.head.next
	t.head.next.prev = n
	t.head.next = n
}

// get returns the source for addr, made the most recent; a new one comes from mk, evicting the
// least recently heard when the table is full.
func (t *sourceTable) get(addr netip.Addr, mk func() *nakSource) *nakSource {
	if n := t.m[addr]; n != nil {
		t.unlink(n)
		t.pushFront(n)
		return n
	}
	if len(t.m) >= t.max {
		old := t.head.prev
		t.unlink(old)
		delete(t.m, old.addr)
		t.evicted++
	}
	n := mk()
	n.addr = addr
	n.st.Source = addr
	t.m[addr] = n
	t.pushFront(n)
	return n
}

// top returns the k sources with the most repair bytes (then the most NAKs).
func (t *sourceTable) top(k int) []NAKSourceStats {
	all := make([]NAKSourceStats, 0, len(t.m))
	for _, n := range t.m {
		all = append(all, n.st)
	}
	slices.SortFunc(all, func(a, b NAKSourceStats) int {
		switch {
		case a.RepairBytes != b.RepairBytes:
			if a.RepairBytes > b.RepairBytes {
				return -1
			}
			return 1
		case a.NAKs != b.NAKs:
			if a.NAKs > b.NAKs {
				return -1
			}
			return 1
		}
		return a.Source.Compare(b.Source)
	})
	return all[:min(k, len(all))]
}
