package multicast

import (
	"slices"
	"time"
)

// toRanges turns a sorted list of sequences into inclusive ranges.
func toRanges(dst []Range, seqs []uint64) []Range {
	for _, s := range seqs {
		if n := len(dst); n > 0 && dst[n-1].To+1 == s {
			dst[n-1].To = s
			continue
		}
		dst = append(dst, Range{From: s, To: s})
	}
	return dst
}

// maxRanges is how many ranges fit in one NAK, NCF or LOSS datagram of DefaultMTU.
const maxRanges = (DefaultMTU - HeaderSize - TagSize - 16) / 16

// missing is the receiver's state for one missing datagram.
type missing struct {
	detected time.Time
	due      time.Time // next NAK
	tries    int
	ncf      bool // an NCF was heard: the repair is on its way
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[uint64]V, dst []uint64) []uint64 {
	dst = dst[:0]
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst)
	return dst
}
