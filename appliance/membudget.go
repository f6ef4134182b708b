package appliance

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// memBudget is the broker's memory budget (memory.budget_bytes): the bytes
// of everything clients can make the daemon hold, summed over every
// connection and queue. It has two halves:
//
//   - Connections: frames waiting to be written (RECEIPTs, MESSAGEs, topic
//     subscriber buffers), frame bodies being read (from their first octet
//     until the frame is handled), open transactions' frames, and topic
//     last values. While these weigh half the budget, connections are not
//     read past the frame in progress when that frame carries a body or is
//     a SEND: producers wait (TCP backpressure, counted in
//     memory_backpressure_total), while ACKs, NACKs, subscriptions and the
//     writes to consumers go on and free it.
//   - Queues: the messages queues hold in memory (paged-in windows, delayed
//     and in-flight messages: queuecore.MemBytes). While these weigh near
//     half the budget, queue windows stop growing: new messages stay in the
//     journal and are paged in as consumers make room (each queue may
//     still page in windowFloor, so that its consumers never starve).
//
// Queue memory never makes producers wait: what queues hold can always
// stay on disk instead, while a queue nobody consumes would hold its
// window forever. Each part also has its own bound (per connection,
// subscription or queue); the budget bounds their sum.
type memBudget struct {
	limit   int64
	half    int64
	used    atomic.Int64 // both halves
	queued  atomic.Int64 // the queues' half
	waiting atomic.Int32
	waits   atomic.Uint64 // times a reader waited (memory_backpressure_total)

	mu   sync.Mutex
	room chan struct{} // closed and replaced when the connections' half has room again and readers wait
}

func newMemBudget(limit int64) *memBudget {
	return &memBudget{limit: limit, half: limit / 2, room: make(chan struct{})}
}

// charge and release account for the connections' half.
func (m *memBudget) charge(n int64) {
	if m != nil {
		m.used.Add(n)
	}
}

func (m *memBudget) release(n int64) {
	if m == nil || n == 0 {
		return
	}
	if m.used.Add(-n)-m.queued.Load() < m.half && m.waiting.Load() > 0 {
		m.mu.Lock()
		close(m.room)
		m.room = make(chan struct{})
		m.mu.Unlock()
	}
}

// chargeQueue accounts for n bytes more (or less) held by queues.
func (m *memBudget) chargeQueue(n int64) {
	m.queued.Add(n)
	m.used.Add(n)
}

// queueFree is what is left of the queues' half (negative when over).
func (m *memBudget) queueFree() int64 { return m.half - m.queued.Load() }

// over reports whether the connections' half is spent.
func (m *memBudget) over() bool { return m.used.Load()-m.queued.Load() >= m.half }

// wait blocks while the connections' half is spent, until ending reports
// true (checked at least every 100 ms). It reports whether it waited.
func (m *memBudget) wait(ending func() bool) bool {
	if !m.over() {
		return false
	}
	m.waits.Add(1)
	m.waiting.Add(1)
	defer m.waiting.Add(-1)
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	for {
		m.mu.Lock()
		ch := m.room
		m.mu.Unlock()
		if !m.over() || ending() {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			t.Reset(100 * time.Millisecond)
		}
	}
}

// windowFloor is the byte window every queue keeps while the queues' half
// of the budget is spent, so that a queue whose consumers wait can always
// page in: that half may be exceeded by at most this much per queue being
// consumed.
const windowFloor = 64 << 10

// DefaultMemoryBudget is memory.budget_bytes = 0: 40% of the memory the
// daemon may use (its cgroup's memory.max, else the machine's RAM), at
// least 64 MiB. RabbitMQ's default high watermark is 0.4 of RAM too; the
// rest leaves room for the Go runtime, SQLite's cache and the kernel's page
// cache of the journal.
func DefaultMemoryBudget() int64 {
	avail := physicalMemory()
	if cg := cgroupMemoryMax(); cg > 0 && (avail == 0 || cg < avail) {
		avail = cg
	}
	if avail <= 0 {
		return 1 << 30
	}
	return max(avail*2/5, 64<<20)
}

func physicalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupMemoryMax is the memory.max of the cgroup (v2) the process is in,
// 0 when there is none or it is "max".
func cgroupMemoryMax() int64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		path, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		v, err := os.ReadFile("/sys/fs/cgroup" + path + "/memory.max")
		if err != nil {
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil {
			return 0 // "max"
		}
		return n
	}
	return 0
}
