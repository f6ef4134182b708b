package bridge

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// rateLog lets one line through per interval, the first at once, each
// carrying the events since the last line; from many goroutines at once,
// one line and no event lost.
func TestRateLogOncePerInterval(t *testing.T) {
	var r rateLog
	t0 := time.Unix(1_000_000, 0)
	every := 30 * time.Second
	for _, c := range []struct {
		at     time.Duration
		n      int
		logged bool
	}{
		{0, 1, true},
		{time.Second, 0, false},
		{29 * time.Second, 0, false},
		{30 * time.Second, 3, true},
		{31 * time.Second, 0, false},
		{90 * time.Second, 2, true},
		{95 * time.Second, 0, false},
	} {
		n, ok := r.note(t0.Add(c.at), every)
		if n != c.n || ok != c.logged {
			t.Fatalf("event at +%v: got (%d, %v), want (%d, %v)", c.at, n, ok, c.n, c.logged)
		}
	}

	var r2 rateLog
	var wg sync.WaitGroup
	var mu sync.Mutex
	lines := 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok := r2.note(t0, every); ok {
				mu.Lock()
				lines++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	n, ok := r2.note(t0.Add(every), every)
	total := n + lines
	if lines != 1 || !ok || total != 65 {
		t.Fatalf("64 events at once: %d lines (want 1); the next line %v, counting %d (want 64 with the first line's one)", lines, ok, n)
	}
}

// heartbeatMissed counts every miss and logs a Warn line naming the
// bridge, the direction, the stream, the consumer and the count, once per
// 30 s.
func TestHeartbeatMissedCountsAndWarnsOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := &Bridge{cfg: appliance.BridgeConfig{Name: "backbone", Stream: "HERALD", Durable: "herald-site-b-backbone"}, log: log.With("bridge", "backbone")}
	w := &worker{b: b, dir: "in", core: NewCore(CoreConfig{Window: 1, BackoffMin: int64(time.Millisecond), BackoffMax: int64(time.Second), AckTimeout: int64(time.Second)}, 1)}
	for range 5 {
		w.heartbeatMissed(time.Second)
	}
	if got := w.heartbeatsMissed.Load(); got != 5 {
		t.Errorf("%d missed heartbeats counted, want 5", got)
	}
	w.publishView(true)
	if got := w.view.HeartbeatsMissed; got != 5 {
		t.Errorf("view: heartbeats_missed_total %d, want 5", got)
	}
	out := buf.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || strings.Count(out, "\n") != 1 {
		t.Fatalf("5 misses at once: want one Warn line, got:\n%s", out)
	}
	for _, want := range []string{"pull heartbeats missed", "bridge=backbone", "direction=in", "stream=HERALD", "consumer=herald-site-b-backbone", "missed=1", "heartbeat=1s"} {
		if !strings.Contains(out, want) {
			t.Errorf("the Warn line lacks %q:\n%s", want, out)
		}
	}
}
