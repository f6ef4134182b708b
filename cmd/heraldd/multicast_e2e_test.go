package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
	"github.com/herald-mq/herald/multicast"
)

// End-to-end multicast through the appliance (issue 4): heraldd, this test binary run as the
// daemon (TestMain, HERALDD_TEST_CHILD=1) with a [[multicast.channel]] in its own network
// namespace; `herald listen --json` receivers in others; a STOMP publisher. Topology: a bridge in a
// namespace of its own, one namespace per host joined to it by a veth pair (eth0 inside), addresses
// from 198.18.78.0/24 (RFC 2544 test range) only, groups in 239.255.78.x with TTL 1.
//
// The receivers' counters come from `herald listen --stats` (printed to stderr at exit); the
// sender's answers to forged NAKs are observed on the wire by the forger itself.

const (
	mcNSPrefix = "hde-" // namespaces of these tests; stale ones are removed at start
	mcSubnet   = 78     // 198.18.78.N/24
	mcStomp    = 61613
)

// mcNet is the test topology (internal/testenv.Net).
type mcNet struct {
	*testenv.Net
	t testing.TB
}

func mcSh(t testing.TB, args ...string) string {
	t.Helper()
	return testenv.Sh(t, args...)
}

// newMCNet creates the bridge namespace and one namespace per host; hosts
// get .1, .2, ... in order. Everything is deleted at cleanup.
func newMCNet(t testing.TB, hosts ...string) *mcNet {
	t.Helper()
	return &mcNet{Net: testenv.NewNet(t, mcNSPrefix, mcSubnet, hosts...), t: t}
}

func (n *mcNet) in(host string, f func() error) error { return n.In(host, f) }

func (n *mcNet) dropShare(host string, port int) { n.DropShare(host, port) }

// dialStomp connects to the appliance from inside host's namespace.
func (n *mcNet) dialStomp(t testing.TB, host, addr string) *client.Conn {
	t.Helper()
	var c *client.Conn
	err := n.in(host, func() error {
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err = client.Dial(ctx, addr, client.Options{SubscriptionBuffer: 1 << 16})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lineLogger sends a child's stderr to t.Log, line by line, and keeps a copy.
type lineLogger struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
	buf    bytes.Buffer
	part   []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		w.t.Logf("%s: %s", w.prefix, w.part[:i])
		w.part = w.part[i+1:]
	}
	return len(p), nil
}

func (w *lineLogger) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// mcDaemon is heraldd running in a namespace.
type mcDaemon struct {
	cmd   *exec.Cmd
	done  chan struct{}
	stomp string
}

// mcChannel is the one [[multicast.channel]] of the daemon's config.
type mcChannel struct {
	group   string
	topics  []string
	keyFile string
	keyID   int
	profile string
	extra   string // more lines of the channel's table (window, streams, kv)
}

// writeDaemonConfig writes heraldd's config for a daemon at addr into dir.
func writeDaemonConfig(t testing.TB, dir, addr string, ch mcChannel) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "data_dir = %q\n\n[stomp]\nlisten = \"%s:%d\"\n\n[admin]\nsocket = %q\n\n[log]\nlevel = \"warn\"\n\n[auth]\nallow_anonymous = true # a test LAN in network namespaces\n\n",
		filepath.Join(dir, "data"), addr, mcStomp, filepath.Join(dir, "admin.sock"))
	fmt.Fprintf(&b, "[topics]\nsubscriber_buffer = 65536\n\n")
	fmt.Fprintf(&b, "[[multicast.channel]]\nname = \"metrics\"\ngroup = %q\ninterface = \"eth0\"\nttl = 1\n", ch.group)
	q := make([]string, len(ch.topics))
	for i, p := range ch.topics {
		q[i] = strconv.Quote(p)
	}
	fmt.Fprintf(&b, "topics = [%s]\n", strings.Join(q, ", "))
	b.WriteString(ch.extra)
	if ch.profile != "" {
		fmt.Fprintf(&b, "profile = %q\n", ch.profile)
	}
	if ch.keyFile != "" {
		fmt.Fprintf(&b, "key_file = %q\nkey_id = %d\n", ch.keyFile, ch.keyID)
	}
	path := filepath.Join(dir, "heraldd.toml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startDaemon runs heraldd (this binary) in host's namespace with config and waits until its
// STOMP port answers.
func (n *mcNet) startDaemon(t testing.TB, host, config string) *mcDaemon {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.NS[host], exe, "--config", config)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	cmd.Stderr = testenv.RaceWatch(t, &lineLogger{t: t, prefix: "heraldd"})
	if err := cmd.Start(); err != nil {
		t.Fatalf("start heraldd: %v", err)
	}
	d := &mcDaemon{cmd: cmd, done: make(chan struct{}), stomp: fmt.Sprintf("%s:%d", n.Addr[host].String(), mcStomp)}
	go func() { cmd.Wait(); close(d.done) }()
	t.Cleanup(d.kill)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var conn net.Conn
		err := n.in(host, func() error {
			var err error
			conn, err = net.DialTimeout("tcp", d.stomp, 200*time.Millisecond)
			return err
		})
		if err == nil {
			conn.Close()
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("heraldd exited before it listened: %v", cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("heraldd not listening on %s after 20 s: %v", d.stomp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *mcDaemon) kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// listenEvent is one line of `herald listen --json`.
type listenEvent struct {
	Topic    string            `json:"topic"`
	Stream   uint32            `json:"stream"`
	Seq      uint64            `json:"seq"`
	Headers  map[string]string `json:"headers"`
	Body     string            `json:"body"`
	Repaired bool              `json:"repaired"`
	Gap      *struct {
		Topic  string `json:"topic"`
		Stream uint32 `json:"stream"`
		From   uint64 `json:"from"`
		To     uint64 `json:"to"`
		Reason string `json:"reason"`
	} `json:"gap"`
	Session *struct {
		Old string `json:"old"`
		New string `json:"new"`
	} `json:"session"`
}

// listenStats are counters `herald listen --json --stats` prints to stderr at exit.
type listenStats struct {
	Datagrams, Messages, Gaps, GapMessages, NAKs, Repairs, KernelDrops, AuthFailures, RcvBuf uint64
}

// mcListener is a `herald listen --json --stats` process in a namespace.
type mcListener struct {
	name   string
	cmd    *exec.Cmd
	stderr *lineLogger
	done   chan struct{}

	mu     sync.Mutex
	events []listenEvent
	junk   []string // lines that are not JSON events
}

// startListener runs `herald listen` in host's namespace and returns once it has joined group.
func (n *mcNet) startListener(t testing.TB, herald, host, group string, extra ...string) *mcListener {
	t.Helper()
	args := append([]string{"netns", "exec", n.NS[host], herald, "listen", "--group", group, "--interface", "eth0", "--json", "--stats"}, extra...)
	cmd := exec.Command("ip", args...)
	l := &mcListener{name: host, cmd: cmd, stderr: &lineLogger{t: t, prefix: "listen " + host}, done: make(chan struct{})}
	cmd.Stderr = testenv.RaceWatch(t, l.stderr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start herald listen: %v", err)
	}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e listenEvent
			err := json.Unmarshal(sc.Bytes(), &e)
			l.mu.Lock()
			if err != nil || (e.Topic == "" && e.Gap == nil && e.Session == nil) {
				l.junk = append(l.junk, sc.Text())
			} else {
				l.events = append(l.events, e)
			}
			l.mu.Unlock()
		}
		cmd.Wait()
	}()
	t.Cleanup(func() { l.stop(t) })
	// Joined when the group shows in the namespace's memberships of eth0 (the socket is bound
	// before it joins: from then on datagrams queue for it).
	ip, _, _ := strings.Cut(group, ":")
	deadline := time.Now().Add(10 * time.Second)
	for {
		outb, _ := exec.Command("ip", "-n", n.NS[host], "maddr", "show", "dev", "eth0").CombinedOutput()
		out := string(outb)
		if strings.Contains(out, " "+ip+"\n") || strings.Contains(out, " "+ip+" ") {
			return l
		}
		select {
		case <-l.done:
			t.Fatalf("herald listen in %s exited before joining %s: %s", host, group, l.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("herald listen in %s did not join %s within 10 s", host, group)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the listener with SIGTERM (it prints its counters) and returns them.
func (l *mcListener) stop(t testing.TB) listenStats {
	t.Helper()
	select {
	case <-l.done:
	default:
		l.cmd.Process.Signal(syscall.SIGCONT)
		l.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-l.done:
		case <-time.After(5 * time.Second):
			l.cmd.Process.Kill()
			<-l.done
			t.Errorf("herald listen in %s ignored SIGTERM for 5 s", l.name)
		}
	}
	var st listenStats
	c := listenCounters(l.stderr.String())
	if c == nil {
		t.Errorf("herald listen in %s printed no stats object; stderr: %s", l.name, l.stderr)
		return st
	}
	st.Datagrams, st.Messages, st.Gaps, st.GapMessages = c["datagrams"], c["messages"], c["gaps"], c["gap_messages"]
	st.NAKs, st.Repairs, st.KernelDrops, st.AuthFailures, st.RcvBuf = c["naks"], c["repairs"], c["kernel_drops"], c["auth_failures"], c["rcvbuf"]
	return st
}

// listenCounters finds the counters `herald listen --json --stats` prints
// to stderr at exit (one JSON object) in stderr; nil if there are none.
func listenCounters(stderr string) map[string]uint64 {
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, `{"datagrams":`) {
			var c map[string]uint64
			if json.Unmarshal([]byte(line), &c) == nil {
				return c
			}
		}
	}
	return nil
}

func (l *mcListener) snapshot() []listenEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]listenEvent(nil), l.events...)
}

// reached reports whether the listener has seen sessions sessions and, in the last one, every
// topic of want has reached its count (delivered or reported in a gap).
func (l *mcListener) reached(sessions int, want map[string]uint64) bool {
	last := map[string]uint64{}
	n := 0
	for _, e := range l.snapshot() {
		switch {
		case e.Session != nil:
			n++
			clear(last)
		case e.Gap != nil:
			last[e.Gap.Topic] = e.Gap.To
		default:
			last[e.Topic] = e.Seq
		}
	}
	if n != sessions {
		return false
	}
	for topic, c := range want {
		if last[topic] < c {
			return false
		}
	}
	return true
}

// waitAll waits until every listener has reached want in its sessions-th session, or fails
// after d.
func waitAll(t testing.TB, d time.Duration, sessions int, want map[string]uint64, ls ...*mcListener) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, l := range ls {
		for !l.reached(sessions, want) {
			if time.Now().After(deadline) {
				t.Fatalf("listener %s: not all of %v in session %d after %v (%d events so far)", l.name, want, sessions, d, len(l.snapshot()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// mcBody is the body of the seq-th message on topic (stream sequences count from 1 per session).
func mcBody(topic string, seq uint64) string { return fmt.Sprintf("%s #%d", topic, seq) }

// streamReport is what check found in one session of a listener's output.
type streamReport struct {
	session string
	first   map[string]uint64
	msgs    int
	gaps    int
}

// check verifies a listener's output against the delivery contract: one session event per
// session in want; per session and topic, stream sequences contiguous (from 1, or from anywhere
// for a late joiner's first session), each message's body and header right, gaps only where
// allowGaps and then exactly covering the missing sequences, and each topic ending at want's count
// (no silent tail hole). Topics not in want must not appear.
func (l *mcListener) check(t testing.TB, late, allowGaps bool, want ...map[string]uint64) []streamReport {
	t.Helper()
	l.mu.Lock()
	junk := l.junk
	l.mu.Unlock()
	for _, j := range junk {
		t.Errorf("listener %s: unexpected output line %q", l.name, j)
	}
	var reps []streamReport
	var lasts []map[string]uint64
	errs := 0
	bad := func(format string, args ...any) {
		if errs++; errs <= 10 {
			t.Errorf("listener %s: "+format, append([]any{l.name}, args...)...)
		}
	}
	for _, e := range l.snapshot() {
		if e.Session != nil {
			if len(reps) > 0 && e.Session.Old != reps[len(reps)-1].session {
				bad("session change from %s, want from %s", e.Session.Old, reps[len(reps)-1].session)
			}
			if len(reps) == 0 && e.Session.Old != "0000000000000000" {
				bad("first session event %+v, want old 0000000000000000", *e.Session)
			}
			reps = append(reps, streamReport{session: e.Session.New, first: map[string]uint64{}})
			lasts = append(lasts, map[string]uint64{})
			continue
		}
		if len(reps) == 0 {
			bad("event before the first session event: %+v", e)
			continue
		}
		r, last, s := &reps[len(reps)-1], lasts[len(lasts)-1], len(reps)
		topic := e.Topic
		if e.Gap != nil {
			topic = e.Gap.Topic
		}
		if s > len(want) || want[s-1][topic] == 0 {
			bad("session %d: unexpected topic %q (%+v)", s, topic, e)
			continue
		}
		n, seen := last[topic]
		if e.Gap != nil {
			r.gaps++
			if !allowGaps {
				bad("session %d: gap %s %d-%d (%s)", s, topic, e.Gap.From, e.Gap.To, e.Gap.Reason)
			} else if r.gaps <= 3 {
				t.Logf("listener %s: gap %s %d-%d (%s)", l.name, topic, e.Gap.From, e.Gap.To, e.Gap.Reason)
			}
			if e.Gap.From != n+1 || e.Gap.To < e.Gap.From {
				bad("session %d: gap %s %d-%d after seq %d (a silent hole or an overlap)", s, topic, e.Gap.From, e.Gap.To, n)
			}
			last[topic] = e.Gap.To
			continue
		}
		r.msgs++
		if !seen {
			r.first[topic] = e.Seq
		}
		if (seen || !late || s > 1) && e.Seq != n+1 {
			bad("session %d: %s seq %d after %d (out of order or a silent hole)", s, topic, e.Seq, n)
		}
		if e.Body != mcBody(topic, e.Seq) || e.Headers["n"] != strconv.FormatUint(e.Seq, 10) {
			bad("session %d: %s seq %d: body %q headers %v", s, topic, e.Seq, e.Body, e.Headers)
		}
		last[topic] = e.Seq
	}
	if len(reps) != len(want) {
		t.Errorf("listener %s: %d sessions, want %d", l.name, len(reps), len(want))
		return reps
	}
	for i, w := range want {
		for topic, n := range w {
			if lasts[i][topic] != n {
				t.Errorf("listener %s: session %d: %s ends at %d, want %d (a silent hole)", l.name, i+1, topic, lasts[i][topic], n)
			}
		}
	}
	return reps
}

// publish sends total messages round-robin over topics (repeat a topic to weight it) to
// /topic/..., at about rate messages per second, counting them per topic in count. Each carries
// header n (its stream sequence) and body mcBody. The last one waits for its receipt: everything
// before it has then been handed to the channel.
func publish(t testing.TB, c *client.Conn, count map[string]uint64, topics []string, total, rate int) {
	t.Helper()
	start := time.Now()
	for i := 0; i < total; i++ {
		topic := topics[i%len(topics)]
		count[topic]++
		seq := count[topic]
		h := stomp.Header{Key: "n", Value: strconv.FormatUint(seq, 10)}
		var err error
		if i == total-1 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = c.SendReceipt(ctx, "/topic/"+topic, []byte(mcBody(topic, seq)), h)
			cancel()
		} else {
			err = c.Send("/topic/"+topic, []byte(mcBody(topic, seq)), h)
		}
		if err != nil {
			t.Fatalf("publish %s #%d: %v", topic, seq, err)
		}
		if i%100 == 99 {
			if d := time.Duration(i+1)*time.Second/time.Duration(rate) - time.Since(start); d > 0 {
				time.Sleep(d) // not synchronisation: the publishing rate
			}
		}
	}
}

// mapped returns the part of count whose topics match the channel's "metrics.>".
func mapped(count map[string]uint64) map[string]uint64 {
	m := map[string]uint64{}
	for k, v := range count {
		if strings.HasPrefix(k, "metrics.") {
			m[k] = v
		}
	}
	return m
}

// buildHerald builds cmd/herald into dir.
func buildHerald(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "herald")
	start := time.Now()
	// Under -race the binary is built with it too (its stderr is watched).
	args := append(append([]string{"build"}, testenv.GoBuildFlags()...), "-o", path, "github.com/herald-mq/herald/cmd/herald")
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/herald: %v\n%s", err, out)
	}
	t.Logf("built herald in %v", time.Since(start).Round(time.Millisecond))
	return path
}

// stompTally counts what a STOMP subscriber got, per topic, checking order.
type stompTally struct {
	mu   sync.Mutex
	last map[string]uint64
	bad  []string
}

func subscribeTally(t testing.TB, c *client.Conn, dest string) *stompTally {
	t.Helper()
	sub, err := c.SubscribeReceipt(context.Background(), dest, "auto")
	if err != nil {
		t.Fatalf("subscribe %s: %v", dest, err)
	}
	st := &stompTally{last: map[string]uint64{}}
	go func() {
		for f := range sub.C() {
			topic := strings.TrimPrefix(f.Get("destination"), "/topic/")
			seq, _ := strconv.ParseUint(f.Get("n"), 10, 64)
			st.mu.Lock()
			if seq != st.last[topic]+1 || string(f.Body) != mcBody(topic, seq) {
				st.bad = append(st.bad, fmt.Sprintf("%s: got n=%s body %q after %d", topic, f.Get("n"), f.Body, st.last[topic]))
			}
			st.last[topic] = seq
			st.mu.Unlock()
		}
	}()
	return st
}

// wait waits until the subscriber has every message of count, then checks it saw them in order.
func (st *stompTally) wait(t testing.TB, d time.Duration, count map[string]uint64) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st.mu.Lock()
		done := true
		for topic, n := range count {
			if st.last[topic] < n {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			if !done {
				t.Errorf("STOMP subscriber: got %v, want %v", st.last, count)
			}
			for i, b := range st.bad {
				if i < 10 {
					t.Errorf("STOMP subscriber: %s", b)
				}
			}
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// forgeResult is what the forger did and saw.
type forgeResult struct {
	genuine  int // datagrams heard from the real sender
	answers  int // of which NCF, RDATA, LOSS or flagged REPAIR: answers to NAKs
	data     int // forged DATA datagrams sent (half signed with a wrong key, half unsigned)
	naks     int // forged NAKs sent to the sender (likewise)
	sender   netip.AddrPort
	err      error
	firstErr string
}

// forge runs an attacker in namespace host without the key: it listens to the group to learn the
// sender's address, session and sequence, then until stop floods the group with forged DATA (the
// current session, sequences just ahead) and the sender with forged NAKs (the last 32 sequences),
// while counting whatever the sender multicasts in answer.
func (n *mcNet) forge(host, group string, stop <-chan struct{}) <-chan forgeResult {
	res := make(chan forgeResult, 1)
	go func() {
		var r forgeResult
		defer func() { res <- r }()
		g := netip.MustParseAddrPort(group)
		var rc, sc *net.UDPConn
		r.err = n.in(host, func() error {
			ifi, err := net.InterfaceByName("eth0")
			if err != nil {
				return err
			}
			if rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(g)); err != nil {
				return err
			}
			if err := ipv4.NewPacketConn(rc).JoinGroup(ifi, &net.UDPAddr{IP: g.Addr().AsSlice()}); err != nil {
				return err
			}
			if sc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(n.Addr[host].String())}); err != nil {
				return err
			}
			return ipv4.NewPacketConn(sc).SetMulticastInterface(ifi)
		})
		if r.err != nil {
			return
		}
		defer sc.Close()
		buf := make([]byte, multicast.MaxDatagram)
		rc.SetReadDeadline(time.Now().Add(10 * time.Second))
		var h multicast.PacketHeader
		for {
			k, from, err := rc.ReadFromUDPAddrPort(buf)
			if err != nil {
				r.err = fmt.Errorf("forger heard nothing from the sender: %w", err)
				rc.Close()
				return
			}
			if h, err = multicast.DecodeHeader(buf[:k]); err == nil {
				r.sender = from
				break
			}
		}
		rc.SetReadDeadline(time.Time{})
		var mu sync.Mutex
		session, lead := h.Session, h.Seq
		readDone := make(chan struct{})
		go func() {
			defer close(readDone)
			for {
				k, from, err := rc.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				h, err := multicast.DecodeHeader(buf[:k])
				if from != r.sender || err != nil {
					continue // our own forgeries come back too
				}
				mu.Lock()
				r.genuine++
				switch {
				case h.Type == multicast.TypeNCF || h.Type == multicast.TypeRData || h.Type == multicast.TypeLoss || h.Flags&multicast.FlagRepair != 0:
					r.answers++
				case h.Type == multicast.TypeData || h.Type == multicast.TypeCatalog:
					lead = max(lead, h.Seq)
				}
				mu.Unlock()
			}
		}()
		wrong := multicast.NewAuth([]byte("a guessed key, not the channel's"), 1)
		body, _ := multicast.AppendMessage(nil, []multicast.Header{{Key: "n", Value: "1"}}, []byte("FORGED"))
		send := func(b []byte, to netip.AddrPort) {
			if _, err := sc.WriteToUDPAddrPort(b, to); err != nil && r.firstErr == "" {
				r.firstErr = err.Error()
			}
		}
	loop:
		for k := 0; ; k++ {
			select {
			case <-stop:
				break loop
			default:
			}
			mu.Lock()
			cur := lead
			mu.Unlock()
			seq := cur + 1 + uint64(k%64)
			d, _ := multicast.AppendPacket(nil, &multicast.Packet{
				PacketHeader: multicast.PacketHeader{Type: multicast.TypeData, Session: session, Seq: seq, Trailing: max(cur, 33) - 32},
				Records:      []multicast.Record{{Stream: 1, Seq: seq, Payload: body}}})
			send(wrong.Sign(bytes.Clone(d)), g)
			send(d, g)
			nak, _ := multicast.AppendPacket(nil, &multicast.Packet{
				PacketHeader: multicast.PacketHeader{Type: multicast.TypeNAK, Session: session, Seq: uint64(k + 1)},
				Receiver:     0x666, Ranges: []multicast.Range{{From: max(cur, 33) - 32, To: cur}}})
			send(wrong.Sign(bytes.Clone(nak)), r.sender)
			send(nak, r.sender)
			r.data += 2
			r.naks += 2
			time.Sleep(200 * time.Microsecond) // not synchronisation: the attacker's pace
		}
		time.Sleep(100 * time.Millisecond) // proves absence: answers to the last NAKs would be out by now
		rc.Close()
		<-readDone
	}()
	return res
}

// TestMulticastE2E runs the appliance's multicast end to end between network namespaces. One
// topology serves the subtests; each starts its own heraldd and receivers on its own group.
func TestMulticastE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app", "r1", "r2", "r3", "x")

	// Three receivers, one of them on a link that drops 10% of the channel's datagrams; a STOMP
	// subscriber on every topic; topics inside and outside the channel's "metrics.>".
	t.Run("LossyLink", func(t *testing.T) {
		const group, port, total = "239.255.78.1:7801", 7801, 20000
		nw.dropShare("r3", port)
		t.Cleanup(func() { exec.Command("ip", "netns", "exec", nw.NS["r3"], "nft", "delete", "table", "inet", "t").Run() })
		ls := []*mcListener{
			nw.startListener(t, herald, "r1", group),
			nw.startListener(t, herald, "r2", group),
			nw.startListener(t, herald, "r3", group),
		}
		dir := t.TempDir()
		d := nw.startDaemon(t, "app", writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}}))
		tally := subscribeTally(t, nw.dialStomp(t, "app", d.stomp), "/topic/>")
		pub := nw.dialStomp(t, "app", d.stomp)
		count := map[string]uint64{}
		start := time.Now()
		topics := []string{"metrics.cpu", "metrics.cpu", "metrics.cpu", "metrics.cpu", "metrics.cpu", "metrics.cpu",
			"metrics.cpu", "metrics.mem", "metrics.mem", "other.load"}
		publish(t, pub, count, topics, total, 20000)
		want := mapped(count)
		waitAll(t, 20*time.Second, 1, want, ls...)
		t.Logf("%d messages (%v on the channel) published and received in %v", total, want, time.Since(start).Round(time.Millisecond))
		tally.wait(t, 10*time.Second, count)
		time.Sleep(50 * time.Millisecond) // proves absence: a NAK in flight would show in the counters
		for i, l := range ls {
			st := l.stop(t)
			reps := l.check(t, false, false, want)
			t.Logf("listener %s: %d messages, %d gaps; datagrams %d, NAKs %d, repairs %d, kernel drops %d, rcvbuf %d",
				l.name, reps[0].msgs, reps[0].gaps, st.Datagrams, st.NAKs, st.Repairs, st.KernelDrops, st.RcvBuf)
			if i < 2 && st.NAKs != 0 {
				t.Errorf("clean listener %s sent %d NAKs, want 0", l.name, st.NAKs)
			}
			if i == 2 && (st.NAKs == 0 || st.Repairs == 0) {
				t.Errorf("lossy listener %s: %d NAKs, %d repairs; want both > 0 (is the nft rule dropping?)", l.name, st.NAKs, st.Repairs)
			}
			if st.Messages != uint64(reps[0].msgs) {
				t.Errorf("listener %s: counted %d messages, printed %d", l.name, st.Messages, reps[0].msgs)
			}
		}
	})

	// A receiver joining mid-stream starts where it joined, without gaps for the history; a
	// daemon killed and restarted is a new session, reported as such and not as a gap.
	t.Run("LateJoinAndRestart", func(t *testing.T) {
		const group = "239.255.78.2:7802"
		topics := []string{"metrics.cpu", "metrics.cpu", "metrics.mem"}
		r1 := nw.startListener(t, herald, "r1", group)
		dir := t.TempDir()
		cfg := writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}})
		d := nw.startDaemon(t, "app", cfg)
		pub := nw.dialStomp(t, "app", d.stomp)
		c1 := map[string]uint64{}
		publish(t, pub, c1, topics, 3000, 20000)
		waitAll(t, 10*time.Second, 1, c1, r1)
		joined := copyCount(c1)
		r2 := nw.startListener(t, herald, "r2", group) // late
		publish(t, pub, c1, topics, 3000, 20000)
		waitAll(t, 10*time.Second, 1, c1, r1, r2)

		d.kill() // SIGKILL: no goodbye
		pub.Close()
		d = nw.startDaemon(t, "app", cfg)
		pub = nw.dialStomp(t, "app", d.stomp)
		c2 := map[string]uint64{}
		publish(t, pub, c2, topics, 2000, 20000)
		waitAll(t, 10*time.Second, 2, c2, r1, r2)
		time.Sleep(50 * time.Millisecond) // proves absence: a NAK in flight would show in the counters
		s1, s2 := r1.stop(t), r2.stop(t)
		rep1 := r1.check(t, false, false, c1, c2)
		rep2 := r2.check(t, true, false, c1, c2)
		if len(rep2) > 0 {
			for topic, n := range joined {
				if rep2[0].first[topic] != n+1 {
					t.Errorf("late listener: %s starts at %d, want %d (the first message after it joined)", topic, rep2[0].first[topic], n+1)
				}
			}
		}
		if len(rep1) == 2 && len(rep2) == 2 && (rep1[1].session != rep2[1].session || rep1[0].session != rep2[0].session || rep1[0].session == rep1[1].session) {
			t.Errorf("sessions: r1 %s then %s, r2 %s then %s; want the same two, different", rep1[0].session, rep1[1].session, rep2[0].session, rep2[1].session)
		}
		t.Logf("r1: NAKs %d, gaps %d; late r2: first %v, NAKs %d, gaps %d", s1.NAKs, s1.Gaps, rep2[0].first, s2.NAKs, s2.Gaps)
		if s1.Gaps != 0 || s2.Gaps != 0 {
			t.Errorf("gap counters %d and %d, want 0", s1.Gaps, s2.Gaps)
		}
	})

	// A receiver stopped (SIGSTOP) for 5 s while the stream goes on recovers, or reports exact
	// gaps: never a silent hole. The other receiver is unaffected.
	t.Run("PausedReceiver", func(t *testing.T) {
		const group = "239.255.78.3:7803"
		topics := []string{"metrics.cpu", "metrics.cpu", "metrics.mem"}
		r1 := nw.startListener(t, herald, "r1", group)
		r2 := nw.startListener(t, herald, "r2", group)
		dir := t.TempDir()
		d := nw.startDaemon(t, "app", writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}}))
		pub := nw.dialStomp(t, "app", d.stomp)
		count := map[string]uint64{}
		publish(t, pub, count, topics, 2000, 10000)
		if err := r2.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		publish(t, pub, count, topics, 10000, 2000) // 5 s
		if err := r2.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		t.Logf("r2 stopped for %v", time.Since(paused).Round(time.Millisecond))
		waitAll(t, 15*time.Second, 1, count, r1, r2)
		s1, s2 := r1.stop(t), r2.stop(t)
		rep1 := r1.check(t, false, false, count)
		rep2 := r2.check(t, false, true, count)
		t.Logf("paused r2: %d messages, %d gaps (%d messages), NAKs %d, repairs %d, kernel drops %d; r1: NAKs %d",
			rep2[0].msgs, rep2[0].gaps, s2.GapMessages, s2.NAKs, s2.Repairs, s2.KernelDrops, s1.NAKs)
		if rep1[0].msgs != int(count["metrics.cpu"]+count["metrics.mem"]) || s1.NAKs != 0 {
			t.Errorf("r1: %d messages, %d NAKs; want all, 0", rep1[0].msgs, s1.NAKs)
		}
	})

	// HMAC on: listeners with the key get every message; a forger without it, in another
	// namespace, floods forged DATA and NAKs: dropped and counted, the output unaffected, the
	// sender never answers a forged NAK.
	t.Run("HMAC", func(t *testing.T) {
		const group = "239.255.78.4:7804"
		dir := t.TempDir()
		keyFile := filepath.Join(dir, "channel.key")
		if err := os.WriteFile(keyFile, []byte("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r1 := nw.startListener(t, herald, "r1", group, "--key-file", keyFile, "--key-id", "1")
		r2 := nw.startListener(t, herald, "r2", group, "--key-file", keyFile, "--key-id", "1")
		d := nw.startDaemon(t, "app", writeDaemonConfig(t, dir, nw.Addr["app"].String(),
			mcChannel{group: group, topics: []string{"metrics.>"}, keyFile: keyFile, keyID: 1}))
		stop := make(chan struct{})
		forged := nw.forge("x", group, stop)
		pub := nw.dialStomp(t, "app", d.stomp)
		topics := []string{"metrics.cpu", "metrics.cpu", "metrics.mem"}
		count := map[string]uint64{}
		publish(t, pub, count, topics, 8000, 10000)
		waitAll(t, 10*time.Second, 1, count, r1, r2)
		close(stop)
		f := <-forged
		if f.err != nil {
			t.Fatal(f.err)
		}
		time.Sleep(50 * time.Millisecond) // proves absence: a forged datagram or NAK in flight would show in the counters
		s1, s2 := r1.stop(t), r2.stop(t)
		r1.check(t, false, false, count)
		r2.check(t, false, false, count)
		t.Logf("forger: %d forged DATA, %d forged NAKs to %v (send error: %q); heard %d genuine datagrams, %d answers; listeners: auth failures %d and %d, NAKs %d and %d",
			f.data, f.naks, f.sender, f.firstErr, f.genuine, f.answers, s1.AuthFailures, s2.AuthFailures, s1.NAKs, s2.NAKs)
		if f.data == 0 || f.genuine == 0 {
			t.Errorf("the forger sent %d datagrams and heard %d: the test did not run", f.data, f.genuine)
		}
		if f.answers != 0 {
			t.Errorf("the sender multicast %d NCF/RDATA/LOSS datagrams: it answered forged NAKs", f.answers)
		}
		if s1.AuthFailures == 0 || s2.AuthFailures == 0 {
			t.Errorf("auth failures %d and %d, want > 0 (the forgeries must reach the listeners and be dropped)", s1.AuthFailures, s2.AuthFailures)
		}
		if s1.NAKs != 0 || s2.NAKs != 0 {
			t.Errorf("listeners sent %d and %d NAKs, want 0: forged sequences must not look like loss", s1.NAKs, s2.NAKs)
		}
	})
}

func copyCount(m map[string]uint64) map[string]uint64 {
	c := make(map[string]uint64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
