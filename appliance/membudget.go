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
//     last values. While these weigh half the budget, connections that
//     hold more than smallHolder of it are not read past the frame in
//     progress when that frame carries a body or is a SEND: producers wait
//     (TCP backpressure, counted in memory_backpressure_total), while
//     ACKs, NACKs, subscriptions and the writes to consumers go on and free
//     it. While the whole budget is spent, every producer waits.
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
	m.used.Add(-n)
	m.wake()
}

// wake lets waiting readers re-check: their own frames may have been
// written, or the budget has room again.
func (m *memBudget) wake() {
	if m.waiting.Load() > 0 {
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
	if n < 0 {
		m.wake()
	}
}

// queueFree is what is left of the queues' half (negative when over).
func (m *memBudget) queueFree() int64 { return m.half - m.queued.Load() }

// smallHolder is what a connection may hold (its frames to write, its
// open transactions, the body it is reading) and still be read while the
// connections' half is spent: a client that sends a little now and then
// is not made to wait for a flood it has no part in. It waits only when
// the whole budget is spent.
const smallHolder = 64 << 10

// over reports whether a connection holding held bytes must wait: the
// whole budget is spent, or the connections' half is and it holds more
// than smallHolder.
func (m *memBudget) over(held int64) bool {
	used := m.used.Load()
	return used >= m.limit || (held > smallHolder && used-m.queued.Load() >= m.half)
}

// wait blocks while over(held()), until ending reports true (checked at
// least every 100 ms). It reports whether it waited.
func (m *memBudget) wait(held func() int64, ending func() bool) bool {
	if used := m.used.Load(); used < m.limit && used-m.queued.Load() < m.half {
		return false // not over whatever held is: spare the caller's count (a lock)
	}
	if !m.over(held()) {
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
		if !m.over(held()) || ending() {
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
// least 64 MiB; 1 GiB when neither is known (the daemon logs it). RabbitMQ's
// default high watermark is 0.4 of RAM too; the rest leaves room for the Go
// runtime, SQLite's cache and the kernel's page cache of the journal.
func DefaultMemoryBudget() int64 {
	avail := MemoryLimit()
	if avail <= 0 {
		return UnknownMemoryBudget
	}
	return max(avail*2/5, 64<<20)
}

// UnknownMemoryBudget is the default memory budget when the memory the
// daemon may use cannot be learned.
const UnknownMemoryBudget = 1 << 30

// MemoryLimit is the memory the daemon may use: its cgroup's limit, else
// the machine's RAM; 0 when neither is known.
func MemoryLimit() int64 {
	lim, _ := MemoryLimitSource()
	return lim
}

// MemoryLimitSource is MemoryLimit and where it was read, for the log: the
// cgroup's limit file, "/proc/meminfo", or "sysinfo(2)" when /proc/meminfo
// cannot be read (systemd's ProcSubset=pid hides it, as in the packaged
// unit); "" with 0 when nothing is known. The RAM is read also under a
// cgroup limit, which counts only when below it: a limit above the RAM
// (MemoryMax=infinity is none at all) does not size the budget.
func MemoryLimitSource() (int64, string) {
	avail, from := physicalMemory()
	if cg, file := cgroupMemoryMax(); cg > 0 && (avail == 0 || cg < avail) {
		avail, from = cg, file
	}
	return avail, from
}

// physicalMemory is the machine's RAM: MemTotal of /proc/meminfo, else
// sysinfo(2)'s total (the same figure, from the kernel, which
// ProcSubset=pid does not hide; /proc/meminfo comes first since container
// runtimes may fit it to the container, as lxcfs does).
func physicalMemory() (int64, string) {
	if n := memTotal("/proc/meminfo"); n > 0 {
		return n, "/proc/meminfo"
	}
	if n := sysinfoRAM(); n > 0 {
		return n, "sysinfo(2) (/proc/meminfo unreadable)"
	}
	return 0, ""
}

func memTotal(path string) int64 {
	f, err := os.Open(path)
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

// cgroupMemoryMax is the memory limit of the cgroup the process is in,
// and the file it was read from: memory.max (cgroup v2) or
// memory.limit_in_bytes (v1); 0 when there is none.
func cgroupMemoryMax() (int64, string) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = "/sys/fs/cgroup" + parts[2] + "/memory.max"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			file = "/sys/fs/cgroup/memory" + parts[2] + "/memory.limit_in_bytes"
		default:
			continue
		}
		v, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 {
			continue // "max", or v1's "no limit"
		}
		return n, file
	}
	return 0, ""
}

// MemoryHeld is what clients hold of the memory budget now, and the
// budget (memory.budget_bytes in force).
func (b *Broker) MemoryHeld() (held, budget int64) {
	return b.mem.used.Load(), b.mem.limit
}
