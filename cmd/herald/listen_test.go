package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/herald-mq/herald/internal/testenv"
	"github.com/herald-mq/herald/multicast"
)

// Tests of `herald listen` itself: the CLI runs in-process on a thread inside a network namespace
// of the test's own (loopback with multicast on), and the test plays the sender with datagrams it
// writes by hand, so every line of output is known in advance, gaps and restarts included.

func TestListen_UsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"listen", "--group", "239.255.0.1:7400", "--mode", "fast"}, `--mode "fast"`},
		{[]string{"listen", "--group", "239.255.0.1:7400", "--count", "-1"}, "--count must not be negative"},
		{[]string{"listen", "--group", "239.255.0.1:7400", "--key-id", "256"}, "--key-id 256"},
		{[]string{"listen", "--group", "239.255.0.1:7400", "--next-key-id", "300"}, "--next-key-id 300"},
		{[]string{"listen", "--group", "239.255.0.1:7400", "--seal"}, "need --key-file"},
		{[]string{"listen", "--group", "239.255.0.1:7400", "--timestamps"}, "--timestamps needs --json"},
		{[]string{"listen", "--group", "10.0.0.1:7400"}, "not an IPv4 multicast address"},
		{[]string{"listen", "--group", "239.255.0.1:7400", "--profile", "slow"}, "slow"},
		{[]string{"listen", "--group", "239.255.0.1:7400", "extra"}, "listen --group"},
	} {
		code, stdout, stderr := runCLI(t, "", tc.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("herald %s: exit %d, stdout %q, stderr %q; want exit %d and %q on stderr",
				strings.Join(tc.args, " "), code, stdout, stderr, exitUsage, tc.want)
		}
	}
	// A missing --group is caught by the flag parser.
	if code, _, stderr := runCLI(t, "", "listen"); code == exitOK || !strings.Contains(stderr, "group") {
		t.Errorf("herald listen without --group: exit %d, stderr %q", code, stderr)
	}
}

const listenNSPrefix = "hls-"

var listenNSSeq atomic.Int32

// listenNS creates a network namespace with loopback up, multicast on, and 239.255.0.0/16 routed
// to it; it is deleted at cleanup (stale ones of dead runs at start).
func listenNS(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip")
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, listenNSPrefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(strings.TrimPrefix(name, listenNSPrefix), "-")[0])
		if err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
			continue
		}
		exec.Command("ip", "netns", "del", name).Run()
	}
	ns := fmt.Sprintf("%s%d-%d", listenNSPrefix, os.Getpid(), listenNSSeq.Add(1))
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "set", "lo", "multicast", "on"},
		{"-n", ns, "route", "add", "239.255.0.0/16", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			exec.Command("ip", "netns", "del", ns).Run()
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	return ns
}

// inNS runs f on an OS thread switched into namespace ns.
func inNS(ns string, f func()) error {
	return testenv.InNamespace(ns, func() error { f(); return nil })
}

const (
	listenSession1 = 0x65670e2a9c1d22f0
	listenSession2 = 0x65670e2b00c0ffee
)

// listenScript is what the test sender multicasts: session 1 with three topics, a datagram lost
// (px.eu 3-4, declared gone by the next datagram's trailing edge), a non-UTF-8 body, a body ending
// in a newline; then the sender restarts (session 2).
func listenScript(t *testing.T) [][]byte {
	t.Helper()
	msg := func(body string, hs ...multicast.Header) []byte {
		b, err := multicast.AppendMessage(nil, hs, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var out [][]byte
	add := func(p *multicast.Packet) {
		b, err := multicast.AppendPacket(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	hdr := func(typ multicast.Type, session, seq, trailing uint64) multicast.PacketHeader {
		return multicast.PacketHeader{Type: typ, Session: session, Seq: seq, Trailing: trailing}
	}
	add(&multicast.Packet{PacketHeader: hdr(multicast.TypeCatalog, listenSession1, 1, 1), Catalog: []multicast.CatalogEntry{
		{Stream: 1, First: 1, Topic: "px.eu"}, {Stream: 2, First: 1, Topic: "px.us"}, {Stream: 3, First: 1, Topic: "ops.alerts"}}})
	add(&multicast.Packet{PacketHeader: hdr(multicast.TypeData, listenSession1, 2, 1), Records: []multicast.Record{
		{Stream: 1, Seq: 1, Payload: msg("1.0842", multicast.Header{Key: "k", Value: "v"}, multicast.Header{Key: "k", Value: "second"})},
		{Stream: 2, Seq: 1, Payload: msg("2.5")}}})
	add(&multicast.Packet{PacketHeader: hdr(multicast.TypeData, listenSession1, 3, 1), Records: []multicast.Record{
		{Stream: 1, Seq: 2, Payload: msg("bin\xff")},
		{Stream: 3, Seq: 1, Payload: msg("disk full\n")}}})
	// Datagram 4 (px.eu 3 and 4) is never sent; datagram 5's trailing edge says it is gone.
	add(&multicast.Packet{PacketHeader: hdr(multicast.TypeData, listenSession1, 5, 5), Records: []multicast.Record{
		{Stream: 1, Seq: 5, Payload: msg("1.0850")},
		{Stream: 2, Seq: 2, Payload: msg("2.6")}}})
	add(&multicast.Packet{PacketHeader: hdr(multicast.TypeHeartbeat, listenSession1, 5, 5), Leading: 5,
		Streams: []multicast.StreamSeq{{Stream: 1, Seq: 5}, {Stream: 2, Seq: 2}, {Stream: 3, Seq: 1}}})
	add(&multicast.Packet{PacketHeader: hdr(multicast.TypeCatalog, listenSession2, 1, 1), Catalog: []multicast.CatalogEntry{
		{Stream: 1, First: 1, Topic: "px.eu"}}})
	add(&multicast.Packet{PacketHeader: hdr(multicast.TypeData, listenSession2, 2, 1), Records: []multicast.Record{
		{Stream: 1, Seq: 1, Payload: msg("after restart")}}})
	// A message in three fragments (datagrams 3 to 5): printed once, whole, like any other.
	big := msg(listenBigBody)
	k := len(big) / 3
	for _, i := range []int{0, 1, 2} {
		end := min((i+1)*k, len(big))
		if i == 2 {
			end = len(big)
		}
		h := hdr(multicast.TypeData, listenSession2, uint64(3+i), 1)
		h.Flags = multicast.FlagFragment
		add(&multicast.Packet{PacketHeader: h, Records: []multicast.Record{{Stream: 1, Seq: 2, Frag: true,
			Total: uint32(len(big)), Offset: uint32(i * k), Payload: big[i*k : end]}}})
	}
	return out
}

// listenBigBody is the body of the fragmented message in listenScript.
var listenBigBody = strings.Repeat("frag", 750)

// runListen runs `herald listen ARGS` in ns until it exits by itself (--count), sends the script
// once it has joined, and returns its exit code, stdout and stderr.
func runListenNS(t *testing.T, ns, group string, args ...string) (int, string, string) {
	t.Helper()
	return runListenNSScript(t, ns, group, listenScript(t), args...)
}

// runListenNSScript is runListenNS with the datagrams to send.
func runListenNSScript(t *testing.T, ns, group string, script [][]byte, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		code := -1
		err := inNS(ns, func() {
			argv := append([]string{"herald", "listen", "--group", group, "--interface", "lo", "--session-timeout", "100ms"}, args...)
			err := newApp(strings.NewReader(""), &stdout, &stderr).RunContext(ctx, argv)
			code = exitOK
			if err != nil {
				fmt.Fprintf(&stderr, "herald: %v\n", err)
				code = exitOther
				if ee, ok := err.(*exitError); ok {
					code = ee.code
				}
			}
		})
		if err != nil {
			fmt.Fprintf(&stderr, "namespace: %v\n", err)
		}
		done <- code
	}()
	// Joined when the group shows among lo's memberships; then send.
	g := netip.MustParseAddrPort(group)
	for deadline := time.Now().Add(5 * time.Second); ; {
		out, _ := exec.Command("ip", "-n", ns, "maddr", "show", "dev", "lo").Output()
		if strings.Contains(string(out), " "+g.Addr().String()) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("herald listen did not join %s: %s", group, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var sc *net.UDPConn
	if err := inNS(ns, func() {
		var err error
		if sc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			return
		}
		lo, _ := net.InterfaceByName("lo")
		p := ipv4.NewPacketConn(sc)
		p.SetMulticastInterface(lo)
		p.SetMulticastLoopback(true)
	}); err != nil || sc == nil {
		t.Fatalf("sender socket: %v", err)
	}
	defer sc.Close()
	var session uint64
	for _, d := range script {
		h, _ := multicast.DecodeHeader(d)
		if session != 0 && h.Session != session {
			// The sender restarts: without a key, receivers follow the new session once the
			// old one has been silent for --session-timeout (the tests pass 100ms).
			time.Sleep(300 * time.Millisecond)
		}
		session = h.Session
		if _, err := sc.WriteToUDPAddrPort(d, g); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // not synchronisation: the sender's pace
	}
	select {
	case code := <-done:
		return code, stdout.String(), stderr.String()
	case <-time.After(8 * time.Second):
		cancel()
		code := <-done
		t.Errorf("herald listen %s did not exit by itself (--count); stopped it", strings.Join(args, " "))
		return code, stdout.String(), stderr.String()
	}
}

func TestListen_Output(t *testing.T) {
	ns := listenNS(t)
	s1, s2 := fmt.Sprintf("%016x", uint64(listenSession1)), fmt.Sprintf("%016x", uint64(listenSession2))
	for i, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"text", []string{"--count", "8"}, "" +
			"#SESSION\t0000000000000000\t" + s1 + "\n" +
			"px.eu\t1.0842\n" +
			"px.us\t2.5\n" +
			"px.eu\tbin\xff\n" +
			"ops.alerts\tdisk full\n" +
			"#GAP\tpx.eu\t3-4\tgone\n" +
			"px.eu\t1.0850\n" +
			"px.us\t2.6\n" +
			"#SESSION\t" + s1 + "\t" + s2 + "\n" +
			"px.eu\tafter restart\n" +
			"px.eu\t" + listenBigBody + "\n"},
		{"json", []string{"--json", "--count", "8"}, "" +
			`{"session":{"old":"0000000000000000","new":"` + s1 + `"}}` + "\n" +
			`{"topic":"px.eu","stream":1,"seq":1,"headers":{"k":"v"},"body":"1.0842"}` + "\n" +
			`{"topic":"px.us","stream":2,"seq":1,"headers":{},"body":"2.5"}` + "\n" +
			`{"topic":"px.eu","stream":1,"seq":2,"headers":{},"body":"bin\ufffd","body_base64":"Ymlu/w=="}` + "\n" +
			`{"topic":"ops.alerts","stream":3,"seq":1,"headers":{},"body":"disk full\n"}` + "\n" +
			`{"gap":{"topic":"px.eu","stream":1,"from":3,"to":4,"reason":"gone"}}` + "\n" +
			`{"topic":"px.eu","stream":1,"seq":5,"headers":{},"body":"1.0850"}` + "\n" +
			`{"topic":"px.us","stream":2,"seq":2,"headers":{},"body":"2.6"}` + "\n" +
			`{"session":{"old":"` + s1 + `","new":"` + s2 + `"}}` + "\n" +
			`{"topic":"px.eu","stream":1,"seq":1,"headers":{},"body":"after restart"}` + "\n" +
			`{"topic":"px.eu","stream":1,"seq":2,"headers":{},"body":"` + listenBigBody + `"}` + "\n"},
		// --count counts messages only: the session line and the gap do not count.
		{"count", []string{"--count", "2"}, "" +
			"#SESSION\t0000000000000000\t" + s1 + "\n" +
			"px.eu\t1.0842\n" +
			"px.us\t2.5\n"},
		// --topic: ops.alerts is filtered out; px.eu's gap is still reported.
		{"topic", []string{"--topic", "px.*", "--count", "5"}, "" +
			"#SESSION\t0000000000000000\t" + s1 + "\n" +
			"px.eu\t1.0842\n" +
			"px.us\t2.5\n" +
			"px.eu\tbin\xff\n" +
			"#GAP\tpx.eu\t3-4\tgone\n" +
			"px.eu\t1.0850\n" +
			"px.us\t2.6\n"},
		{"topic-repeated", []string{"--topic", "ops.>", "--topic", "px.us", "--count", "2"}, "" +
			"#SESSION\t0000000000000000\t" + s1 + "\n" +
			"px.us\t2.5\n" +
			"ops.alerts\tdisk full\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := fmt.Sprintf("239.255.79.%d:79%02d", i+1, i+1)
			code, stdout, stderr := runListenNS(t, ns, group, append(tc.args, "--stats")...)
			if code != exitOK {
				t.Errorf("exit %d, want 0; stderr: %s", code, stderr)
			}
			if isJSON := slices.Contains(tc.args, "--json"); perStream(stdout, isJSON) != perStream(tc.want, isJSON) {
				t.Errorf("stdout:\ngot:\n%s\nwant (in this order per topic, between session lines):\n%s", stdout, tc.want)
			}
			if isJSON := slices.Contains(tc.args, "--json"); isJSON {
				// --json: the counters are one JSON object too.
				var st map[string]uint64
				if err := json.Unmarshal([]byte(stderr), &st); err != nil || st["datagrams"] == 0 {
					t.Fatalf("--stats --json: stderr %q, want one JSON object of counters (%v)", stderr, err)
				}
				if st["naks"] != 0 {
					t.Errorf("--stats --json: naks %d, want 0", st["naks"])
				}
				if strings.Contains(tc.want, listenBigBody) && (st["reassembled"] != 1 || st["forged_fragments"] != 0) {
					t.Errorf("--stats --json: %q, want reassembled 1 forged_fragments 0", stderr)
				}
				return
			}
			if !strings.HasPrefix(stderr, "datagrams ") || !strings.Contains(stderr, " naks 0 ") {
				t.Errorf("--stats: stderr %q, want one counters line with naks 0", stderr)
			}
			if strings.Contains(tc.want, listenBigBody) && !strings.Contains(stderr, " reassembled 1 forged-fragments 0") {
				t.Errorf("--stats: stderr %q, want reassembled 1 forged-fragments 0", stderr)
			}
		})
	}
}

// TestListen_Timestamps: --json --timestamps adds time_ns to every message, the time it was
// printed (without --json: TestListen_UsageErrors).
func TestListen_Timestamps(t *testing.T) {
	ns := listenNS(t)
	before := time.Now().UnixNano()
	code, stdout, stderr := runListenNS(t, ns, "239.255.79.31:7931", "--json", "--timestamps", "--count", "8")
	after := time.Now().UnixNano()
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr: %s", code, stderr)
	}
	msgs := 0
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var m struct {
			Topic  string `json:"topic"`
			TimeNs int64  `json:"time_ns"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if m.Topic == "" {
			if strings.Contains(line, "time_ns") {
				t.Errorf("line %q: time_ns on an event that is not a message", line)
			}
			continue
		}
		msgs++
		if m.TimeNs < before || m.TimeNs > after {
			t.Errorf("line %q: time_ns %d not within the run (%d to %d)", line, m.TimeNs, before, after)
		}
	}
	if msgs != 8 {
		t.Errorf("%d messages, want 8:\n%s", msgs, stdout)
	}
}

// perStream canonicalizes listen output: the protocol orders events per stream, not across
// streams, so lines are grouped by topic (in order) between session lines, which are barriers.
func perStream(out string, isJSON bool) string {
	var b strings.Builder
	seg := map[string][]string{}
	flush := func() {
		topics := make([]string, 0, len(seg))
		for k := range seg {
			topics = append(topics, k)
		}
		sort.Strings(topics)
		for _, k := range topics {
			fmt.Fprintf(&b, "[%s]\n%s\n", k, strings.Join(seg[k], "\n"))
		}
		clear(seg)
	}
	for _, line := range strings.SplitAfter(out, "\n") {
		if line == "" {
			continue
		}
		var topic string
		switch {
		case isJSON && strings.HasPrefix(line, `{"session"`), !isJSON && strings.HasPrefix(line, "#SESSION\t"):
			flush()
			b.WriteString(line)
			continue
		case isJSON:
			var e struct {
				Topic string
				Gap   struct{ Topic string }
			}
			json.Unmarshal([]byte(line), &e)
			topic = e.Topic + e.Gap.Topic
		case strings.HasPrefix(line, "#GAP\t"):
			topic = strings.Split(line, "\t")[1]
		default:
			topic, _, _ = strings.Cut(line, "\t")
		}
		seg[topic] = append(seg[topic], line)
	}
	flush()
	return b.String()
}

// TestListen_Sealed: the script's first session sealed with a channel key (seal = true), no
// plaintext on the wire: herald listen --seal --key-file --key-id prints the messages as usual.
func TestListen_Sealed(t *testing.T) {
	ns := listenNS(t)
	key := []byte("sealed channel key, 32 bytes....")
	kf := filepath.Join(t.TempDir(), "mcast.key")
	if err := os.WriteFile(kf, append(key, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	sl := multicast.NewSealer(multicast.Key{ID: 4, Secret: key})
	var script [][]byte
	for _, d := range listenScript(t)[:5] { // session 1: catalog, 3 DATA, heartbeat
		script = append(script, sl.Seal(d))
	}
	for _, d := range script {
		if bytes.Contains(d, []byte("px.eu")) || bytes.Contains(d, []byte("disk full")) {
			t.Fatalf("plaintext in a sealed datagram: %q", d)
		}
	}
	code, stdout, stderr := runListenNSScript(t, ns, "239.255.79.21:7921", script, "--seal", "--key-file", kf, "--key-id", "4", "--count", "6", "--stats")
	want := "#SESSION\t0000000000000000\t" + fmt.Sprintf("%016x", uint64(listenSession1)) + "\n" +
		"px.eu\t1.0842\npx.us\t2.5\npx.eu\tbin\xff\nops.alerts\tdisk full\n#GAP\tpx.eu\t3-4\tgone\npx.eu\t1.0850\npx.us\t2.6\n"
	if code != exitOK || perStream(stdout, false) != perStream(want, false) {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s\nstderr: %s", code, stdout, want, stderr)
	}
	if !strings.Contains(stderr, "auth-failures 0 ") || !strings.Contains(stderr, " sealed 0") {
		t.Errorf("--stats: %q, want no auth failure", stderr)
	}
}

// listenMaxProcs is what herald listen last asked of runtime.GOMAXPROCS in this process (TestMain
// replaces setMaxProcs), -1 for nothing.
var listenMaxProcs atomic.Int64

// TestListen_OneThread: a listener asks for one thread, and leaves the choice alone when the
// environment sets GOMAXPROCS.
func TestListen_OneThread(t *testing.T) {
	ns := listenNS(t)
	for _, env := range []string{"", "2"} {
		t.Setenv("GOMAXPROCS", env)
		listenMaxProcs.Store(-1)
		if code, _, stderr := runListenNS(t, ns, "239.255.79.32:7932", "--count", "8"); code != exitOK {
			t.Fatalf("exit %d, want 0; stderr: %s", code, stderr)
		}
		want := int64(1)
		if env != "" {
			want = -1
		}
		if got := listenMaxProcs.Load(); got != want {
			t.Errorf("GOMAXPROCS=%q: herald listen asked for %d threads, want %d (-1: not asked)", env, got, want)
		}
	}
}

// TestListenProcs: herald listen runs Go code on one thread unless GOMAXPROCS is set or --serve
// has web clients to serve.
func TestListenProcs(t *testing.T) {
	for _, c := range []struct {
		env   string
		serve bool
		want  int
	}{{"", false, 1}, {"4", false, 0}, {"", true, 0}, {"2", true, 0}} {
		if got := listenProcs(c.env, c.serve); got != c.want {
			t.Errorf("listenProcs(%q, %v) = %d, want %d", c.env, c.serve, got, c.want)
		}
	}
}
