package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
	"runtime/debug"
)

func benchJSON(t *testing.T, stdout string, v any) {
	t.Helper()
	out := strings.TrimSpace(stdout)
	if strings.Count(out, "\n") != 0 {
		t.Fatalf("want one JSON object on one line, got %q", out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("json %q: %v", out, err)
	}
}

func TestBench_Send(t *testing.T) {
	addr := startBroker(t)
	for _, tc := range []struct{ producers, window string }{{"2", "16"}, {"1", "1"}} {
		code, stdout, stderr := runCLI(t, "", "--server", addr, "bench", "send", "--dest", "/queue/bench-test",
			"--producers", tc.producers, "--window", tc.window, "--size", "512", "--duration", "300ms", "--persistent", "--json")
		if code != 0 {
			t.Fatalf("bench send: exit %d: %s", code, stderr)
		}
		var r sendResult
		benchJSON(t, stdout, &r)
		l := r.Latency
		if r.Mode != "send" || r.Messages == 0 || r.MsgsPerS <= 0 || r.MBPerS <= 0 || r.Errors != 0 ||
			l.Count != r.Messages || l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.P999 || l.P999 > l.Max || l.Min > l.P50 ||
			r.Size != 512 || !r.Persistent || r.DurationS != 0.3 {
			t.Fatalf("implausible result: %+v", r)
		}
	}
	// The human table names the figures.
	code, stdout, stderr := runCLI(t, "", "--server", addr, "bench", "send", "--producers", "1", "--duration", "300ms")
	if code != 0 || !strings.Contains(stdout, "msg/s") || !strings.Contains(stdout, "p99") {
		t.Fatalf("table: exit %d stdout %q stderr %s", code, stdout, stderr)
	}
}

func TestBench_Topic(t *testing.T) {
	addr := startBroker(t)
	code, stdout, stderr := runCLI(t, "", "--server", addr, "bench", "topic", "--dest", "/topic/bench-test",
		"--subscribers", "3", "--rate", "2000", "--size", "256", "--duration", "300ms", "--warmup", "50ms", "--json")
	if code != 0 {
		t.Fatalf("bench topic: exit %d: %s", code, stderr)
	}
	var r topicResult
	benchJSON(t, stdout, &r)
	checkTopicResult(t, r, 3, "stomp")
}

func checkTopicResult(t *testing.T, r topicResult, subs int, transport string) {
	t.Helper()
	l := r.Latency
	// 2000/s for 300 ms is 600 messages; allow a slow, shared machine.
	if r.Mode != "topic" || r.Transport != transport || r.Sent < 300 || r.Sent > 700 || r.SentPerS <= 0 ||
		len(r.Delivered) != subs || len(r.DeliveredPS) != subs || r.MinDelivPS <= 0 ||
		r.Lost != 0 || r.OutOfOrder != 0 || r.Errors != 0 ||
		l.Count != uint64(subs)*r.Sent || l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.Max {
		t.Fatalf("implausible result: %+v", r)
	}
	for _, d := range r.Delivered {
		if d != r.Sent {
			t.Fatalf("a subscriber got %d of %d: %+v", d, r.Sent, r)
		}
	}
}

func TestBench_Errors(t *testing.T) {
	down := closedAddr(t)
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"bench"}, exitUsage, "no bench command given"},
		{[]string{"bench", "frob"}, exitUsage, `unknown bench command "frob"`},
		{[]string{"bench", "send", "--producers", "0"}, exitUsage, "at least 1"},
		{[]string{"bench", "send", "--duration", "0s"}, exitUsage, "--duration must be positive"},
		{[]string{"bench", "send", "extra"}, exitUsage, "wrong number of arguments"},
		{[]string{"bench", "topic", "--rate", "0"}, exitUsage, "must be positive"},
		{[]string{"--server", down, "bench", "send", "--duration", "100ms"}, exitUnavailable, "cannot reach the STOMP server"},
		{[]string{"--server", down, "bench", "topic", "--nats", "--duration", "100ms"}, exitUnavailable, "cannot reach the NATS server"},
	}
	for _, tt := range tests {
		code, _, stderr := runCLI(t, "", tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.msg) {
			t.Errorf("%v: got %d %q, want %d containing %q", tt.args, code, stderr, tt.code, tt.msg)
		}
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	for i := 1; i <= 100000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {0.999, 99900 * time.Microsecond}} {
		got := h.quantile(c.q)
		if d := got - c.want; d < -c.want/50 || d > c.want/50 {
			t.Errorf("q%v: got %v, want %v within 2%%", c.q, got, c.want)
		}
	}
	if h.quantile(1) != 100*time.Millisecond || h.max != int64(100*time.Millisecond) {
		t.Errorf("max: got %v", h.quantile(1))
	}
	for _, v := range []int64{0, 1, 63, 64, 127, 128, 1000, 1 << 40, 1<<62 + 12345} {
		i := histIndex(v)
		if mid := histValue(i); histIndex(mid) != i {
			t.Errorf("value %d: bucket %d has midpoint %d in bucket %d", v, i, mid, histIndex(mid))
		}
	}
}

// fakeNATS is a NATS core server good enough for the bench client: INFO,
// CONNECT, PING/PONG, SUB and PUB fanned out to every subscriber.
func fakeNATS(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type sub struct {
		mu  sync.Mutex
		w   *bufio.Writer
		sid string
	}
	var mu sync.Mutex
	subs := map[string][]*sub{}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer nc.Close()
				br, bw := bufio.NewReader(nc), bufio.NewWriter(nc)
				me := &sub{w: bw}
				write := func(s string, p []byte) {
					me.mu.Lock()
					bw.WriteString(s)
					bw.Write(p)
					bw.Flush()
					me.mu.Unlock()
				}
				write("INFO {\"server_id\":\"fake\"}\r\n", nil)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					f := strings.Fields(line)
					if len(f) == 0 {
						continue
					}
					switch f[0] {
					case "PING":
						write("PONG\r\n", nil)
					case "SUB":
						me.sid = f[2]
						mu.Lock()
						subs[f[1]] = append(subs[f[1]], me)
						mu.Unlock()
					case "PUB":
						n := 0
						for _, c := range f[len(f)-1] {
							n = n*10 + int(c-'0')
						}
						p := make([]byte, n+2)
						if _, err := io.ReadFull(br, p); err != nil {
							return
						}
						mu.Lock()
						to := append([]*sub(nil), subs[f[1]]...)
						mu.Unlock()
						for _, s := range to {
							s.mu.Lock()
							s.w.WriteString("MSG " + f[1] + " " + s.sid + " " + f[len(f)-1] + "\r\n")
							s.w.Write(p)
							s.w.Flush()
							s.mu.Unlock()
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestBench_TopicNATS(t *testing.T) {
	addr := fakeNATS(t)
	code, stdout, stderr := runCLI(t, "", "--server", addr, "bench", "topic", "--nats", "--dest", "/topic/a/b",
		"--subscribers", "2", "--rate", "2000", "--size", "64", "--duration", "300ms", "--json")
	if code != 0 {
		t.Fatalf("bench topic --nats: exit %d: %s", code, stderr)
	}
	var r topicResult
	benchJSON(t, stdout, &r)
	checkTopicResult(t, r, 2, "nats")
	if natsSubject("/topic/a/b") != "a.b" {
		t.Errorf("subject of /topic/a/b: %q", natsSubject("/topic/a/b"))
	}
}

// bench send without --dest sends to a queue of its own and removes it at
// the end: its messages drained, the empty queue deleted through the admin
// socket when the daemon's is at hand.
func TestBench_SendCleansUp(t *testing.T) {
	d := admintest.Start(t, nil)
	code, stdout, stderr := runCLI(t, "", "--server", d.STOMP, "bench", "send", "--socket", d.Socket,
		"--producers", "2", "--window", "8", "--size", "256", "--duration", "300ms", "--json")
	if code != 0 {
		t.Fatalf("bench send: exit %d: %s", code, stderr)
	}
	var r sendResult
	benchJSON(t, stdout, &r)
	if !strings.HasPrefix(r.Dest, "/queue/bench.") || r.Messages == 0 {
		t.Fatalf("want a run of its own queue /queue/bench.*: %+v", r)
	}
	if r.Cleanup.Drained < r.Messages || !r.Cleanup.QueueDeleted {
		t.Errorf("cleanup %+v: want every confirmed message (at least %d) drained and the queue deleted", r.Cleanup, r.Messages)
	}
	mustContain(t, "bench stderr", stderr, "removed "+r.Dest)
	ql := decode[admin.QueueList](t, first(runAdmin(t, d.Socket, exitOK, "queues", "--json")))
	for _, q := range ql.Queues {
		if strings.HasPrefix(q.Name, "bench") {
			t.Errorf("queue %s left behind: %+v", q.Name, q)
		}
	}

	// No admin socket for this daemon: drained; the empty queue is said to
	// remain, with the command that deletes it.
	code, stdout, stderr = runCLI(t, "", "--server", d.STOMP, "bench", "send", "--socket", filepath.Join(t.TempDir(), "none.sock"),
		"--producers", "1", "--window", "4", "--duration", "200ms", "--json")
	if code != 0 {
		t.Fatalf("bench send without admin: exit %d: %s", code, stderr)
	}
	r = sendResult{}
	benchJSON(t, stdout, &r)
	if r.Cleanup.Drained < r.Messages || r.Cleanup.QueueDeleted {
		t.Errorf("cleanup without admin %+v: want drained, not deleted", r.Cleanup)
	}
	name := strings.TrimPrefix(r.Dest, "/queue/")
	mustContain(t, "bench stderr without admin", stderr, "herald queue delete --yes "+name)
	q := decode[appliance.QueueView](t, first(runAdmin(t, d.Socket, exitOK, "queue", "show", "--json", name)))
	if q.Messages != 0 {
		t.Errorf("queue %s after the bench: %d messages, want 0", name, q.Messages)
	}

	// With --dest the queue is the caller's: the messages stay, and it says so.
	code, stdout, stderr = runCLI(t, "", "--server", d.STOMP, "bench", "send", "--socket", d.Socket, "--dest", "/queue/mine",
		"--producers", "1", "--window", "4", "--duration", "200ms", "--json")
	if code != 0 {
		t.Fatalf("bench send --dest: exit %d: %s", code, stderr)
	}
	r = sendResult{}
	benchJSON(t, stdout, &r)
	mustContain(t, "bench --dest stderr", stderr, "left", "/queue/mine", "herald queue purge --yes mine")
	q = decode[appliance.QueueView](t, first(runAdmin(t, d.Socket, exitOK, "queue", "show", "--json", "mine")))
	if uint64(q.Messages) < r.Messages || r.Cleanup.Drained != 0 {
		t.Errorf("--dest: queue has %d messages, cleanup %+v; want the %d confirmed kept", q.Messages, r.Cleanup, r.Messages)
	}
}

// The load generator runs with GOGC 400 unless GOGC is set in the
// environment.
func TestBenchGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	t.Setenv("GOGC", "")
	benchGC()
	if got := debug.SetGCPercent(100); got != benchGCPercent {
		t.Fatalf("GOGC unset: the bench ran with GC percent %d, want %d", got, benchGCPercent)
	}
	t.Setenv("GOGC", "150")
	benchGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC=150 in the environment: benchGC set the GC percent to %d, want it left alone (100)", got)
	}
}
