package interop_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testbroker"
	"github.com/herald-mq/herald/internal/testenv"
)

// broker is a real broker on 127.0.0.1:0 with a real SQLite journal in a
// temporary directory (internal/testbroker).
type broker struct {
	*testbroker.Broker
}

func startBroker(t *testing.T, mutate func(*appliance.Config)) *broker {
	t.Helper()
	// Registered before any child process, so it stops after they are
	// killed.
	return &broker{testbroker.Start(t, func(c *appliance.Config) {
		c.Queues.RedeliveryMin = appliance.Duration{Duration: 50 * time.Millisecond}
		c.Queues.RedeliveryMax = appliance.Duration{Duration: 500 * time.Millisecond}
		if mutate != nil {
			mutate(c)
		}
	})}
}

// hostPort splits the listener address (it changes on restart).
func (tb *broker) hostPort() (host, port string) {
	host, port, _ = net.SplitHostPort(tb.Addr)
	return host, port
}

// queue returns the broker's view of queue name (zero view if absent).
func (tb *broker) queue(name string) appliance.QueueView {
	v, _ := tb.B.Queue(name)
	return v
}

// topic returns the broker's view of topic name (zero view if absent).
func (tb *broker) topic(name string) appliance.TopicView {
	for _, v := range tb.B.Topics() {
		if v.Name == name {
			return v
		}
	}
	return appliance.TopicView{Name: name}
}

// dial opens a connection with Herald's own Go client, to check what a
// third-party client sent or to feed it.
func (tb *broker) dial(t *testing.T) *client.Conn {
	t.Helper()
	c, err := client.Dial(context.Background(), tb.Addr, client.Options{DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func recv(t *testing.T, sub *client.Subscription) *stomp.Frame {
	t.Helper()
	select {
	case f, ok := <-sub.C():
		if !ok {
			t.Fatalf("subscription %s closed", sub.ID())
		}
		return f
	case <-time.After(5 * time.Second):
		t.Fatalf("no message on subscription %s within 5s", sub.ID())
	}
	return nil
}

// --- locating the clients ----------------------------------------------

// missingClient skips (or, under HERALD_REQUIRE_INTEROP=1, fails) a test
// whose third-party client is not installed.
func missingClient(t *testing.T, pkg, detail string) {
	t.Helper()
	testenv.Missing(t, testenv.InteropEnv, "needs an interop client: "+detail+"; install the Debian package: apt-get install "+pkg)
}

// stompPython returns a python interpreter that can import stomp (stomp.py).
func stompPython(t *testing.T) string {
	t.Helper()
	py, problem := pythonCheck()
	if problem != "" {
		missingClient(t, "python3-stomp", problem)
	}
	return py
}

// pythonCheck runs once per test binary.
var pythonCheck = sync.OnceValues(func() (py, problem string) {
	py = os.Getenv("HERALD_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", "import stomp; print(stomp.__version__[0])").CombinedOutput()
	if err != nil {
		return py, py + ` cannot "import stomp": ` + strings.TrimSpace(string(out)) + " (" + err.Error() + ")"
	}
	// The scripts use the listener API of stomp.py 5 and later (on_message(frame)).
	if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || v < 5 {
		return py, "stomp.py " + strings.TrimSpace(string(out)) + ".x is too old, need 5 or later"
	}
	return py, ""
})

// rubyStomp returns the paths of stompcat and catstomp, after checking that
// ruby can load the stomp gem they need.
func rubyStomp(t *testing.T) (stompcat, catstomp string) {
	t.Helper()
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		if p := "/usr/bin/" + name; isExec(p) {
			return p
		}
		missingClient(t, "ruby-stomp", name+" not found on PATH or in /usr/bin")
		return ""
	}
	stompcat, catstomp = find("stompcat"), find("catstomp")
	rubyGem(t)
	return stompcat, catstomp
}

// rubyGem returns a ruby interpreter that can load the stomp gem.
func rubyGem(t *testing.T) string {
	t.Helper()
	rb, problem := rubyCheck()
	if problem != "" {
		missingClient(t, "ruby-stomp", problem)
	}
	return rb
}

// rubyCheck runs once per test binary.
var rubyCheck = sync.OnceValues(func() (rb, problem string) {
	rb, err := exec.LookPath("ruby")
	if err != nil {
		rb = "/usr/bin/ruby"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, rb, "-e", "require 'stomp'; print Stomp::Version::STRING").CombinedOutput()
	if err != nil {
		return rb, rb + ` cannot "require 'stomp'": ` + strings.TrimSpace(string(out)) + " (" + err.Error() + ")"
	}
	return rb, ""
})

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// --- child processes ---------------------------------------------------

// syncBuffer is a buffer safe for a writer goroutine and readers.
type syncBuffer = testenv.LogBuffer

// proc is a child process in its own process group, killed at cleanup.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	err    error // valid after done
}

// start runs name args with extra environment and stdin (may be nil). The
// process group is killed (SIGKILL) and reaped in t.Cleanup.
func start(t *testing.T, env []string, stdin io.Reader, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(name) + " " + strings.Join(args, " "), done: make(chan struct{})}
	p.cmd = exec.Command(name, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdin = stdin
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				t.Errorf("%s (pid %d) not reaped 5s after SIGKILL", p.name, p.cmd.Process.Pid)
			}
		}
	})
	return p
}

// wait waits for the process to exit and fails the test if it does not
// exit within d or exits non-zero.
func (p *proc) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still running after %s\nstdout: %s\nstderr: %s", p.name, d, p.stdout.String(), p.stderr.String())
	}
	if p.err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", p.name, p.err, p.stdout.String(), p.stderr.String())
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runJSON runs a scenario script to completion and decodes the one JSON
// object it prints into out.
func runJSON(t *testing.T, timeout time.Duration, out any, name string, args ...string) {
	t.Helper()
	p := start(t, nil, nil, name, args...)
	p.wait(t, timeout)
	stdout := p.stdout.String()
	if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), out); err != nil {
		t.Fatalf("%s: output is not one JSON object (%v)\nstdout: %s\nstderr: %s", p.name, err, stdout, p.stderr.String())
	}
	if s := p.stderr.String(); s != "" {
		t.Logf("%s stderr:\n%s", p.name, s)
	}
}

// waitUntil polls cond every 10ms until it holds or d passes, then fails
// with what and the result of state.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; state: %s", d, what, state())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testdata(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("test script: %v", err)
	}
	return p
}
