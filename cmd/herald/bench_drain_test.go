package main

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/internal/testenv"
)

// bench drain stores M messages in a queue of its own, drains them with C
// consumers ACKing each (or cumulatively), and removes the empty queue.
func TestBench_Drain(t *testing.T) {
	d := admintest.Start(t, nil)
	for _, ack := range []string{"client-individual", "client"} {
		code, stdout, stderr := runCLI(t, "", "--server", d.STOMP, "bench", "drain", "--socket", d.Socket,
			"--messages", "700", "--consumers", "3", "--prefetch", "40", "--ack", ack, "--size", "300", "--json")
		if code != 0 {
			t.Fatalf("bench drain --ack %s: exit %d: %s", ack, code, stderr)
		}
		var r drainResult
		benchJSON(t, stdout, &r)
		if r.Mode != "drain" || r.Transport != "stomp" || r.Messages != 700 || r.Received != 700 || r.MissingAtEnd != 0 ||
			r.Errors != 0 || r.Redelivered != 0 || r.MsgsPerS <= 0 || r.FillPerS <= 0 || r.Ack != ack ||
			!strings.HasPrefix(r.Dest, "/queue/bench-drain.") || !strings.HasPrefix(r.CleanupNote, "removed ") {
			t.Fatalf("implausible result: %+v", r)
		}
	}
	ql := decode[admin.QueueList](t, first(runAdmin(t, d.Socket, exitOK, "queues", "--json")))
	for _, q := range ql.Queues {
		if strings.HasPrefix(q.Name, "bench") {
			t.Errorf("queue %s left behind: %+v", q.Name, q)
		}
	}
	code, _, stderr := runCLI(t, "", "--server", d.STOMP, "bench", "drain", "--ack", "auto")
	if code == 0 || !strings.Contains(stderr, "client-individual or client") {
		t.Errorf("--ack auto: exit %d, stderr %q; want a usage error naming the modes", code, stderr)
	}
}

// bench send --jetstream and bench drain --jetstream against a real
// nats-server with JetStream.
func TestBench_DrainJetStream(t *testing.T) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		testenv.Missing(t, testenv.InteropEnv, "needs nats-server (apt-get install nats-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", fmt.Sprint(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 100 {
			t.Fatalf("nats-server not listening on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var sr sendResult
	code, stdout, stderr := runCLI(t, "", "--server", addr, "bench", "send", "--jetstream",
		"--producers", "2", "--window", "8", "--size", "300", "--duration", "300ms", "--json")
	if code != 0 {
		t.Fatalf("bench send --jetstream: exit %d: %s", code, stderr)
	}
	benchJSON(t, stdout, &sr)
	if l := sr.Latency; sr.Messages == 0 || sr.Errors != 0 || l.Count != sr.Messages || l.P50 <= 0 || l.P50 > l.P99 ||
		!strings.HasPrefix(sr.Dest, "bench-send.") || !strings.Contains(stderr, "deleted the stream") {
		t.Fatalf("bench send --jetstream: implausible result %+v (stderr %q)", sr, stderr)
	}
	code, stdout, stderr = runCLI(t, "", "--server", addr, "bench", "drain", "--jetstream",
		"--messages", "900", "--consumers", "3", "--prefetch", "40", "--size", "300", "--json")
	if code != 0 {
		t.Fatalf("bench drain --jetstream: exit %d: %s", code, stderr)
	}
	var r drainResult
	benchJSON(t, stdout, &r)
	if r.Transport != "jetstream" || r.Messages != 900 || r.Received != 900 || r.MissingAtEnd != 0 || r.Errors != 0 ||
		r.MsgsPerS <= 0 || !strings.HasPrefix(r.CleanupNote, "deleted the stream") {
		t.Fatalf("implausible result: %+v", r)
	}
}
