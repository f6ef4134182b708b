package appliance_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

var deepN = flag.Int("herald.deep", 0, "messages for TestQueue_Deep (default 100000; 5000000 for the figures in the issue note)")

// fillQueue sends n 100-byte messages to dest over several pipelined
// connections, in order per connection, and waits for every receipt.
func fillQueue(t testing.TB, addr, dest string, n int) { fillQueueFrom(t, addr, dest, 0, n) }

// fillQueueFrom is fillQueue for messages numbered from to n-1 (the number
// is the first 9 bytes of the body; message i goes over connection i%4).
func fillQueueFrom(t testing.TB, addr, dest string, from, n int) {
	const conns, window = 4, 256
	errs := make(chan error, conns)
	for c := 0; c < conns; c++ {
		go func(c int) {
			cl, err := client.Dial(context.Background(), addr, client.Options{})
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			pending := make(chan (<-chan client.Result), window)
			body := []byte(strings.Repeat("d", 90))
			for i := from + (c-from%conns+conns)%conns; i < n; i += conns {
				if len(pending) == window {
					if r := <-<-pending; r.Err != nil {
						errs <- r.Err
						return
					}
				}
				ch, err := cl.SendAsync(dest, append([]byte(fmt.Sprintf("%09d", i)), body...))
				if err != nil {
					errs <- err
					return
				}
				pending <- ch
			}
			for len(pending) > 0 {
				if r := <-<-pending; r.Err != nil {
					errs <- r.Err
					return
				}
			}
			errs <- nil
		}(c)
	}
	for c := 0; c < conns; c++ {
		if err := <-errs; err != nil {
			t.Fatalf("fill: %v", err)
		}
	}
}

// drain consumes n messages with auto ack; it returns the rate over the
// first `head` messages.
func drain(t testing.TB, addr, dest string, n, head int, check func(i int, m *stomp.Frame)) float64 {
	cl, err := client.Dial(context.Background(), addr, client.Options{SubscriptionBuffer: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sub, err := cl.Subscribe(dest, "auto")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var rate float64
	for i := 0; i < n; i++ {
		select {
		case m := <-sub.C():
			if check != nil {
				check(i, m)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("drain stalled after %d of %d", i, n)
		}
		if i == head-1 {
			rate = float64(head) / time.Since(start).Seconds()
		}
	}
	return rate
}

// TestQueue_Deep fills a queue far beyond its memory window: memory holds
// only the window, startup does not load the queue, and draining delivers
// every message in order across pages.
//
// Memory is measured as the Go heap in use after a GC (the broker runs in
// this process; SQLite's C allocations are not in it). Holding a message
// costs more than its 100-byte body, so holding all of them would cost
// (n - window) x 100 bytes more than holding the window; the budget for
// what the messages past the window may add is a quarter of that, plus
// 1 MiB for buffers and caches that do not grow with the depth. The
// backlog cache is off here (it would keep messages past the window in
// memory by design): TestQueue_DeepCached bounds it.
func TestQueue_Deep(t *testing.T) {
	n := *deepN
	if n == 0 {
		n = 100000
		if testing.Short() {
			n = 20000
		}
	}
	const window = 10000
	if n <= window {
		t.Fatalf("-herald.deep=%d: want more than the window, %d", n, window)
	}
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MemoryWindow, c.Queues.BacklogCacheBytes = window, 0 })
	base := heapAfterGC(t, tb)
	start := time.Now()
	// A full window first: what holding `window` messages costs here.
	fillQueueFrom(t, tb.Addr, "/queue/deep", 0, window)
	windowHeap := heapAfterGC(t, tb) - base
	fillQueueFrom(t, tb.Addr, "/queue/deep", window, n)
	fillTime := time.Since(start)
	budget := int64(1<<20 + (n-window)*100/4)
	if grew := heapAfterGC(t, tb) - base - windowHeap; grew > budget {
		t.Fatalf("heap grew %d KiB more filling messages %d..%d than the first %d took (%d KiB); want at most %d KiB: messages past the window are in memory",
			grew>>10, window, n, window, windowHeap>>10, budget>>10)
	}
	v, _ := tb.B.Queue("deep")
	if v.Messages != n || v.InMemory > window {
		t.Fatalf("after fill: messages=%d (want %d) in_memory=%d (window %d)", v.Messages, n, v.InMemory, window)
	}
	start = time.Now()
	tb.Restart()
	restart := time.Since(start)
	v, _ = tb.B.Queue("deep")
	if v.Messages != n || v.InMemory > window {
		t.Fatalf("after restart: messages=%d in_memory=%d", v.Messages, v.InMemory)
	}
	restartHeap := heapAfterGC(t, tb) - base
	if restartHeap > windowHeap+budget {
		t.Fatalf("heap after restart %d KiB above the empty broker's, want at most %d KiB (a full window's %d KiB plus the budget %d KiB): startup loads more than the window",
			restartHeap>>10, (windowHeap+budget)>>10, windowHeap>>10, budget>>10)
	}
	rss := vmRSS()
	// Per-connection order is kept; with 4 producers, check order within
	// each residue class.
	last := map[int]int{}
	deepRate := drain(t, tb.Addr, "/queue/deep", n, n/5, func(i int, m *stomp.Frame) {
		seq, _ := strconv.Atoi(string(m.Body[:9]))
		if prev, ok := last[seq%4]; ok && seq <= prev {
			t.Fatalf("order broken: %d after %d", seq, prev)
		}
		last[seq%4] = seq
		if i%10000 == 0 {
			if v, _ := tb.B.Queue("deep"); v.InMemory > window+4096 {
				t.Fatalf("in memory %d while draining (window %d)", v.InMemory, window)
			}
		}
	})
	// The same drain at depth 1000: fill 1000, drain them, five times.
	var shallowTime time.Duration
	for r := 0; r < 5; r++ {
		fillQueue(t, tb.Addr, "/queue/shallow", 1000)
		start := time.Now()
		drain(t, tb.Addr, "/queue/shallow", 1000, 1000, nil)
		shallowTime += time.Since(start)
		// The drained consumer (auto ack) must be gone before the next
		// fill: a session still ending would be handed messages and
		// auto-ack them onto a closed socket (auto ack is lossy).
		waitFor(t, 10*time.Second, "drain connection closed", func() bool { return tb.B.Stats().Connections == 0 })
	}
	shallowRate := 5000 / shallowTime.Seconds()
	t.Logf("depth %d: fill %.0f msg/s, restart %s, heap of a full window %d KiB, after restart %d KiB, RSS (broker and test clients) %d MiB, drain at depth %.0f msg/s, at depth 1000 %.0f msg/s (ratio %.2f)",
		n, float64(n)/fillTime.Seconds(), restart.Round(time.Millisecond), windowHeap>>10, restartHeap>>10, rss>>20, deepRate, shallowRate, deepRate/shallowRate)
	// Auto-ack deletes commit asynchronously: wait for them.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, _ := tb.B.Queue("deep")
		if v.Messages == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages left after draining", v.Messages)
		}
	}
}

// TestQueue_DeepCached fills a queue past its window with a backlog cache
// smaller than the backlog: the cache keeps the oldest of the backlog, up
// to queues.backlog_cache_bytes and no further (in its own count and in
// the heap), the drain is served from it first and then from the journal,
// in order, every message once; once used up it starts again with the
// next messages committed past the window (the journal answers for those
// before them); and nothing is cached after a restart.
func TestQueue_DeepCached(t *testing.T) {
	const window, n, cacheBytes = 1000, 30000, 4 << 20
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.MemoryWindow, c.Queues.BacklogCacheBytes = window, cacheBytes
	})
	base := heapAfterGC(t, tb)
	fillQueueFrom(t, tb.Addr, "/queue/deepc", 0, window)
	windowHeap := heapAfterGC(t, tb) - base
	fillQueueFrom(t, tb.Addr, "/queue/deepc", window, n)
	v, _ := tb.B.Queue("deepc")
	if v.Messages != n || v.InMemory > window || v.CachedBytes > cacheBytes || v.Cached == 0 || v.Cached >= n-window {
		t.Fatalf("after fill: messages=%d (want %d) in_memory=%d (window %d) cached=%d (%d bytes, bound %d): want the cache full, not the whole backlog",
			v.Messages, n, v.InMemory, window, v.Cached, v.CachedBytes, cacheBytes)
	}
	if cachedMin := int64(cacheBytes) - 4096; v.CachedBytes < cachedMin {
		t.Fatalf("cache holds %d bytes of a %d-byte bound with %d messages past the window", v.CachedBytes, cacheBytes, n-window)
	}
	// The heap holds the window and the cache, and not the rest: the
	// messages past the window add what the cache weighs at most (its
	// count is at least what it holds; 512 KiB for what does not grow).
	if grew := heapAfterGC(t, tb) - base - windowHeap; grew > cacheBytes+512<<10 {
		t.Fatalf("heap grew %d KiB filling messages %d..%d past a window of %d (which took %d KiB), want at most the cache bound %d KiB plus 512 KiB",
			grew>>10, window, n, window, windowHeap>>10, cacheBytes>>10)
	}
	cached := v.Cached
	const more = 2000
	seen := make([]bool, n+more)
	last := map[int]int{}
	check := func(m *stomp.Frame) {
		seq, _ := strconv.Atoi(string(m.Body[:9]))
		if seen[seq] {
			t.Fatalf("message %d delivered twice", seq)
		}
		seen[seq] = true
		if prev, ok := last[seq%4]; ok && seq <= prev {
			t.Fatalf("order broken: %d after %d", seq, prev)
		}
		last[seq%4] = seq
	}
	// Past the cache, into what only the journal holds: the cache is used
	// up, and it starts again with the next messages committed past the
	// window, though the queue still holds a backlog in the journal.
	c := tb.Dial(t)
	sub, err := c.Subscribe("/queue/deepc", "client-individual", hdr("prefetch-count", "100"))
	if err != nil {
		t.Fatal(err)
	}
	consumed := window + cached + 1000
	for range consumed {
		m := recv(t, sub)
		check(m)
		c.Ack(m)
	}
	// Every ACK committed before the consumer goes (the prefetched rest
	// comes back; an ACK still unread would make its message come again).
	waitQueue(t, tb, "deepc", "the ACKs committed", func(v appliance.QueueView) bool { return v.Messages == n-consumed })
	c.Close()
	waitFor(t, 5*time.Second, "the consumer gone", func() bool { return tb.B.Stats().Connections == 0 })
	if v, _ = tb.B.Queue("deepc"); v.Cached != 0 {
		t.Fatalf("%d cached after consuming the window and the %d cached", v.Cached, cached)
	}
	fillQueueFrom(t, tb.Addr, "/queue/deepc", n, n+more)
	if v, _ = tb.B.Queue("deepc"); v.Cached != more {
		t.Fatalf("after %d more SENDs behind a backlog in the journal: %d cached, want them all", more, v.Cached)
	}
	hits := v.CacheHits
	drain(t, tb.Addr, "/queue/deepc", n+more-consumed, n+more, func(i int, m *stomp.Frame) { check(m) })
	// Auto-ack deletes commit asynchronously.
	v = waitQueue(t, tb, "deepc", "empty", func(v appliance.QueueView) bool { return v.Messages == 0 })
	if hits == 0 || v.CacheHits <= hits || v.Cached != 0 || v.CachedBytes != 0 || v.Messages != 0 {
		t.Fatalf("after the drain: %d then %d page-ins from the cache, %d cached (%d bytes), %d messages: want more hits and nothing left", hits, v.CacheHits, v.Cached, v.CachedBytes, v.Messages)
	}
	// A restart starts with no cache: the backlog is read from the journal.
	fillQueue(t, tb.Addr, "/queue/deepc", 3*window)
	tb.Restart()
	if v, _ = tb.B.Queue("deepc"); v.Cached != 0 || v.CachedBytes != 0 {
		t.Fatalf("after restart: %d cached (%d bytes), want none", v.Cached, v.CachedBytes)
	}
	drain(t, tb.Addr, "/queue/deepc", 3*window, 3*window, nil)
}

// heapAfterGC returns the bytes of live Go objects after a GC, once every
// STOMP connection of the broker has ended (their buffers are not the
// queue's). It reads HeapAlloc, not HeapInuse: HeapInuse also counts the
// free slots of spans that still hold one live object, which after a fill
// varied by 400 KiB from run to run with the same messages held, and is
// not memory the queue keeps.
func heapAfterGC(t testing.TB, tb *testBroker) int64 {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); tb.B.Stats().Connections > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("got %d connections 10s after the clients closed, want 0", tb.B.Stats().Connections)
		}
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// vmRSS reads this process's resident set size in bytes (0 if unknown).
func vmRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
