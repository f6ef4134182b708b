package multicast

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/herald-mq/herald/internal/testenv"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Real-socket tests between network namespaces. Topology: a bridge in its own namespace, one
// namespace per host joined to it by a veth pair, addresses from 198.18.77.0/24 (RFC 2544 test
// range) only, groups in 239.255.x.x with TTL 1: nothing leaves the bridge.

const nsPrefix = "hmc-"

// topo is the test network (internal/testenv.Net).
type topo struct {
	*testenv.Net
	t testing.TB
}

func sh(t testing.TB, args ...string) string {
	t.Helper()
	return testenv.Sh(t, args...)
}

// newTopo creates the bridge namespace and one namespace per host.
func newTopo(t testing.TB, hosts ...string) *topo {
	t.Helper()
	return &topo{Net: testenv.NewNet(t, nsPrefix, 77, hosts...), t: t}
}

// in runs f on a thread switched into host's namespace: sockets created by f live there.
func (tp *topo) in(host string, f func()) {
	tp.t.Helper()
	if err := tp.In(host, func() error { f(); return nil }); err != nil {
		tp.t.Fatal(err)
	}
}

// dropShare makes host drop one incoming UDP datagram to port in ten, at random.
func (tp *topo) dropShare(host string, port uint16) { tp.DropShare(host, int(port)) }

func (tp *topo) startSender(host string, cfg SenderConfig) *Sender {
	tp.t.Helper()
	if cfg.Interface == "" {
		cfg.Interface = "eth0"
	}
	cfg.Logger = testLogger(tp.t)
	s, err := NewSender(cfg)
	if err != nil {
		tp.t.Fatal(err)
	}
	tp.in(host, func() {
		if err := s.Open(context.Background()); err != nil {
			tp.t.Fatal(err)
		}
	})
	tp.t.Cleanup(func() { s.Close() })
	return s
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// helperConfig is what the parent passes to TestHelperReceiver.
type helperConfig struct {
	Group  string
	Mode   Mode
	Key    []byte
	Count  int  // exit after this many messages (0: run until stdin closes)
	Late   bool // a late joiner: streams may start past 1
	RcvBuf int
	Topics []string
	Big    int // bodies are bigBody(seq, Big) instead of the sequence in decimal
	Seal   bool
	// LateJoin: ask for the last LateJoin messages per topic on joining late (section 4.10).
	LateJoin int
	Profile  Profile // "" = low-latency
}

// helperLine is one line of TestHelperReceiver's output. The helper checks order itself (printing
// every message would cost more CPU than the protocol under test).
type helperLine struct {
	T      string // "ready", "gap", "session", "bad", "end" (of a session), "at" (progress), "stats"
	Topic  string `json:",omitempty"`
	From   uint64 `json:",omitempty"`
	To     uint64 `json:",omitempty"`
	Reason string `json:",omitempty"`
	Old    uint64 `json:",omitempty"`
	New    uint64 `json:",omitempty"`
	Msg    string `json:",omitempty"`
	Msgs   int    `json:",omitempty"`
	Reps   int    `json:",omitempty"`
	// Sessions is the number of sessions seen, on "at" lines: every 10ms,
	// with Last as it is in the current session.
	Sessions int `json:",omitempty"`
	Last     map[string]uint64
	First    map[string]uint64
	Stats    *ReceiverStats `json:",omitempty"`
}

// TestHelperReceiver is not a test: it is the receiver process the netns tests start inside a
// namespace with `ip netns exec NS <test binary> -test.run=^TestHelperReceiver$`.
func TestHelperReceiver(t *testing.T) {
	js := os.Getenv("HERALD_HELPER_RECEIVER")
	if js == "" {
		t.Skip("helper process for the netns tests")
	}
	var cfg helperConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatal(err)
	}
	r, err := NewReceiver(ReceiverConfig{Group: cfg.Group, Interface: "eth0", Mode: cfg.Mode, Key: cfg.Key, KeyID: 1, Seal: cfg.Seal,
		Topics: cfg.Topics, RcvBuf: cfg.RcvBuf, LateJoin: cfg.LateJoin, Profile: cfg.Profile, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.Encode(helperLine{T: "ready"})
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	total, sessions := 0, 0
	end := helperLine{T: "end", Last: map[string]uint64{}, First: map[string]uint64{}}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	bad := func(format string, args ...any) { enc.Encode(helperLine{T: "bad", Msg: fmt.Sprintf(format, args...)}) }
loop:
	for cfg.Count == 0 || total < cfg.Count {
		select {
		case <-stop:
			break loop
		case <-tick.C:
			enc.Encode(helperLine{T: "at", Sessions: sessions, Last: end.Last})
		case e := <-r.Events():
			switch e := e.(type) {
			case Message:
				total++
				end.Msgs++
				if e.Repaired {
					end.Reps++
				}
				n, ok := end.Last[e.Topic]
				if (ok || !cfg.Late) && e.StreamSeq != n+1 {
					bad("%s got seq %d, want %d", e.Topic, e.StreamSeq, n+1)
				}
				if !ok {
					end.First[e.Topic] = e.StreamSeq
				}
				if cfg.Big > 0 {
					if len(e.Body) != cfg.Big || !checkBigBody(e.StreamSeq, e.Body) {
						bad("%s seq %d: a body of %d bytes that is not the one sent", e.Topic, e.StreamSeq, len(e.Body))
					}
				} else if string(e.Body) != fmt.Sprint(e.StreamSeq) {
					bad("%s seq %d has body %q", e.Topic, e.StreamSeq, e.Body)
				}
				end.Last[e.Topic] = e.StreamSeq
			case Gap:
				enc.Encode(helperLine{T: "gap", Topic: e.Topic, From: e.From, To: e.To, Reason: e.Reason.String()})
				if n := end.Last[e.Topic]; e.From != n+1 || e.To < e.From {
					bad("gap %s %d-%d, want it to start at %d", e.Topic, e.From, e.To, n+1)
				}
				end.Last[e.Topic] = e.To
			case SessionChange:
				if sessions > 0 {
					enc.Encode(end)
				}
				sessions++
				end = helperLine{T: "end", Last: map[string]uint64{}, First: map[string]uint64{}}
				enc.Encode(helperLine{T: "session", Old: e.Old, New: e.New})
			}
		}
	}
	enc.Encode(end)
	time.Sleep(50 * time.Millisecond) // not synchronisation: a grace period to answer NCFs still in flight before going
	st := r.Stats()
	enc.Encode(helperLine{T: "stats", Stats: &st})
	r.Close()
}

type child struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines []helperLine
	done  chan struct{}
	mu    sync.Mutex
}

func (tp *topo) startReceiver(host string, cfg helperConfig) *child {
	t := tp.t
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(cfg)
	cmd := exec.Command("ip", "netns", "exec", tp.NS[host], exe, "-test.run=^TestHelperReceiver$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HERALD_HELPER_RECEIVER="+string(js))
	cmd.Stderr = testenv.RaceWatch(t, tlogWriter{t})
	out, _ := cmd.StdoutPipe()
	c := &child{name: host, cmd: cmd, done: make(chan struct{})}
	c.stdin, _ = cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l helperLine
			if !strings.HasPrefix(sc.Text(), "{") || json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			if l.T == "ready" {
				close(ready)
				continue
			}
			c.mu.Lock()
			c.lines = append(c.lines, l)
			c.mu.Unlock()
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		c.stdin.Close()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-c.done
		}
	})
	select {
	case <-ready:
	case <-c.done:
		t.Fatalf("receiver %s exited before it was ready", host)
	case <-time.After(10 * time.Second):
		t.Fatalf("receiver %s not ready after 10 s", host)
	}
	return c
}

// reached reports whether the child's last progress line shows session
// number sessions with every topic of want at (or past) its count there.
func (c *child) reached(sessions int, want map[string]uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.lines) - 1; i >= 0; i-- {
		if l := c.lines[i]; l.T == "at" {
			if l.Sessions != sessions {
				return false
			}
			for topic, n := range want {
				if l.Last[topic] < n {
					return false
				}
			}
			return true
		}
	}
	return false
}

// waitReached waits up to d until every child reached want in session
// number sessions: each message delivered or reported lost.
func waitReached(t *testing.T, d time.Duration, sessions int, want map[string]uint64, cs ...*child) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, c := range cs {
		for !c.reached(sessions, want) {
			if time.Now().After(deadline) {
				t.Fatalf("receiver %s: not at %v in session %d after %v", c.name, want, sessions, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// wait stops the child (closing its stdin) once it has finished or after d, and returns its stats.
func (c *child) wait(t *testing.T, d time.Duration) ReceiverStats {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(d):
		c.stdin.Close()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			c.cmd.Process.Kill()
			<-c.done
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if l.T == "stats" {
			return *l.Stats
		}
	}
	t.Fatalf("receiver %s left no stats (%d lines)", c.name, len(c.lines))
	return ReceiverStats{}
}

// check verifies the delivery contract on the child's report: nothing out of order, and per
// session every topic ends at want[session][topic] (delivered or reported as a gap).
// It returns the number of messages and gaps.
func (c *child) check(t *testing.T, want []map[string]uint64) (msgs, gaps int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var ends []helperLine
	for _, l := range c.lines {
		switch l.T {
		case "bad":
			t.Errorf("receiver %s: %s", c.name, l.Msg)
		case "gap":
			if gaps++; gaps <= 3 {
				t.Logf("receiver %s: gap %s %d-%d (%s)", c.name, l.Topic, l.From, l.To, l.Reason)
			}
		case "end":
			msgs += l.Msgs
			ends = append(ends, l)
		}
	}
	if len(ends) != len(want) {
		t.Fatalf("receiver %s: saw %d sessions, want %d", c.name, len(ends), len(want))
	}
	for i, w := range want {
		for topic, n := range w {
			if ends[i].Last[topic] != n {
				t.Errorf("receiver %s: session %d: %s ends at %d, want %d (silent hole)", c.name, i+1, topic, ends[i].Last[topic], n)
			}
		}
	}
	return msgs, gaps
}

var netTopics = []string{"px.eu", "px.us", "px.asia", "news", "ops.alerts"}

// publishN publishes n messages round-robin over netTopics, pacing them at about rate messages per
// second, counting them per topic in count (created when nil), which it returns.
func publishN(t *testing.T, s *Sender, count map[string]uint64, n int, rate int, body int) map[string]uint64 {
	t.Helper()
	if count == nil {
		count = map[string]uint64{}
	}
	pad := strings.Repeat("x", body)
	start := time.Now()
	for i := 0; i < n; i++ {
		topic := netTopics[i%len(netTopics)]
		count[topic]++
		if err := s.Publish(topic, []Header{{"pad", pad}}, []byte(fmt.Sprint(count[topic]))); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			if d := time.Duration(i+1)*time.Second/time.Duration(rate) - time.Since(start); d > 0 {
				time.Sleep(d) // not synchronisation: the publishing rate
			}
		}
	}
	return count
}

func TestNetns_LossyLink(t *testing.T) {
	tp := newTopo(t, "s", "r1", "r2", "r3")
	const group, port, n = "239.255.7.1:7401", 7401, 30000
	tp.dropShare("r3", port)
	rs := []*child{
		tp.startReceiver("r1", helperConfig{Group: group, Count: n}),
		tp.startReceiver("r2", helperConfig{Group: group, Count: n}),
		tp.startReceiver("r3", helperConfig{Group: group, Count: n}),
	}
	s := tp.startSender("s", SenderConfig{Group: group})
	start := time.Now()
	count := publishN(t, s, nil, n, 50000, 64)
	var stats []ReceiverStats
	for _, r := range rs {
		stats = append(stats, r.wait(t, 20*time.Second))
	}
	elapsed := time.Since(start)
	for i, r := range rs {
		msgs, gaps := r.check(t, []map[string]uint64{count})
		if msgs != n || gaps != 0 {
			t.Errorf("receiver %s: got %d messages and %d gaps, want %d and 0", r.name, msgs, gaps, n)
		}
		t.Logf("receiver %s: %d datagrams, %d NAKs, %d repairs, %d kernel drops, rcvbuf %d", r.name,
			stats[i].Datagrams, stats[i].NAKs, stats[i].Repairs, stats[i].KernelDrops, stats[i].RcvBuf)
	}
	for _, i := range []int{0, 1} {
		if stats[i].NAKs != 0 {
			t.Errorf("clean receiver %s sent %d NAKs, want 0", rs[i].name, stats[i].NAKs)
		}
	}
	if stats[2].NAKs == 0 || stats[2].Repairs == 0 {
		t.Errorf("lossy receiver: %d NAKs, %d repairs, want both > 0", stats[2].NAKs, stats[2].Repairs)
	}
	ss := s.Stats()
	t.Logf("sender: %d messages in %d datagrams in %v, %d NAKs, %d NCFs, %d repairs, %d NAKs dropped",
		ss.Messages, ss.Datagrams, elapsed.Round(time.Millisecond), ss.NAKs, ss.NCFs, ss.Repairs, ss.NAKsDropped)
}

func TestNetns_LateJoinAndRestart(t *testing.T) {
	tp := newTopo(t, "s", "r1", "r2")
	const group = "239.255.7.2:7402"
	r1 := tp.startReceiver("r1", helperConfig{Group: group})
	s := tp.startSender("s", SenderConfig{Group: group})
	c1 := publishN(t, s, nil, 3000, 20000, 16)
	r2 := tp.startReceiver("r2", helperConfig{Group: group, Late: true}) // late joiner
	publishN(t, s, c1, 3000, 20000, 16)
	// The first session complete at both receivers before its sender goes.
	waitReached(t, 10*time.Second, 1, c1, r1, r2)
	s.Close() // restart: a new sender, a new session
	s2 := tp.startSender("s", SenderConfig{Group: group})
	c2 := publishN(t, s2, nil, 3000, 20000, 16)
	waitReached(t, 10*time.Second, 2, c2, r1, r2)
	st1, st2 := r1.wait(t, 0), r2.wait(t, 0)
	if _, gaps := r1.check(t, []map[string]uint64{c1, c2}); gaps != 0 {
		t.Errorf("receiver r1: %d gaps, want 0", gaps)
	}
	if _, gaps := r2.check(t, []map[string]uint64{c1, c2}); gaps != 0 {
		t.Errorf("late receiver r2: %d gaps, want 0", gaps)
	}
	if st2.NAKs != 0 {
		t.Errorf("late joiner sent %d NAKs, want 0 (no history before it joined)", st2.NAKs)
	}
	if st1.Sessions != 2 || st2.Sessions != 2 {
		t.Errorf("got %d and %d sessions, want 2 each", st1.Sessions, st2.Sessions)
	}
}

func TestNetns_PausedReceiver(t *testing.T) {
	tp := newTopo(t, "s", "r1", "r2")
	const group = "239.255.7.3:7403"
	r1 := tp.startReceiver("r1", helperConfig{Group: group})
	// r2's small receive buffer overflows while it is stopped: what the kernel drops, NAKs repair.
	r2 := tp.startReceiver("r2", helperConfig{Group: group, RcvBuf: 64 << 10})
	s := tp.startSender("s", SenderConfig{Group: group, Profile: ProfileDashboard})
	count := publishN(t, s, nil, 2000, 10000, 32)
	r2.cmd.Process.Signal(syscall.SIGSTOP)
	paused := time.Now()
	publishN(t, s, count, 10000, 2000, 32) // 5 s at 2,000 messages per second
	r2.cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("r2 paused for %v", time.Since(paused).Round(time.Millisecond))
	// r2 catches up on what the kernel kept, NAKs the rest, gets repairs.
	waitReached(t, 20*time.Second, 1, count, r1, r2)
	s1, s2 := r1.wait(t, 0), r2.wait(t, 0)
	r1.check(t, []map[string]uint64{count})
	msgs, gaps := r2.check(t, []map[string]uint64{count})
	t.Logf("paused receiver: %d messages, %d gaps, %d NAKs, %d repairs, %d kernel drops; other: %d NAKs",
		msgs, gaps, s2.NAKs, s2.Repairs, s2.KernelDrops, s1.NAKs)
	// Usually everything is repaired. On a loaded machine some ranges may
	// pass the profile's give-up time before their repair arrives: those
	// must be reported as exact gaps (check fails on any silent hole).
	if s2.KernelDrops == 0 || s2.Repairs == 0 {
		t.Errorf("paused receiver: got %d kernel drops, %d repairs; want drops counted and repaired", s2.KernelDrops, s2.Repairs)
	}
	if gaps != 0 {
		t.Logf("paused receiver: %d ranges reported as gaps (exact, not silent)", gaps)
	}
}

func TestNetns_ForgedDatagrams(t *testing.T) {
	tp := newTopo(t, "s", "r1", "r2", "x")
	const group = "239.255.7.4:7404"
	key := []byte("0123456789abcdef0123456789abcdef")
	r1 := tp.startReceiver("r1", helperConfig{Group: group, Key: key})
	r2 := tp.startReceiver("r2", helperConfig{Group: group, Key: key})
	s := tp.startSender("s", SenderConfig{Group: group, Key: key, KeyID: 1})
	src, _ := netip.ParseAddrPort(s.LocalAddr().String())
	// The attacker in namespace x floods forged DATA to the group and forged NAKs to the sender.
	stop := make(chan struct{})
	forged := make(chan int)
	go func() {
		var conn *net.UDPConn
		tp.in("x", func() {
			var err error
			conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: tp.Addr["x"].AsSlice()})
			if err != nil {
				panic(err)
			}
		})
		defer conn.Close()
		n := 0
		g := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(group))
		for {
			select {
			case <-stop:
				forged <- n
				return
			default:
			}
			sess := s.Session()
			m, _ := AppendMessage(nil, nil, []byte("forged"))
			d, _ := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeData, Session: sess, Seq: uint64(n + 1), Trailing: 1},
				Records: []Record{{Stream: 1, Seq: uint64(n + 1), Payload: m}}})
			conn.WriteToUDP(NewAuth([]byte("guessed key"), 1).Sign(d), g)
			k, _ := AppendPacket(nil, &Packet{PacketHeader: PacketHeader{Type: TypeNAK, Session: sess, Seq: uint64(n + 1)},
				Receiver: 666, Ranges: []Range{{1, 1 << 20}}})
			conn.WriteToUDPAddrPort(k, netip.AddrPortFrom(tp.Addr["s"], src.Port())) // unsigned
			n++
			time.Sleep(100 * time.Microsecond) // not synchronisation: the attacker's pace
		}
	}()
	count := publishN(t, s, nil, 5000, 20000, 16)
	// Both receivers got everything, under forgery all along.
	waitReached(t, 10*time.Second, 1, count, r1, r2)
	close(stop)
	n := <-forged
	st1, st2 := r1.wait(t, 0), r2.wait(t, 0)
	for _, r := range []*child{r1, r2} {
		if _, gaps := r.check(t, []map[string]uint64{count}); gaps != 0 {
			t.Errorf("receiver %s: %d gaps, want 0", r.name, gaps)
		}
	}
	ss := s.Stats()
	t.Logf("%d forged datagrams and %d forged NAKs: receivers counted %d and %d auth failures, sender %d; sender repairs %d",
		n, n, st1.AuthFailures, st2.AuthFailures, ss.AuthFailures, ss.Repairs)
	if st1.AuthFailures == 0 || st2.AuthFailures == 0 || ss.AuthFailures == 0 {
		t.Errorf("got auth failures %d, %d (receivers), %d (sender), want all > 0", st1.AuthFailures, st2.AuthFailures, ss.AuthFailures)
	}
	if ss.Repairs != 0 || ss.NAKs != 0 {
		t.Errorf("sender answered %d NAKs with %d repairs, want none (forged NAKs must be dropped)", ss.NAKs, ss.Repairs)
	}
}
