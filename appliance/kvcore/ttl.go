package kvcore

import (
	"container/heap"
	"fmt"
	"strings"
)

// ttlKey names a live key with an expiry time.
type ttlKey struct{ bucket, key string }

type ttlItem struct {
	k  ttlKey
	at int64
}

// ttlHeap holds one item per live key that has an expiry time, earliest
// first, so its size is bounded by the keys (a key put again moves its
// item, it does not add one).
type ttlHeap struct {
	items []ttlItem
	at    map[ttlKey]int // index in items
}

func (h *ttlHeap) Len() int           { return len(h.items) }
func (h *ttlHeap) Less(i, j int) bool { return h.items[i].at < h.items[j].at }
func (h *ttlHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.at[h.items[i].k] = i
	h.at[h.items[j].k] = j
}
func (h *ttlHeap) Push(x any) {
	it := x.(ttlItem)
	h.at[it.k] = len(h.items)
	h.items = append(h.items, it)
}
func (h *ttlHeap) Pop() any {
	it := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.at, it.k)
	return it
}

// set gives key k the expiry time at (0: none).
func (h *ttlHeap) set(k ttlKey, at int64) {
	i, ok := h.at[k]
	switch {
	case ok && at == 0:
		heap.Remove(h, i)
	case ok:
		h.items[i].at = at
		heap.Fix(h, i)
	case at != 0:
		heap.Push(h, ttlItem{k, at})
	}
}

// due returns the keys whose time is at or before now, unordered.
func (h *ttlHeap) due(now int64) []ttlKey {
	var out []ttlKey
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h.items) || h.items[i].at > now {
			return
		}
		out = append(out, h.items[i].k)
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return out
}

// MaxTTL bounds a TTL (ten years, in milliseconds).
const MaxTTL = 10 * 365 * 24 * 3600 * 1000

// ParseTTL parses a kv-ttl header into milliseconds: a whole number of
// seconds ("30", as NATS's Nats-TTL), or a number with a unit, ms, s, m
// or h ("1500ms", "5m"), from 1 ms to MaxTTL.
func ParseTTL(v string) (int64, error) {
	bad := func() (int64, error) {
		return 0, fmt.Errorf("kv-ttl must be a positive whole number of seconds (30) or of ms, s, m or h (1500ms, 5m), at most ten years; got %q.", v)
	}
	num, unit := v, int64(1000)
	for _, u := range []struct {
		s string
		n int64
	}{{"ms", 1}, {"s", 1000}, {"m", 60_000}, {"h", 3_600_000}} {
		if n, ok := strings.CutSuffix(v, u.s); ok {
			num, unit = n, u.n
			break
		}
	}
	if num == "" || len(num) > 15 {
		return bad()
	}
	var n int64
	for _, c := range num {
		if c < '0' || c > '9' {
			return bad()
		}
		n = n*10 + int64(c-'0')
	}
	if n == 0 || n > MaxTTL/unit {
		return bad()
	}
	return n * unit, nil
}
