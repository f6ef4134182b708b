package journal

import (
	"bufio"
	"database/sql"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/internal/lazyfs"
)

// BenchmarkStore_OneAtATime is one durable enqueue per commit (sync=full),
// waiting for each: the journal's share of a lone SEND's latency. Compare
// with BenchmarkRawSQLite/size=100/batch=1 in package appliance.
func BenchmarkStore_OneAtATime(b *testing.B) {
	s := mustOpen(b, Config{Sync: "full"})
	body := strings.Repeat("x", 100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := apply(b, s, enq("bench", body)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawSQLiteTail is the device's side of the sustained durable SEND
// run (4 producers x 64 outstanding, 1 KiB): one bare SQLite writer (the
// journal's table shape, WAL, synchronous=FULL, SQLite's own automatic
// checkpoints) committing HERALD_BENCH_BATCH (default 256) rows per
// transaction back to back for HERALD_BENCH_SECONDS (default 10) seconds;
// with HERALD_BENCH_BATCH=1 it is the raw single-row commit beside one
// durable SEND at a time. It reports rows per second
// and the commit time percentiles: a row's receipt can come no sooner
// than its commit, so the p999 here is the floor for Herald's p999 in the
// same run. HERALD_BENCH_PAUSE_US=N busy-waits N microseconds after each
// commit (not counted): the device's commit after a pause of other work,
// as between the SENDs of a client that waits for each receipt. Run with
// -benchtime 1x.
func BenchmarkRawSQLiteTail(b *testing.B) {
	secs := 10
	if v, err := strconv.Atoi(os.Getenv("HERALD_BENCH_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	batch := 256
	if v, err := strconv.Atoi(os.Getenv("HERALD_BENCH_BATCH")); err == nil && v > 0 {
		batch = v
	}
	pause, _ := strconv.Atoi(os.Getenv("HERALD_BENCH_PAUSE_US"))
	path, db, ins := openRawSQLite(b)
	body, hdrs := make([]byte, 1024), []byte{0}
	var lat []time.Duration
	rows := 0
	b.ResetTimer()
	for range b.N {
		end := time.Now().Add(time.Duration(secs) * time.Second)
		for time.Now().Before(end) {
			start := time.Now()
			tx, err := db.Begin()
			if err != nil {
				b.Fatal(err)
			}
			st := tx.Stmt(ins)
			for j := 0; j < batch; j++ {
				if _, err := st.Exec(1, start.UnixMilli(), 0, 0, 0, "", 0, 1024+64, hdrs, body); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			rows += batch
			for until := time.Now().Add(time.Duration(pause) * time.Microsecond); pause > 0 && time.Now().Before(until); {
			}
		}
	}
	b.StopTimer()
	reportRaw(b, path, rows, lat)
}

// openRawSQLite opens the bare writer's database (the journal's messages
// table shape, WAL, synchronous=FULL) and its insert.
func openRawSQLite(b *testing.B) (string, *sql.DB, *sql.Stmt) {
	path := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		`CREATE TABLE messages(id INTEGER PRIMARY KEY AUTOINCREMENT, qid INTEGER NOT NULL, enqueued INTEGER NOT NULL,
			deliveries INTEGER NOT NULL DEFAULT 0, not_before INTEGER NOT NULL DEFAULT 0, expires INTEGER NOT NULL DEFAULT 0,
			grp TEXT NOT NULL DEFAULT '', flags INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL, headers BLOB NOT NULL, body BLOB NOT NULL)`,
		`CREATE INDEX messages_qid ON messages(qid, id)`,
	} {
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	ins, err := db.Prepare(`INSERT INTO messages(qid, enqueued, deliveries, not_before, expires, grp, flags, size, headers, body) VALUES(?,?,?,?,?,?,?,?,?,?)`)
	if err != nil {
		b.Fatal(err)
	}
	return path, db, ins
}

// reportRaw reports rows per second and the latency percentiles of lat.
func reportRaw(b *testing.B, path string, rows int, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(0.999), "p999-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms")
	fi, _ := os.Stat(path + "-wal")
	if fi != nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "wal-MiB")
	}
}

// BenchmarkRawSQLiteServed is the bare single-row commit behind a TCP
// round trip, the shape of one durable SEND at a time: a client on
// 127.0.0.1 writes a 1 KiB request and waits for a 1-byte answer; the
// server goroutine reads it, commits it as one row (the same writer as
// BenchmarkRawSQLiteTail with a batch of 1) and answers. No broker, no
// protocol: the floor for any server that commits each request before it
// answers. On a virtual disk a commit after an idle pause (here the round
// trip) takes longer than one right after another (docs/benchmarks.md), so
// this, not the back-to-back commit, is the like-for-like floor. Latency
// is the client's, request written to answer read. HERALD_BENCH_SECONDS
// as above; run with -benchtime 1x. The client here is a goroutine of the
// same process; BenchmarkRawSQLiteServedProcess puts it in another.
func BenchmarkRawSQLiteServed(b *testing.B) {
	secs := rawServedSeconds()
	path, db, ins := openRawSQLite(b)
	ln := listenRaw(b)
	served := serveRaw(ln, db, ins)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		l, err := rawServedClient(c, secs)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, l...)
	}
	b.StopTimer()
	c.Close()
	if err := <-served; err != nil {
		b.Fatal(err)
	}
	reportRaw(b, path, len(lat), lat)
}

// BenchmarkRawSQLiteServedProcess is BenchmarkRawSQLiteServed with the
// client in a process of its own (this test binary run again, see
// TestMain), as every broker's client is: the request and the answer each
// wake a thread of another process, which on a virtual machine costs more
// than a hand-over between two goroutines of one process. This is the
// floor for one durable SEND at a time through any server.
func BenchmarkRawSQLiteServedProcess(b *testing.B) {
	secs := rawServedSeconds()
	path, db, ins := openRawSQLite(b)
	ln := listenRaw(b)
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		served := serveRaw(ln, db, ins)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), rawClientEnv+"="+ln.Addr().String(), "HERALD_BENCH_SECONDS="+strconv.Itoa(secs))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("client process: %v", err)
		}
		if err := <-served; err != nil {
			b.Fatal(err)
		}
		for _, f := range strings.Fields(string(out)) {
			ns, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				b.Fatalf("client process output %q: %v", f, err)
			}
			lat = append(lat, time.Duration(ns))
		}
	}
	b.StopTimer()
	if len(lat) == 0 {
		b.Fatal("the client process measured nothing")
	}
	reportRaw(b, path, len(lat), lat)
}

// listenRaw listens on 127.0.0.1 for the served benchmarks' client.
func listenRaw(b *testing.B) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	return ln
}

// rawClientEnv names the address a run of this binary as the served
// benchmark's client process dials (TestMain).
const rawClientEnv = "HERALD_RAW_SERVED_CLIENT"

// TestMain runs the tests, or, with rawClientEnv set, is the client
// process of BenchmarkRawSQLiteServedProcess: it prints each request's
// latency in nanoseconds, one per line.
func TestMain(m *testing.M) {
	lazyfs.ChildMain() // a child serving a lazyfs mount (ioerror_test.go)
	addr := os.Getenv(rawClientEnv)
	if addr == "" {
		os.Exit(m.Run())
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raw served client:", err)
		os.Exit(1)
	}
	lat, err := rawServedClient(c, rawServedSeconds())
	c.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "raw served client:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	for _, d := range lat {
		fmt.Fprintln(w, int64(d))
	}
	w.Flush()
	os.Exit(0)
}

func rawServedSeconds() int {
	if v, err := strconv.Atoi(os.Getenv("HERALD_BENCH_SECONDS")); err == nil && v > 0 {
		return v
	}
	return 10
}

const rawServedSize = 1024

// serveRaw accepts one connection on ln and answers each request of
// rawServedSize bytes with one byte once it is committed as a row; the
// channel gets nil when the client hangs up, or the error that stopped it.
func serveRaw(ln net.Listener, db *sql.DB, ins *sql.Stmt) <-chan error {
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		req, hdrs := make([]byte, rawServedSize), []byte{0}
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				served <- nil // the client is done
				return
			}
			tx, err := db.Begin()
			if err == nil {
				_, err = tx.Stmt(ins).Exec(1, time.Now().UnixMilli(), 0, 0, 0, "", 0, rawServedSize+64, hdrs, req)
				if err == nil {
					err = tx.Commit()
				}
			}
			if err != nil {
				served <- err
				return
			}
			if _, err := c.Write([]byte{1}); err != nil {
				served <- err
				return
			}
		}
	}()
	return served
}

// rawServedClient sends requests one at a time on c for secs seconds and
// returns each one's latency, request written to answer read.
func rawServedClient(c net.Conn, secs int) ([]time.Duration, error) {
	req, ans := make([]byte, rawServedSize), make([]byte, 1)
	var lat []time.Duration
	end := time.Now().Add(time.Duration(secs) * time.Second)
	for time.Now().Before(end) {
		start := time.Now()
		if _, err := c.Write(req); err != nil {
			return lat, err
		}
		if _, err := io.ReadFull(c, ans); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// BenchmarkRawSQLiteGroup is the sustained durable SEND run's shape with
// no broker and no protocol: HERALD_BENCH_PRODUCERS (default 4) goroutines
// each keep HERALD_BENCH_WINDOW (default 64) requests of 1 KiB
// outstanding to one bare SQLite writer (the journal's table shape, WAL,
// synchronous=FULL), which commits every request waiting as one
// transaction and then answers them, as a group-committing server does.
// Checkpoints are the journal's shape, not SQLite's automatic ones: a
// second connection runs PASSIVE every 10 ms (every 2 ms while the WAL
// holds more than 16 MiB), and once the WAL holds more than 16 MiB with at most 256 frames left to
// copy, the writer copies those itself between two transactions, so that
// the next one starts the WAL over (checkpoint.go). Latency is a
// request's, from its hand-over to the writer to its answer: the floor,
// on this device, of a receipt's latency in that run (Herald's p999
// against this one's in the same run says what the broker adds).
// HERALD_BENCH_RATE=N paces the producers to N requests a second in all
// (each still at most its window ahead): the floor at the rate Herald
// reached, rather than flat out, which writes more. HERALD_BENCH_SECONDS
// as above; run with -benchtime 1x.
func BenchmarkRawSQLiteGroup(b *testing.B) {
	secs := rawServedSeconds()
	producers, window := envInt("HERALD_BENCH_PRODUCERS", 4), envInt("HERALD_BENCH_WINDOW", 64)
	var interval time.Duration // between two requests of a producer
	if rate := envInt("HERALD_BENCH_RATE", 0); rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(producers) / float64(rate))
	}
	path, db, ins := openRawSQLite(b)
	if _, err := db.Exec("PRAGMA wal_autocheckpoint=0"); err != nil {
		b.Fatal(err)
	}
	ck, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL&_synchronous=FULL")
	if err != nil {
		b.Fatal(err)
	}
	defer ck.Close()
	ck.SetMaxOpenConns(1)
	const restartAt, tailPages = 16 << 20, 256
	var tail atomic.Bool // the writer copies the last frames
	stop := make(chan struct{})
	ckDone := make(chan error, 1)
	go func() {
		t := time.NewTimer(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				ckDone <- nil
				return
			case <-t.C:
			}
			var busy, logPages, done int
			if err := ck.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logPages, &done); err != nil {
				ckDone <- err
				return
			}
			next := 10 * time.Millisecond
			if logPages*4096 > restartAt {
				next = 2 * time.Millisecond // past restartAt: again soon
				if logPages-done <= tailPages {
					tail.Store(true)
				}
			}
			t.Reset(next)
		}
	}()
	type req struct {
		at   time.Time
		done chan<- time.Time
	}
	body, hdrs := make([]byte, rawServedSize), []byte{0}
	var lat []time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	b.ResetTimer()
	for range b.N {
		end := time.Now().Add(time.Duration(secs) * time.Second)
		reqs := make(chan req, producers*window)
		for range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers := make(chan time.Time, window)
				var mine []time.Duration
				next, out := time.Now(), 0
				wait := time.NewTimer(time.Hour)
				defer wait.Stop()
				for {
					now := time.Now()
					for out < window && now.Before(end) && !now.Before(next) {
						reqs <- req{now, answers}
						out++
						if interval > 0 {
							next = next.Add(interval)
						}
					}
					if out == 0 && !now.Before(end) {
						break
					}
					var timer <-chan time.Time
					if out < window && now.Before(end) {
						wait.Reset(next.Sub(now))
						timer = wait.C
					}
					select {
					case at := <-answers:
						mine = append(mine, time.Since(at))
						out--
					case <-timer:
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		writerDone := make(chan error, 1)
		go func() {
			var batch []req
			for {
				r, ok := <-reqs
				if !ok {
					writerDone <- nil
					return
				}
				batch = append(batch[:0], r)
			more:
				for {
					select {
					case r, ok := <-reqs:
						if !ok {
							break more
						}
						batch = append(batch, r)
					default:
						break more
					}
				}
				tx, err := db.Begin()
				if err != nil {
					writerDone <- err
					return
				}
				st := tx.Stmt(ins)
				for _, r := range batch {
					if _, err := st.Exec(1, r.at.UnixMilli(), 0, 0, 0, "", 0, rawServedSize+64, hdrs, body); err != nil {
						writerDone <- err
						return
					}
				}
				if err := tx.Commit(); err != nil {
					writerDone <- err
					return
				}
				for _, r := range batch {
					r.done <- r.at
				}
				if tail.Swap(false) {
					if _, err := db.Exec("PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
						writerDone <- err
						return
					}
				}
			}
		}()
		wg.Wait()
		close(reqs)
		if err := <-writerDone; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	close(stop)
	if err := <-ckDone; err != nil {
		b.Fatal(err)
	}
	if len(lat) == 0 {
		b.Fatal("nothing committed")
	}
	reportRaw(b, path, len(lat), lat)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
