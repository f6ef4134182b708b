package multicast

import "time"

// bucket is a token bucket counted in bytes (or NAKs). A zero rate means unlimited.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newBucket(rate, burst float64, now time.Time) bucket {
	return bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens += now.Sub(b.last).Seconds() * b.rate
		if b.tokens > b.burst {
			b.tokens = b.burst
		}
		b.last = now
	}
}

// take spends n tokens if there are any left (the balance may go negative by one item, so an item
// larger than the burst still passes). It reports whether the item may go now.
func (b *bucket) take(now time.Time, n float64) bool {
	if b.rate == 0 {
		return true
	}
	b.refill(now)
	if b.tokens <= 0 {
		return false
	}
	b.tokens -= n
	return true
}

// ready returns when take will next succeed.
func (b *bucket) ready(now time.Time) time.Time {
	if b.rate == 0 || b.tokens > 0 {
		return now
	}
	return b.last.Add(time.Duration((-b.tokens + 1) / b.rate * float64(time.Second)))
}
