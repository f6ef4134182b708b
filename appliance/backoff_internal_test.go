package appliance

import (
	"testing"
	"time"
)

func TestQueue_Backoff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Queues.RedeliveryMin = Duration{time.Second}
	cfg.Queues.RedeliveryMax = Duration{5 * time.Minute}
	q := newQueue(New(Options{Config: cfg}), "b")
	for n := 1; n <= 20; n++ {
		base := time.Second << (n - 1)
		if n > 9 || base > 5*time.Minute {
			base = 5 * time.Minute
		}
		lo, hi := base-base/4, base+base/4
		for i := 0; i < 200; i++ {
			if d := q.backoff(n); d < lo || d > hi {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, lo, hi)
			}
		}
	}
	// Jitter: not every delay the same.
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		seen[q.backoff(3)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("backoff(3) took only %d distinct values in 50 draws: no jitter", len(seen))
	}
}
