package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/testbroker"
	"github.com/herald-mq/herald/journal"
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

// wantProgress checks what a terminal showed of an operation on 100
// messages: the count re matches (its one group), at least 3 times, growing,
// each some of the 100 (the operation's steps are slowed).
func wantProgress(t *testing.T, screen, re string) {
	t.Helper()
	var shown []int
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(screen, -1) {
		n, _ := strconv.Atoi(m[1])
		if n <= 0 || n >= 100 || (len(shown) > 0 && n <= shown[len(shown)-1]) {
			t.Fatalf("the terminal showed %d deleted after %v: %q", n, shown, screen)
		}
		shown = append(shown, n)
	}
	if len(shown) < 3 {
		t.Fatalf("the terminal showed the count %d times (%v), want at least 3: %q", len(shown), shown, screen)
	}
}

// wantGoesOn runs the CLI with args, an operation on 100 messages whose
// --timeout passes first: exit 75, nothing on stdout, and stderr matching
// re, whose one group is the count so far: some of the 100.
func wantGoesOn(t *testing.T, re string, args ...string) {
	t.Helper()
	code, out, errOut := runCLI(t, "", args...)
	m := regexp.MustCompile(re).FindStringSubmatch(errOut)
	if code != exitTimeout || out != "" || m == nil {
		t.Fatalf("%s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
	}
	if n, _ := strconv.Atoi(m[1]); n <= 0 || n >= 100 {
		t.Fatalf("%s said %d deleted so far, want some of 100: %q", strings.Join(args, " "), n, errOut)
	}
}

// herald queue purge waited silently; a purge longer than the daemon's
// operation timeout (30 s) was answered 504 "the journal is slow or
// stalled" although it went on, and the command failed (exit 75) without
// its end. The daemon now answers 202 with the count so far ("running"),
// the queue's view keeps the end of its last purge, and the command shows
// the count on a terminal and follows the purge to its end; if --timeout
// passes first it says so with the count so far (the purge goes on).
func TestAdminCLI_PurgeShowsProgressAndFollowsItsEnd(t *testing.T) {
	defer func(p time.Duration) { followPoll = p }(followPoll)
	followPoll = 20 * time.Millisecond
	var delay atomic.Int64
	d := admintest.StartOptions(t, nil, admintest.Options{
		OpTimeout: 300 * time.Millisecond,
		Journal: testbroker.Options{
			Tune: func(jc *journal.Config) { jc.PurgeRows = 10 },
			Wrap: testbroker.SlowOps(appliance.OpPurge, &delay),
		},
	})
	conn := d.Dial(t)
	delay.Store(int64(80 * time.Millisecond)) // 10 parts of 10: about 0.8 s, past the daemon's 300 ms
	waitEnd := func(want int) appliance.QueueView {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			v, _ := d.Broker.Queue("jobs")
			if !v.Purging {
				if v.LastPurge == nil || v.LastPurge.Deleted != want || v.LastPurge.Error != "" || v.Messages != 0 {
					t.Fatalf("after the purge: %d messages, last purge %+v; want none left, %d deleted", v.Messages, v.LastPurge, want)
				}
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("the purge did not end: %+v", v)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	d.Send(t, conn, "/queue/jobs", 100, "m")
	code, out, screen := runOnTerminal(t, "queue", "purge", "--yes", "--socket", d.Socket, "jobs")
	if code != 0 || out != "purged 100 messages from jobs\n" {
		t.Fatalf("purge on a terminal: exit %d, stdout %q, terminal %q", code, out, screen)
	}
	wantProgress(t, screen, `purge: (\d+) messages deleted`)
	if v := waitEnd(100); v.LastPurge.Bytes <= 0 || time.Since(v.LastPurge.EndedAt) > time.Minute {
		t.Fatalf("last purge %+v: want its bytes and end time", v.LastPurge)
	}
	if code, out, _ := runCLI(t, "", "queue", "show", "--socket", d.Socket, "jobs"); code != 0 || !regexp.MustCompile(`last purge:\s+100 messages \(\S+ \S+\) deleted, ended `).MatchString(out) {
		t.Fatalf("queue show after the purge: exit %d, %q", code, out)
	}

	// The API: 202, running, with the count so far.
	d.Send(t, conn, "/queue/jobs", 100, "a")
	c := admin.NewClient(d.Socket)
	defer c.Close()
	r, err := c.Purge(context.Background(), "jobs")
	if err != nil || !r.Running || r.Purged == nil || *r.Purged >= 100 {
		t.Fatalf("purge past the operation timeout: %+v (purged %v), %v; want running with fewer than 100 so far", r, r.Purged, err)
	}
	waitEnd(100)

	// --timeout passes first: exit 75, the count so far, and the purge
	// goes on to its end.
	d.Send(t, conn, "/queue/jobs", 100, "n")
	wantGoesOn(t, `--timeout 450ms passed; the purge goes on \((\d+) messages deleted so far; see herald queue show jobs\)`,
		"queue", "purge", "--yes", "--socket", d.Socket, "--timeout", "450ms", "jobs")
	waitEnd(100)

	// Piped with --json through a 202: the answer is the purge's end, and
	// nothing on stderr.
	d.Send(t, conn, "/queue/jobs", 60, "j")
	code, out, errOut := runCLI(t, "", "queue", "purge", "--yes", "--json", "--socket", d.Socket, "jobs")
	if code != 0 || errOut != "" {
		t.Fatalf("purge --json: exit %d, stderr %q", code, errOut)
	}
	if r := decode[admin.QueueOp](t, out); r.Purged == nil || *r.Purged != 60 || r.Running || r.Queue != "jobs" {
		t.Fatalf("purge --json: %s", out)
	}
	waitEnd(60)

	// queue delete purges first, followed the same way: the DELETE alone
	// outlasted the daemon's timeout (504, exit 75, the queue kept).
	d.Send(t, conn, "/queue/jobs", 100, "x")
	code, out, screen = runOnTerminal(t, "queue", "delete", "--yes", "--socket", d.Socket, "jobs")
	if code != 0 || out != "deleted queue jobs and its 100 messages\n" || !strings.Contains(screen, " messages deleted") {
		t.Fatalf("delete on a terminal: exit %d, stdout %q, terminal %q", code, out, screen)
	}
	if v, ok := d.Broker.Queue("jobs"); ok {
		t.Fatalf("after the delete the queue is still there: %+v", v)
	}

	// A consumer that comes during the purge makes the delete refuse after
	// it: the answer says the messages were purged all the same.
	d.Send(t, conn, "/queue/jobs", 100, "y")
	type result struct {
		code        int
		out, errOut string
	}
	res := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI(t, "", "queue", "delete", "--yes", "--socket", d.Socket, "jobs")
		res <- result{code, out, errOut}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for v, _ := d.Broker.Queue("jobs"); !v.Purging; v, _ = d.Broker.Queue("jobs") {
		if time.Now().After(deadline) {
			t.Fatal("the delete's purge did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := d.Dial(t).SubscribeReceipt(ctxT(t), "/queue/jobs", "client-individual"); err != nil {
		t.Fatal(err)
	}
	rr := <-res
	if rr.code != exitOther || rr.out != "" || !strings.Contains(rr.errOut, "has 1 consumers") || !strings.Contains(rr.errOut, "its 100 messages were purged first; the queue is not deleted") {
		t.Fatalf("delete with a consumer come during its purge: exit %d, stdout %q, stderr %q", rr.code, rr.out, rr.errOut)
	}
	if v, ok := d.Broker.Queue("jobs"); !ok || v.Messages != 0 || v.Consumers != 1 {
		t.Fatalf("after the refused delete: %+v, %v; want the queue, empty, with its consumer", v, ok)
	}

	// Both follow the purge with no --timeout of their own by default:
	// with the 30 s of the other admin commands, as long as the daemon's,
	// the command gave up first and never saw the 202.
	for _, cmd := range []string{"purge", "delete"} {
		if code, out, _ := runCLI(t, "", "queue", cmd, "--help"); code != 0 || !regexp.MustCompile(`--timeout value\s+give up after this long \(exit 75; the purge goes on\) \(default: none\)`).MatchString(out) {
			t.Errorf("queue %s --help: exit %d, %q; want --timeout with no default", cmd, code, out)
		}
	}
}

// herald stream delete waited silently, and a delete longer than the
// daemon's operation timeout (30 s) stopped there: heraldd reloaded the
// stream and answered "N messages removed; retry", so a stream of millions
// of messages took a delete command per 30 s of steps. The delete now goes
// on in heraldd (202 with the count so far, "running"), GET
// /v1/streams/{name}/delete tells its progress and end, and the command
// shows the count on a terminal and follows the delete to its end; if
// --timeout passes first it says so with the count so far (the delete goes
// on).
func TestAdminCLI_StreamDeleteShowsProgressAndFollowsItsEnd(t *testing.T) {
	defer func(p time.Duration) { followPoll = p }(followPoll)
	followPoll = 20 * time.Millisecond
	var delay atomic.Int64
	d := admintest.StartOptions(t, func(c *appliance.Config) {
		c.Streams.RetentionBatch = 1 // steps of 16 messages
	}, admintest.Options{
		OpTimeout: 300 * time.Millisecond,
		Journal:   testbroker.Options{Wrap: testbroker.SlowOps(appliance.OpStreamDelete, &delay)},
	})
	conn := d.Dial(t)
	delay.Store(int64(80 * time.Millisecond)) // 7 steps for 100 messages: about 0.56 s, past the daemon's 300 ms
	waitEnd := func(want int) appliance.StreamDeleteView {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			v, ok := d.Broker.StreamDelete("s")
			if ok && !v.Running {
				if v.Deleted != want || v.Error != "" || v.EndedAt == nil {
					t.Fatalf("after the delete: %+v; want %d deleted, its end", v, want)
				}
				if s, err := d.Broker.Stream(context.Background(), "s"); err == nil {
					t.Fatalf("after the delete the stream is still there: %+v", s)
				}
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("the delete did not end: %+v, %v", v, ok)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	c := admin.NewClient(d.Socket)
	defer c.Close()
	var nf *admin.APIError
	if _, err := c.StreamDelete(context.Background(), "s"); !errors.As(err, &nf) || nf.Status != http.StatusNotFound || !strings.Contains(nf.Hint, "of at most 64 names") {
		t.Fatalf("GET /v1/streams/s/delete before any delete: %v; want 404 with its hint", err)
	}

	d.Send(t, conn, "/stream/s", 100, "m")
	code, out, screen := runOnTerminal(t, "stream", "delete", "--yes", "--socket", d.Socket, "s")
	if code != 0 || out != "deleted stream s and its 100 messages\n" {
		t.Fatalf("delete on a terminal: exit %d, stdout %q, terminal %q", code, out, screen)
	}
	wantProgress(t, screen, `stream s: (\d+) messages deleted`)
	if v := waitEnd(100); v.EndedAt.Before(v.StartedAt) || time.Since(*v.EndedAt) > time.Minute {
		t.Fatalf("the delete's record %+v: want its start and end", v)
	}

	// The API: 202, running, with the count so far; the record follows
	// it to its end.
	d.Send(t, conn, "/stream/s", 100, "a")
	r, err := c.DeleteStream(context.Background(), "s")
	if err != nil || !r.Running || r.Deleted >= 100 || r.Stream != "s" {
		t.Fatalf("delete past the operation timeout: %+v, %v; want running with fewer than 100 so far", r, err)
	}
	if v, err := c.StreamDelete(context.Background(), "s"); err != nil || !v.Running || v.Deleted < r.Deleted || v.EndedAt != nil {
		t.Fatalf("GET /v1/streams/s/delete while it runs: %+v, %v; want running, at least %d deleted", v, err, r.Deleted)
	}
	end := waitEnd(100)
	if v, err := c.StreamDelete(context.Background(), "s"); err != nil || v.Running || v.Deleted != 100 || v.EndedAt == nil || !v.EndedAt.Equal(*end.EndedAt) {
		t.Fatalf("GET /v1/streams/s/delete after its end: %+v, %v; want %+v", v, err, end)
	}

	// --timeout passes first: exit 75, the count so far, and the delete
	// goes on to its end.
	d.Send(t, conn, "/stream/s", 100, "n")
	wantGoesOn(t, `--timeout 450ms passed; the delete goes on \((\d+) messages deleted so far; herald stream show s shows it while it runs\)`,
		"stream", "delete", "--yes", "--socket", d.Socket, "--timeout", "450ms", "s")
	waitEnd(100)

	// --json, on a terminal, through a 202: the answer is the delete's
	// end, and no progress.
	d.Send(t, conn, "/stream/s", 100, "j")
	code, out, screen = runOnTerminal(t, "stream", "delete", "--yes", "--json", "--socket", d.Socket, "s")
	if code != 0 || screen != "" {
		t.Fatalf("delete --json on a terminal: exit %d, stdout %q, terminal %q", code, out, screen)
	}
	if r := decode[admin.StreamOp](t, out); r.Deleted != 100 || r.Running || r.Stream != "s" {
		t.Fatalf("delete --json: %s", out)
	}
	waitEnd(100)

	// It follows the delete with no --timeout of its own by default: with
	// the 30 s of the other admin commands, as long as the daemon's, the
	// command gave up first and never saw the 202.
	if code, out, _ := runCLI(t, "", "stream", "delete", "--help"); code != 0 || !regexp.MustCompile(`--timeout value\s+give up after this long \(exit 75; the delete goes on\) \(default: none\)`).MatchString(out) {
		t.Errorf("stream delete --help: exit %d, %q; want --timeout with no default", code, out)
	}
}

// A purge or a stream delete that heraldd goes on with past its operation
// timeout stops when heraldd stops. herald queue purge and herald stream
// delete, following it, keep asking through the restart (the socket gone,
// then back) and then say that it stopped and what is left to do, with the
// count left as heraldd holds it after the restart.
func TestAdminCLI_LongOpsFollowedThroughARestart(t *testing.T) {
	defer func(p time.Duration) { followPoll = p }(followPoll)
	followPoll = 20 * time.Millisecond
	for _, tc := range []struct {
		name, dest string
		kind       appliance.OpKind
		args       []string
		// done: how many the operation removed so far; left: how many
		// heraldd holds (after the restart: what the command must say).
		done, left func(d *admintest.Daemon) int
		want       string
	}{
		{
			name: "queue purge", dest: "/queue/jobs", kind: appliance.OpPurge,
			args: []string{"queue", "purge", "--yes", "jobs"},
			done: func(d *admintest.Daemon) int { v, _ := d.Broker.Queue("jobs"); return v.PurgeDeleted },
			left: func(d *admintest.Daemon) int { v, _ := d.Broker.Queue("jobs"); return v.Messages },
			want: `no purge of jobs is running and heraldd does not know how it ended: it restarted \(a purge stops at shutdown; what it deleted stays deleted\)\. (\d+) messages are in the queue: purge again`,
		},
		{
			name: "stream delete", dest: "/stream/s", kind: appliance.OpStreamDelete,
			args: []string{"stream", "delete", "--yes", "s"},
			done: func(d *admintest.Daemon) int { v, _ := d.Broker.StreamDelete("s"); return v.Deleted },
			left: func(d *admintest.Daemon) int {
				v, err := d.Broker.Stream(context.Background(), "s")
				if err != nil {
					return -1
				}
				return int(v.Messages)
			},
			want: `no delete of stream s is running and heraldd does not know how it ended: it restarted \(a delete stops at shutdown\); what it deleted stays deleted; (\d+) messages are left in the stream: delete it again`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var delay atomic.Int64
			d := admintest.StartOptions(t, func(c *appliance.Config) {
				c.Streams.RetentionBatch = 1 // stream delete steps of 16 messages
			}, admintest.Options{
				OpTimeout: 300 * time.Millisecond,
				Journal: testbroker.Options{
					Tune: func(jc *journal.Config) { jc.PurgeRows = 10 },
					Wrap: testbroker.SlowOps(tc.kind, &delay),
				},
			})
			d.Send(t, d.Dial(t), tc.dest, 200, "m")
			delay.Store(int64(80 * time.Millisecond)) // 13-20 steps: 1-1.6 s, past the daemon's 300 ms
			type result struct {
				code        int
				out, errOut string
			}
			res := make(chan result, 1)
			go func() {
				code, out, errOut := runCLI(t, "", append(tc.args[:len(tc.args)-1:len(tc.args)-1], "--socket", d.Socket, tc.args[len(tc.args)-1])...)
				res <- result{code, out, errOut}
			}()
			// Past the operation timeout (the command follows a 202) and
			// before the end: restart.
			deadline := time.Now().Add(10 * time.Second)
			start := time.Now()
			for time.Since(start) < 450*time.Millisecond || tc.done(d) < 40 {
				if time.Now().After(deadline) {
					t.Fatalf("the %s did not get past 40 messages in 10 s: %d", tc.name, tc.done(d))
				}
				time.Sleep(10 * time.Millisecond)
			}
			select {
			case r := <-res:
				t.Fatalf("%s ended before the restart: exit %d, stdout %q, stderr %q", tc.name, r.code, r.out, r.errOut)
			default:
			}
			d.Restart(t)
			left := tc.left(d)
			if left <= 0 || left >= 200 {
				t.Fatalf("after the restart heraldd holds %d of the 200 messages; want some deleted and the rest left (the %s stops at shutdown)", left, tc.name)
			}
			var r result
			select {
			case r = <-res:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s still following 20 s after the restart", tc.name)
			}
			m := regexp.MustCompile(tc.want).FindStringSubmatch(r.errOut)
			if r.code == 0 || m == nil || m[1] != strconv.Itoa(left) || r.out != "" {
				t.Fatalf("%s through a restart: exit %d, stdout %q, stderr %q; want a failure saying it restarted, with the %d messages left", tc.name, r.code, r.out, r.errOut, left)
			}
		})
	}
}
