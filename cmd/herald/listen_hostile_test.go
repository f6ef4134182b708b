package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/herald-mq/herald/multicast"
)

func TestListen_KeyFileBytes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ file, want string }{
		{"secret\n", "secret"}, {"secret\r\n", "secret"}, {"secret\n\n\r\n", "secret"},
		{"secret \n", "secret "}, {"\tsecret", "\tsecret"}, {"se\ncret\n", "se\ncret"},
	} {
		f := filepath.Join(dir, "k")
		os.WriteFile(f, []byte(tc.file), 0o600)
		if got, err := readKeyFile("--key-file", f); err != nil || string(got) != tc.want {
			t.Errorf("key file %q: got %q, %v; want %q", tc.file, got, err, tc.want)
		}
	}
	f := filepath.Join(dir, "empty")
	os.WriteFile(f, []byte("\r\n"), 0o600)
	if _, err := readKeyFile("--key-file", f); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("key file of line ends only: got %v, want an error saying it is empty", err)
	}
}

// groupSocket returns a UDP socket in ns that multicasts on lo.
func groupSocket(t *testing.T, ns string) *net.UDPConn {
	t.Helper()
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
	t.Cleanup(func() { sc.Close() })
	return sc
}

// startListen starts the herald binary's listen in ns and waits until it has joined group.
func startListen(t *testing.T, ns, group string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, buildHerald(t), "listen", "--group", group, "--interface", "lo"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	g := netip.MustParseAddrPort(group)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out, _ := exec.Command("ip", "-n", ns, "maddr", "show", "dev", "lo").Output()
		if strings.Contains(string(out), " "+g.Addr().String()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("herald listen did not join %s: %s", group, stderr.String())
		}
	}
	return cmd, &stdout, &stderr
}

// peakRSS is the process's peak resident set (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// listenPID is the pid of herald under `ip netns exec` (which execs it: the same process).
func stopWithin(t *testing.T, cmd *exec.Cmd, d time.Duration) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("herald listen after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(d):
		t.Errorf("herald listen still running %v after SIGTERM", d)
	}
}

// Issue 11, found 6: a host without the key floods a keyless `herald listen` with forged
// HEARTBEATs 2^40 ahead, DATA far ahead, new sessions and giant catalogs, some from the real
// sender's own socket. The real messages all print, no forged one does, memory stays bounded and
// SIGTERM ends the process at once.
func TestListen_HostileFloodNoKey(t *testing.T) {
	ns := listenNS(t)
	const group = "239.255.81.1:7981"
	cmd, stdout, stderr := startListen(t, ns, group, "--stats")
	g := netip.MustParseAddrPort(group)
	real, forger := groupSocket(t, ns), groupSocket(t, ns)
	const sess = 0x65670e2a00000001
	enc := func(p *multicast.Packet) []byte {
		b, err := multicast.AppendPacket(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	msg := func(body string) []byte { b, _ := multicast.AppendMessage(nil, nil, []byte(body)); return b }
	hdr := func(typ multicast.Type, session, seq, trailing uint64) multicast.PacketHeader {
		return multicast.PacketHeader{Type: typ, Session: session, Seq: seq, Trailing: trailing}
	}
	seq := uint64(1)
	send := func(c *net.UDPConn, b []byte) {
		if _, err := c.WriteToUDPAddrPort(b, g); err != nil {
			t.Fatal(err)
		}
	}
	send(real, enc(&multicast.Packet{PacketHeader: hdr(multicast.TypeCatalog, sess, seq, 1),
		Catalog: []multicast.CatalogEntry{{Stream: 1, First: 1, Topic: "px"}}}))
	big := strings.Repeat("x", 60000)
	forged := 0
	start := time.Now()
	for n := uint64(1); time.Since(start) < 2*time.Second; n++ {
		seq++
		send(real, enc(&multicast.Packet{PacketHeader: hdr(multicast.TypeData, sess, seq, 1),
			Records: []multicast.Record{{Stream: 1, Seq: n, Payload: msg(fmt.Sprint("real ", n))}}}))
		for k := uint64(0); k < 20; k++ {
			var p multicast.Packet
			switch k % 5 {
			case 0:
				p = multicast.Packet{PacketHeader: hdr(multicast.TypeHeartbeat, sess, 1<<40+k, 1<<40), Leading: 1<<40 + k,
					Streams: []multicast.StreamSeq{{Stream: 1, Seq: 1 << 40}}}
			case 1:
				p = multicast.Packet{PacketHeader: hdr(multicast.TypeData, sess, seq+1<<20, seq+1<<20),
					Records: []multicast.Record{{Stream: 1, Seq: n + 1<<20, Payload: msg("forged")}}}
			case 2:
				p = multicast.Packet{PacketHeader: hdr(multicast.TypeData, sess+n<<32, 1, 1),
					Records: []multicast.Record{{Stream: 1, Seq: 1, Payload: msg("forged")}}}
			case 3:
				p = multicast.Packet{PacketHeader: hdr(multicast.TypeCatalog, sess+k<<32, 2, 1),
					Catalog: []multicast.CatalogEntry{{Stream: uint32(n<<5 + k), First: 1, Topic: big}}}
			case 4: // from the real sender's socket: the same session and source, far ahead
				p = multicast.Packet{PacketHeader: hdr(multicast.TypeHeartbeat, sess, seq+1<<30, seq+1<<30-1), Leading: seq + 1<<30}
				send(real, enc(&p))
				forged++
				continue
			}
			send(forger, enc(&p))
			forged++
		}
		time.Sleep(time.Millisecond) // not synchronisation: the sender's pace
	}
	time.Sleep(200 * time.Millisecond) // not synchronisation: let the last datagrams be read
	rss := peakRSS(t, cmd.Process.Pid)
	stopWithin(t, cmd, 2*time.Second)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	t.Logf("%d real and %d forged datagrams in 2 s; herald listen peak RSS %d MB; %s", seq-1, forged, rss>>20, stderr.String())
	if strings.Contains(stdout.String(), "forged") {
		t.Errorf("forged messages printed")
	}
	want := []string{fmt.Sprintf("#SESSION\t0000000000000000\t%016x", uint64(sess))}
	for n := uint64(1); n < seq; n++ {
		want = append(want, fmt.Sprint("px\treal ", n))
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %d lines (first %q, last %q), want %d: the session line and every real message in order", len(lines), lines[0], lines[len(lines)-1], len(want))
	}
	if rss > 256<<20 {
		t.Errorf("peak RSS %d MB, want under 256 MB", rss>>20)
	}
	for _, w := range []string{"ahead of the receive window", "another session", "from another address"} {
		if c := strings.Count(stderr.String(), w); c != 1 {
			t.Errorf("stderr has %d warnings %q in 2 s, want 1 (rate-limited)", c, w)
		}
	}
}

// With a key, forged datagrams are dropped and counted, and logged once per interval.
func TestListen_HostileFloodKey(t *testing.T) {
	ns := listenNS(t)
	const group = "239.255.81.2:7982"
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte("0123456789abcdef\n"), 0o600)
	cmd, stdout, stderr := startListen(t, ns, group, "--key-file", keyFile, "--key-id", "1", "--stats")
	g := netip.MustParseAddrPort(group)
	real, forger := groupSocket(t, ns), groupSocket(t, ns)
	good, bad := multicast.NewAuth([]byte("0123456789abcdef"), 1), multicast.NewAuth([]byte("guess"), 1)
	const sess = 0x65670e2a00000002
	enc := func(a *multicast.Auth, p *multicast.Packet) []byte {
		b, _ := multicast.AppendPacket(nil, p)
		return a.Sign(b)
	}
	msg := func(body string) []byte { b, _ := multicast.AppendMessage(nil, nil, []byte(body)); return b }
	real.WriteToUDPAddrPort(enc(good, &multicast.Packet{PacketHeader: multicast.PacketHeader{Type: multicast.TypeCatalog, Session: sess, Seq: 1, Trailing: 1},
		Catalog: []multicast.CatalogEntry{{Stream: 1, First: 1, Topic: "px"}}}), g)
	forged := 0
	for n := uint64(1); n <= 500; n++ {
		real.WriteToUDPAddrPort(enc(good, &multicast.Packet{PacketHeader: multicast.PacketHeader{Type: multicast.TypeData, Session: sess, Seq: n + 1, Trailing: 1},
			Records: []multicast.Record{{Stream: 1, Seq: n, Payload: msg(fmt.Sprint("real ", n))}}}), g)
		for k := uint64(0); k < 10; k++ {
			forger.WriteToUDPAddrPort(enc(bad, &multicast.Packet{PacketHeader: multicast.PacketHeader{Type: multicast.TypeData, Session: sess + k<<32, Seq: n + 1, Trailing: 1},
				Records: []multicast.Record{{Stream: 1, Seq: n, Payload: msg("forged")}}}), g)
			forged++
		}
		time.Sleep(time.Millisecond) // not synchronisation: the sender's pace
	}
	time.Sleep(200 * time.Millisecond) // not synchronisation: let the last datagrams be read
	stopWithin(t, cmd, 2*time.Second)
	if c := strings.Count(stdout.String(), "\treal "); c != 500 || strings.Contains(stdout.String(), "forged") {
		t.Errorf("got %d real messages (want 500) and forged ones: %v", c, strings.Contains(stdout.String(), "forged"))
	}
	if c := strings.Count(stderr.String(), "failed authentication"); c != 1 {
		t.Errorf("stderr has %d authentication warnings, want 1 (rate-limited): %s", c, stderr.String())
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("auth-failures %d ", forged)) {
		t.Errorf("--stats: want auth-failures %d in %q", forged, stderr.String())
	}
}
