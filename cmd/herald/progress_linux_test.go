package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
)

// openPTY returns a pseudo-terminal's master and slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	return m, s
}

// runOnTerminal runs the CLI with its standard error on a terminal and
// returns the exit code, standard output and what the terminal showed.
func runOnTerminal(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	m, s := openPTY(t)
	defer m.Close()
	var screen bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&screen, m); close(done) }() // ends with EIO once the slave is closed
	var stdout bytes.Buffer
	code := run(append([]string{"herald"}, args...), strings.NewReader(""), &stdout, s)
	s.Close()
	<-done
	return code, stdout.String(), screen.String()
}

// herald queue requeue moved a whole dead-letter queue in one request,
// silently however long it took (and bounded by the daemon's 30 s
// operation timeout), and on --timeout said only "no answer". It now moves
// requeueBatch per request, shows its progress on a terminal (not when
// stderr is piped, nor with --json), and the answer sums the requests.
func TestAdminCLI_RequeueShowsProgress(t *testing.T) {
	defer func(b int) { requeueBatch = b }(requeueBatch)
	requeueBatch = 10
	d := admintest.Start(t, nil)
	conn := d.Dial(t)
	depth := func(q string) int {
		v, ok := d.Broker.Queue(q)
		if !ok {
			return 0
		}
		return v.Messages
	}

	d.Send(t, conn, "/queue/DLQ.jobs", 25, "dead-")
	code, out, screen := runOnTerminal(t, "queue", "requeue", "--socket", d.Socket, "jobs")
	if code != 0 || out != "requeued 25 messages from DLQ.jobs to jobs\n" {
		t.Fatalf("requeue on a terminal: exit %d, stdout %q, terminal %q", code, out, screen)
	}
	for _, w := range []string{"requeue: 10/25 messages", "requeue: 20/25 messages", "requeue: 25/25 messages (100%)"} {
		if !strings.Contains(screen, w) {
			t.Errorf("the terminal did not show %q: %q", w, screen)
		}
	}
	if depth("jobs") != 25 || depth("DLQ.jobs") != 0 {
		t.Errorf("after requeue: jobs %d, DLQ.jobs %d; want 25 and 0", depth("jobs"), depth("DLQ.jobs"))
	}

	// Piped: nothing on stderr; --max across requests.
	d.Send(t, conn, "/queue/DLQ.jobs", 25, "dead-")
	code, out, errOut := runCLI(t, "", "queue", "requeue", "--socket", d.Socket, "--max", "15", "jobs")
	if code != 0 || out != "requeued 15 messages from DLQ.jobs to jobs\n" || errOut != "" {
		t.Errorf("requeue --max 15, piped: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// --json on a terminal: the answer's JSON, the sum of the requests, and
	// no progress.
	code, out, screen = runOnTerminal(t, "queue", "requeue", "--socket", d.Socket, "--json", "jobs")
	if code != 0 || screen != "" {
		t.Errorf("requeue --json on a terminal: exit %d, terminal %q", code, screen)
	}
	if r := decode[admin.QueueOp](t, out); r.Requeued == nil || *r.Requeued != 10 || r.DLQ != "DLQ.jobs" || r.Queue != "jobs" {
		t.Errorf("requeue --json: %s", out)
	}
	if depth("jobs") != 50 || depth("DLQ.jobs") != 0 {
		t.Errorf("at the end: jobs %d, DLQ.jobs %d; want 50 and 0", depth("jobs"), depth("DLQ.jobs"))
	}
}

// herald bench ran for --duration (10 s by default), and bench drain filled
// and drained its queue, without a sign of life. On a terminal each shows
// its phase and progress on stderr, cleared before the result; piped or
// with --json, nothing of it.
func TestBench_ShowsProgressOnATerminal(t *testing.T) {
	d := admintest.Start(t, nil)
	code, out, screen := runOnTerminal(t, "--server", d.STOMP, "bench", "send", "--socket", d.Socket,
		"--producers", "1", "--window", "4", "--size", "64", "--duration", "600ms")
	if code != 0 || !strings.Contains(out, "throughput") {
		t.Fatalf("bench send on a terminal: exit %d, stdout %q, terminal %q", code, out, screen)
	}
	if !strings.Contains(screen, "bench: measuring, 0s of 600ms") {
		t.Errorf("bench send: the terminal did not show its progress: %q", screen)
	}
	code, out, screen = runOnTerminal(t, "--server", d.STOMP, "bench", "drain", "--socket", d.Socket,
		"--messages", "300", "--consumers", "1", "--size", "64")
	if code != 0 || !strings.Contains(out, "drain") {
		t.Fatalf("bench drain on a terminal: exit %d, stdout %q, terminal %q", code, out, screen)
	}
	for _, w := range []string{"bench: filling /queue/bench-drain.", "of 300 messages stored", "bench: draining /queue/bench-drain.", "of 300 messages received"} {
		if !strings.Contains(screen, w) {
			t.Errorf("bench drain: the terminal did not show %q: %q", w, screen)
		}
	}

	code, _, screen = runOnTerminal(t, "--server", d.STOMP, "bench", "send", "--socket", d.Socket,
		"--producers", "1", "--window", "4", "--size", "64", "--duration", "300ms", "--json")
	if code != 0 || strings.Contains(screen, "measuring") {
		t.Errorf("bench send --json on a terminal: exit %d, progress shown: %q", code, screen)
	}
	code, _, errOut := runCLI(t, "", "--server", d.STOMP, "bench", "send", "--socket", d.Socket,
		"--producers", "1", "--window", "4", "--size", "64", "--duration", "300ms")
	if code != 0 || strings.Contains(errOut, "measuring") {
		t.Errorf("bench send piped: exit %d, progress on stderr: %q", code, errOut)
	}
}
