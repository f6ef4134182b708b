package queuecore

import "testing"

func TestQueue_Backoff(t *testing.T) {
	const sec, max = 1000, 5 * 60 * 1000
	c := New(Config{RedeliveryMin: sec, RedeliveryMax: max}, 1)
	for n := 1; n <= 20; n++ {
		base := int64(sec) << (n - 1)
		if n > 9 || base > max {
			base = max
		}
		lo, hi := base-base/4, base+base/4
		for i := 0; i < 200; i++ {
			if d := c.backoff(n); d < lo || d > hi {
				t.Fatalf("backoff(%d) = %d ms, want within [%d, %d]", n, d, lo, hi)
			}
		}
	}
	// Jitter: not every delay the same.
	seen := map[int64]bool{}
	for i := 0; i < 50; i++ {
		seen[c.backoff(3)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("backoff(3) took only %d distinct values in 50 draws: no jitter", len(seen))
	}
	if d := New(Config{}, 1).backoff(5); d != 0 {
		t.Fatalf("backoff with redelivery_delay_min 0 = %d ms, want 0", d)
	}
}
