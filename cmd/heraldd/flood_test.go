package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/internal/testenv"
)

// floodDaemon is heraldd running in a memory cgroup of its own, with a
// probe client beside it.
type floodDaemon struct {
	t      *testing.T
	cg     *testenv.Cgroup
	addr   string
	socket string
	cmd    *exec.Cmd
	base   time.Duration // the probe's round trip at rest
}

const floodCgroupLimit = 384 << 20

var (
	plainOnce sync.Once
	plainBin  string
	plainErr  error
)

// plainHeraldd builds heraldd without the race detector, whatever the
// tests run under: the detector's shadow memory (5 to 10 times the heap)
// would make a memory bound meaningless. Races are checked by the other
// tests, whose children are race-built.
func plainHeraldd(t *testing.T) string {
	t.Helper()
	plainOnce.Do(func() {
		dir, err := os.MkdirTemp("", "heraldd-plain-")
		if err != nil {
			plainErr = err
			return
		}
		plainBin = filepath.Join(dir, "heraldd")
		out, err := exec.Command("go", "build", "-o", plainBin, ".").CombinedOutput()
		if err != nil {
			plainErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plainBin
}

// startFloodDaemon starts heraldd in a 384 MiB memory cgroup with at most
// nofile open files and embedded defaults: the memory budget is the
// default, 40% of the cgroup's limit.
func startFloodDaemon(t *testing.T, nofile int) *floodDaemon {
	cg := testenv.NewMemoryCgroup(t, floodCgroupLimit)
	bin := plainHeraldd(t)
	dir := t.TempDir()
	d := &floodDaemon{t: t, cg: cg, addr: freeAddr(t), socket: filepath.Join(dir, "admin.sock")}
	argv := cg.Wrap(fmt.Sprintf("ulimit -n %d &&", nofile), bin, "--data-dir", dir, "--stomp-listen", d.addr, "--admin-socket", d.socket, "--log-level", "error")
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Stderr = os.Stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.cmd.Process.Kill(); d.cmd.Wait() })
	dial2(t, d.addr).Close()
	d.base = d.probeMedian()
	st := d.status()
	t.Logf("heraldd in a %d MiB cgroup: memory budget %d MiB, probe %s at rest", floodCgroupLimit>>20, st.Totals.MemoryBudget>>20, d.base)
	if want := int64(floodCgroupLimit) * 2 / 5; st.Totals.MemoryBudget != want {
		t.Fatalf("memory budget %d, want 40%% of the cgroup's limit: %d", st.Totals.MemoryBudget, want)
	}
	return d
}

func (d *floodDaemon) status() *admin.Status {
	d.t.Helper()
	c := admin.NewClient(d.socket)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		d.t.Fatalf("admin status: %v", err)
	}
	return st
}

// peakRSS is the daemon's peak resident set (VmHWM): unlike the cgroup's
// figure, it leaves out the page cache of the journal's writes.
func (d *floodDaemon) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		d.t.Fatalf("daemon status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	d.t.Fatal("no VmHWM in the daemon's status")
	return 0
}

// probe is one durable SEND with receipt on a connection of its own.
func (d *floodDaemon) probe() time.Duration {
	d.t.Helper()
	c := dial2(d.t, d.addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := c.SendReceipt(ctx, "/queue/probe", []byte("ping")); err != nil {
		d.t.Fatalf("probe: %v", err)
	}
	return time.Since(start)
}

func (d *floodDaemon) probeMedian() time.Duration {
	var r []time.Duration
	for range 5 {
		r = append(r, d.probe())
	}
	slices.Sort(r)
	return r[2]
}

// check asserts, beside an attack: the probe's round trip within a factor
// of its baseline, the cgroup's peak under its limit with no OOM kill,
// and the daemon answering its admin socket.
func (d *floodDaemon) check(attack string) {
	d.t.Helper()
	if n := d.cg.OOMKills(); n > 0 {
		d.t.Fatalf("%s: %d OOM kills in the daemon's cgroup (peak %d MiB)", attack, n, d.cg.Peak()>>20)
	}
	st := d.status()
	d.t.Logf("%s: memory used %d MiB, connections %d", attack, st.Totals.MemoryUsed>>20, st.Connections)
	rtt := d.probeMedian()
	st = d.status()
	hwm := d.peakRSS()
	d.t.Logf("%s: probe %s (%.1fx rest), peak RSS %d MiB (cgroup peak with page cache %d MiB of %d), memory used %d MiB of %d, backpressure: memory %d, output %d, journal %d",
		attack, rtt, float64(rtt)/float64(d.base), hwm>>20, d.cg.Peak()>>20, floodCgroupLimit>>20, st.Totals.MemoryUsed>>20, st.Totals.MemoryBudget>>20,
		st.Totals.MemoryWaits, st.Totals.OutputWaits, st.Totals.JournalWaits)
	if n := d.cg.OOMKills(); n > 0 {
		d.t.Fatalf("%s: %d OOM kills in the daemon's cgroup", attack, n)
	}
	if hwm > floodCgroupLimit*3/4 {
		d.t.Fatalf("%s: peak RSS %d MiB, more than 3/4 of the cgroup's %d MiB", attack, hwm>>20, floodCgroupLimit>>20)
	}
	if rtt > 20*d.base+100*time.Millisecond {
		d.t.Fatalf("%s: probe round trip %s, %s at rest", attack, rtt, d.base)
	}
}

// rawConn is a STOMP 1.2 connection written to by hand.
func (d *floodDaemon) rawConn() net.Conn {
	d.t.Helper()
	c, err := net.Dial("tcp", d.addr)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { c.Close() })
	io.WriteString(c, "CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
	buf := make([]byte, 512)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err != nil || !bytes.HasPrefix(buf[:n], []byte("CONNECTED")) {
		d.t.Fatalf("CONNECT: %q %v", buf[:n], err)
	}
	c.SetReadDeadline(time.Time{})
	return c
}

// pour writes frame over c until total bytes are written, a write blocks
// for 2 s (the daemon stopped reading), or the connection ends.
func pour(c net.Conn, frame []byte, total int) int {
	var b bytes.Buffer
	for b.Len() < 256<<10 {
		b.Write(frame)
	}
	sent := 0
	for sent < total {
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		n, err := c.Write(b.Bytes())
		sent += n
		if err != nil {
			return sent
		}
	}
	return sent
}

// Attacks of issue 10, one after the other, against heraldd in a memory
// cgroup of 384 MiB on its default budget (40%: 153 MiB), each beside a
// probe client: the daemon is never OOM-killed, its peak stays under the
// cgroup's limit, and the probe's durable round trip stays within 20x its
// rest value (+100 ms), while each attack is held back.
func TestFlood_MemoryCgroup(t *testing.T) {
	d := startFloodDaemon(t, 4096)
	var wg sync.WaitGroup

	// 1. Clients that send with receipts and never read (the output
	// budget), 4 of them at 64 MiB of frames each.
	for range 4 {
		c := d.rawConn()
		wg.Add(1)
		go func() { defer wg.Done(); pour(c, []byte("SEND\ndestination:/topic/void\nreceipt:r\n\nx\x00"), 64<<20) }()
	}
	wg.Wait()
	d.check("4 clients sending with receipts, reading nothing")

	// 2. Open transactions of tiny frames on 8 connections: 64 MiB each
	// allowed (stomp.max_transaction_bytes), 512 MiB in all, more than the
	// cgroup holds: the memory budget holds them back.
	for i := range 8 {
		c := d.rawConn()
		io.WriteString(c, fmt.Sprintf("BEGIN\ntransaction:t%d\n\n\x00", i))
		frame := []byte(fmt.Sprintf("SEND\ndestination:/queue/tx\ntransaction:t%d\na:%s\n\nx\x00", i, strings.Repeat("h", 200)))
		wg.Add(1)
		go func() { defer wg.Done(); pour(c, frame, 80<<20) }()
	}
	wg.Wait()
	d.check("8 connections filling open transactions")

	// 3. 200 connections announcing 16 MiB bodies and sending 1 MiB of each.
	for range 200 {
		c := d.rawConn()
		io.WriteString(c, fmt.Sprintf("SEND\ndestination:/queue/big\ncontent-length:%d\n\n", 16<<20))
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetWriteDeadline(time.Now().Add(3 * time.Second))
			c.Write(make([]byte, 1<<20))
		}()
	}
	wg.Wait()
	d.check("200 connections stalled in 16 MiB bodies")
}

// Queues nobody consumes, 6 of them with 60 MiB each (each within its own
// 32 MiB window in memory): they share the queues' half of the memory
// budget, the rest stays on disk, and every message is delivered
// afterwards.
func TestFlood_QueueWindowsInCgroup(t *testing.T) {
	d := startFloodDaemon(t, 4096)
	body := bytes.Repeat([]byte("q"), 1<<20)
	var wg sync.WaitGroup
	for q := range 6 {
		c := dial2(t, d.addr)
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.SendReceipt(ctx, fmt.Sprintf("/queue/w%d", q), append([]byte(fmt.Sprintf("%03d", i)), body...))
				cancel()
				if err != nil {
					t.Errorf("queue w%d send %d: %v", q, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	d.check("6 queues of 60 MiB, no consumer")
	c := dial2(t, d.addr)
	defer c.Close()
	sub, err := c.Subscribe("/queue/w3", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		select {
		case f := <-sub.C():
			if want := fmt.Sprintf("%03d", i); string(f.Body[:3]) != want || len(f.Body) != 3+len(body) {
				t.Fatalf("message %d of w3: %q..., %d bytes", i, f.Body[:3], len(f.Body))
			}
			if err := c.Ack(f); err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d of w3 not delivered", i)
		}
	}
}

// At the open-file limit, STOMP connections are refused with an ERROR
// naming LimitNOFILE, while the admin socket keeps descriptors and answers.
func TestFlood_FileDescriptorsKeepAdmin(t *testing.T) {
	d := startFloodDaemon(t, 512) // 384 connections, 128 kept
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	refused := ""
	for range 600 {
		c, err := net.Dial("tcp", d.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if len(conns) > 390 && refused == "" {
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			refused = string(buf[:n])
		}
	}
	if !strings.Contains(refused, "ERROR") || !strings.Contains(refused, "LimitNOFILE") {
		t.Fatalf("connection 391 of a 512-file daemon got %q, want an ERROR naming LimitNOFILE", refused)
	}
	st := d.status()
	if st.Connections > 384 {
		t.Fatalf("%d connections with 512 open files allowed and 128 kept", st.Connections)
	}
	t.Logf("600 connections tried: %d served, refused with %q", st.Connections, strings.SplitN(refused, "\n", 3)[1])
}
