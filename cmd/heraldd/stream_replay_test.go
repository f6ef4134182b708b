package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
	"github.com/herald-mq/herald/journal"
)

// Replays of large streams by the real heraldd: memory stays bounded
// (TestStreamReplay_MemoryBounded) and the replay rate is measured against
// a raw SQLite scan of the same rows (BenchmarkStreamReplay5M).

// fillJournal appends n messages of size bytes to stream name straight
// through the journal (no daemon running), in transactions of 5,000.
func fillJournal(tb testing.TB, dataDir, name string, n, size int) {
	tb.Helper()
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		tb.Fatal(err)
	}
	s := journal.New(journal.Config{Path: filepath.Join(dataDir, "herald.db"), Sync: "normal"})
	if err := s.Open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	for done := 0; done < n; {
		k := min(5000, n-done)
		ops := make([]appliance.Op, k)
		for i := range ops {
			ops[i] = appliance.Op{Kind: appliance.OpAppend, Msg: &appliance.Message{Queue: name, Body: body}, Stream: &appliance.StreamOp{Name: name}}
		}
		ch := make(chan error, 1)
		s.Submit(&appliance.Batch{Ops: ops, Done: func(_ *appliance.Batch, err error) { ch <- err }})
		if err := <-ch; err != nil {
			tb.Fatal(err)
		}
		done += k
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		tb.Fatal(err)
	}
}

// replayDaemon is a heraldd child for replays.
type replayDaemon struct {
	cmd              *exec.Cmd
	addr, sock, data string
}

func startReplayDaemon(tb testing.TB, dir string, extra string) *replayDaemon {
	tb.Helper()
	d := &replayDaemon{addr: freeAddrTB(tb), sock: filepath.Join(dir, "admin.sock"), data: filepath.Join(dir, "data")}
	cfg := filepath.Join(dir, "herald.toml")
	// No retention: the whole stream stays for the replay.
	os.WriteFile(cfg, []byte(fmt.Sprintf("data_dir = %q\n[stomp]\nlisten = %q\n[admin]\nsocket = %q\n[log]\nlevel = \"warn\"\n%s\n[streams]\nmax_age = \"0s\"\nmax_bytes = 0\n",
		d.data, d.addr, d.sock, extra)), 0o640)
	d.cmd = exec.Command(os.Args[0], "--config", cfg)
	d.cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	d.cmd.Stderr = testenv.RaceWatch(tb, os.Stderr)
	if err := d.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.cmd.Process.Kill(); d.cmd.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", d.addr, 100*time.Millisecond)
		if err == nil {
			conn.Close()
			return d
		}
		if time.Now().After(deadline) {
			tb.Fatalf("heraldd did not listen on %s within 60s", d.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freeAddrTB(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// rss reads a process's resident set (VmRSS) from /proc, in bytes.
func rss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// rssSampler records the peak RSS of pid every 50 ms until stopped.
type rssSampler struct {
	peak atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := rss(pid); err == nil && v > s.peak.Load() {
				s.peak.Store(v)
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) done() int64 { close(s.stop); s.wg.Wait(); return s.peak.Load() }

// rawScan reads every row of stream name as a consumer would need them
// (offset, time, headers, body) with database/sql, and returns the rows
// per second.
func rawScan(tb testing.TB, dataDir, name string, want int) float64 {
	tb.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dataDir, "herald.db")+"?mode=ro")
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	rows, err := db.Query(`SELECT off, ts, headers, body FROM stream_messages WHERE sid=(SELECT id FROM streams WHERE name=?) ORDER BY off`, name)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var off, ts int64
		var h, body []byte
		if err := rows.Scan(&off, &ts, &h, &body); err != nil {
			tb.Fatal(err)
		}
		n++
	}
	rows.Close()
	if n != want {
		tb.Fatalf("raw scan read %d rows, want %d", n, want)
	}
	return float64(n) / time.Since(start).Seconds()
}

// replay subscribes to stream name from offset 0 (auto ack) and reads n
// messages, checking their offsets; pause, when set, is called after each
// message with its index.
func replay(tb testing.TB, addr, name string, n int, pause func(i int)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	c, err := client.Dial(ctx, addr, client.Options{})
	cancel()
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe("/stream/"+name, "auto", stomp.Header{Key: "x-stream-offset", Value: "first"})
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < n; i++ {
		select {
		case m := <-sub.C():
			if i%100_000 == 0 || i == n-1 {
				if got := m.Get("x-stream-offset"); got != strconv.Itoa(i) {
					tb.Fatalf("message %d has offset %s", i, got)
				}
			}
		case <-time.After(30 * time.Second):
			tb.Fatalf("replay stalled at %d of %d", i, n)
		}
		if pause != nil {
			pause(i)
		}
	}
}

// TestStreamReplay_MemoryBounded replays a 200 MB stream through the real
// heraldd with memory.budget_bytes = 16 MiB, to a consumer that stops
// reading for 2 s twice (its connection's output would fill to
// stomp.max_output_bytes, 64 MiB, without the budget): the daemon's RSS
// stays within its RSS before the replay plus 3 budgets (Go's heap target
// is twice what is live), and the budget's use within the budget plus a
// page (streams.page_bytes, 1 MiB) and a small holder's 64 KiB.
func TestStreamReplay_MemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 200 MB stream; skipped in -short mode")
	}
	const n, size, budget = 200_000, 1000, 16 << 20
	dir := t.TempDir()
	fillJournal(t, filepath.Join(dir, "data"), "big", n, size)
	d := startReplayDaemon(t, dir, fmt.Sprintf("[memory]\nbudget_bytes = %d\n", budget))
	ac := admin.NewClient(d.sock)
	defer ac.Close()
	time.Sleep(500 * time.Millisecond) // startup allocations settle
	base, err := rss(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var maxUsed atomic.Int64
	stopPoll := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if st, err := ac.Status(ctx); err == nil && st.Totals.MemoryUsed > maxUsed.Load() {
				maxUsed.Store(st.Totals.MemoryUsed)
			}
			cancel()
			select {
			case <-stopPoll:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	s := sampleRSS(d.cmd.Process.Pid)
	replay(t, d.addr, "big", n, func(i int) {
		if i == 20_000 || i == 120_000 {
			time.Sleep(2 * time.Second) // the daemon fills what it may
		}
	})
	peak := s.done()
	close(stopPoll)
	wg.Wait()
	t.Logf("RSS before %d MiB, peak during the replay %d MiB; budget use peak %d KiB of %d KiB", base>>20, peak>>20, maxUsed.Load()>>10, budget>>10)
	// Under the race detector every allocation costs shadow memory too
	// (2-3x here): the allowance doubles; the budget's own bound below
	// stays exact.
	k := int64(3)
	if testenv.Race {
		k = 6
	}
	if peak > base+k*budget {
		t.Errorf("RSS peaked at %d MiB during the replay of a %d MB stream, want at most %d MiB (before %d MiB + %d x the %d MiB budget)", peak>>20, n*size/1_000_000, (base+k*budget)>>20, base>>20, k, budget>>20)
	}
	if u := maxUsed.Load(); u > budget+1<<20+64<<10+64<<10 {
		t.Errorf("memory budget use peaked at %d bytes, want at most the budget %d plus a page and a small holder", u, budget)
	} else if u == 0 {
		t.Errorf("nothing charged to the memory budget during the replay")
	}
}

// BenchmarkStreamReplay5M replays a stream of HERALD_REPLAY_N messages
// (default 5,000,000) of 100 B from offset 0 through the real heraldd to
// one auto-ack STOMP consumer, then scans the same rows with
// database/sql in the same run: msgs/s, raw-ratio (replay / scan) and the
// daemon's peak RSS during the replay (MiB, from /proc). The stream is
// filled once, before the timer.
func BenchmarkStreamReplay5M(b *testing.B) {
	n := 5_000_000
	if v := os.Getenv("HERALD_REPLAY_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	fillJournal(b, filepath.Join(dir, "data"), "replay", n, 100)
	d := startReplayDaemon(b, dir, "")
	time.Sleep(500 * time.Millisecond)
	base, _ := rss(d.cmd.Process.Pid)
	b.ResetTimer()
	var rate, scan float64
	var peak int64
	for i := 0; i < b.N; i++ {
		s := sampleRSS(d.cmd.Process.Pid)
		start := time.Now()
		replay(b, d.addr, "replay", n, nil)
		rate = float64(n) / time.Since(start).Seconds()
		peak = max(peak, s.done())
		b.StopTimer()
		scan = rawScan(b, d.data, "replay", n)
		b.StartTimer()
	}
	b.ReportMetric(rate, "msgs/s")
	b.ReportMetric(scan, "scan-rows/s")
	b.ReportMetric(rate/scan, "raw-ratio")
	b.ReportMetric(float64(base)/(1<<20), "rss-before-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "rss-peak-MiB")
}
