//go:build linux

package mcdoctor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/herald-mq/herald/internal/testenv"
)

// Every test builds its own network namespaces (internal/testenv.Net: 198.18.SUBNET.0/24 on a
// bridge in a namespace of its own), makes one fault on purpose and runs the checks inside a host
// namespace. The namespaces are deleted by t.Cleanup, also when the test fails.

const nsPrefix = "hdoc-"

var group = netip.MustParseAddrPort("239.255.91.1:7491")

// healthy makes host h of n pass every check: a multicast route on eth0, loose rp_filter, an
// rmem_max of 16 MiB in its namespace (when the kernel has one per namespace).
func healthy(t *testing.T, n *testenv.Net, h string) {
	t.Helper()
	testenv.RequireTools(t, "sysctl", "stat")
	ns := n.NS[h]
	testenv.Sh(t, "ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
	setSysctl(t, ns, "net.ipv4.conf.all.rp_filter", "2")
	setSysctl(t, ns, "net.ipv4.conf.eth0.rp_filter", "2")
	if rmemPerNetns(t, ns) {
		setSysctl(t, ns, "net.core.rmem_max", "16777216")
	}
}

// setSysctl sets a sysctl inside namespace ns (never on the host: the callers only pass
// per-namespace keys, and rmem_max only after rmemPerNetns).
func setSysctl(t *testing.T, ns, key, value string) {
	t.Helper()
	testenv.Sh(t, "ip", "netns", "exec", ns, "sysctl", "-w", key+"="+value)
}

// rmemPerNetns reports whether net.core.rmem_max belongs to the namespace. Kernels that share
// it with the host show it read-only (0444) in other namespaces, or not at all.
func rmemPerNetns(t *testing.T, ns string) bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "stat", "-c", "%a", "/proc/sys/net/core/rmem_max").Output()
	return err == nil && strings.TrimSpace(string(out)) == "644"
}

// hostRmemMax is the host's net.core.rmem_max, read only.
func hostRmemMax(t *testing.T) int {
	t.Helper()
	v, err := readSysctl("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Fatal(err)
	}
	return int(v)
}

// healthyBuf is the receive buffer a healthy channel asks for: the default when the namespace
// has its own rmem_max (set to 16 MiB by healthy), else what the shared one allows, which a test
// must not raise.
func healthyBuf(t *testing.T, n *testenv.Net, h string) int {
	if rmemPerNetns(t, n.NS[h]) {
		return 0
	}
	return hostRmemMax(t)
}

func runIn(t *testing.T, n *testenv.Net, h string, ch Channel, o Options) map[string]Result {
	t.Helper()
	var rs []Result
	if err := n.In(h, func() error { rs = Run(context.Background(), ch, o); return nil }); err != nil {
		t.Fatal(err)
	}
	out := map[string]Result{}
	for _, r := range rs {
		t.Logf("%-4s %-9s %s | %s", r.Status, r.Check, r.Detail, r.Fix)
		out[r.Check] = r
	}
	if len(out) != 9 {
		t.Fatalf("got %d checks, want 9: %v", len(out), rs)
	}
	return out
}

// expect fails unless check has status and its detail contains every part.
func expect(t *testing.T, rs map[string]Result, check string, status Status, parts ...string) {
	t.Helper()
	r := rs[check]
	if r.Status != status {
		t.Errorf("%s: status %s (%s), want %s", check, r.Status, r.Detail, status)
	}
	for _, p := range parts {
		if !strings.Contains(r.Detail, p) {
			t.Errorf("%s: detail %q does not say %q", check, r.Detail, p)
		}
	}
	if (status == Fail || status == Warn) && r.Fix == "" {
		t.Errorf("%s: %s without a fix", check, status)
	}
}

// join makes host h of n join the group on eth0 (as herald listen does) and returns the socket.
func join(t *testing.T, n *testenv.Net, h string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := n.In(h, func() error {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: group.Addr().AsSlice(), Port: int(group.Port())})
		if err != nil {
			return err
		}
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		return ipv4.NewPacketConn(c).JoinGroup(ifi, &net.UDPAddr{IP: group.Addr().AsSlice()})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestHealthy(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 91, "a", "b")
	healthy(t, n, "a")
	healthy(t, n, "b")
	// A querier on the segment: the bridge, querying every second.
	testenv.Sh(t, "ip", "-n", n.Bridge, "link", "set", "br0", "type", "bridge", "mcast_snooping", "1", "mcast_querier", "1",
		"mcast_query_interval", "100", "mcast_startup_query_interval", "100", "mcast_igmp_version", "3")
	join(t, n, "a")          // a receiver runs on the host checked
	other := join(t, n, "b") // and one on another host: the loopback datagram must not reach it
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0", RcvBuf: healthyBuf(t, n, "a")}, Options{QuerierWait: 5 * time.Second})
	for _, r := range rs {
		if r.Status != OK {
			t.Errorf("%s: %s: %s", r.Check, r.Status, r.Detail)
		}
	}
	expect(t, rs, CheckInterface, OK, "eth0 is up", n.Addr["a"].String())
	expect(t, rs, CheckRoute, OK, "via eth0", "224.0.0.0/4")
	expect(t, rs, CheckIGMP, OK, "joined on eth0 by 1 socket")
	expect(t, rs, CheckQuerier, OK, "query heard on eth0")
	expect(t, rs, CheckLoopback, OK, "received it")
	other.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 1500)
	if k, src, err := other.ReadFrom(buf); err == nil {
		t.Errorf("host b received %q from %v: the loopback datagram left the host", buf[:k], src)
	}
	if Failed(rsSlice(rs)) != nil {
		t.Errorf("Failed = %v, want none", Failed(rsSlice(rs)))
	}
}

func rsSlice(m map[string]Result) []Result {
	var out []Result
	for _, r := range m {
		out = append(out, r)
	}
	return out
}

func TestInterfaceDown(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 92, "a")
	healthy(t, n, "a")
	testenv.Sh(t, "ip", "-n", n.NS["a"], "link", "set", "eth0", "down")
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckInterface, Fail, "interface eth0 is down")
	if !strings.Contains(rs[CheckInterface].Fix, "ip link set dev eth0 up") {
		t.Errorf("fix %q does not say how to bring it up", rs[CheckInterface].Fix)
	}
	expect(t, rs, CheckLoopback, Fail, "network is unreachable")
	expect(t, rs, CheckIGMP, Info, "eth0 is down")
	if got := Failed(rsSlice(rs)); len(got) == 0 {
		t.Error("Failed is empty")
	}
}

func TestNoMulticastFlag(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 93, "a")
	healthy(t, n, "a")
	testenv.Sh(t, "ip", "-n", n.NS["a"], "link", "set", "dev", "eth0", "multicast", "off")
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	// A warning, not a failure: Linux still sends and joins on the interface when a socket
	// names it, as the loopback check shows.
	expect(t, rs, CheckInterface, Warn, "no MULTICAST flag", "programs that choose interfaces by this flag skip it")
	if !strings.Contains(rs[CheckInterface].Fix, "ip link set dev eth0 multicast on") {
		t.Errorf("fix %q", rs[CheckInterface].Fix)
	}
	expect(t, rs, CheckLoopback, OK)
}

func TestNoRoute(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 94, "a")
	healthy(t, n, "a")
	testenv.Sh(t, "ip", "-n", n.NS["a"], "route", "del", "224.0.0.0/4", "dev", "eth0")
	// Without an interface, nothing tells Herald where to send: a failure.
	rs := runIn(t, n, "a", Channel{Group: group}, Options{})
	expect(t, rs, CheckRoute, Fail, "no route to 239.255.91.1")
	expect(t, rs, CheckInterface, Fail, "no interface configured and no route")
	// With the interface named, Herald still works (sockets name it): a warning, and the
	// loopback check proves it works.
	rs = runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckRoute, Warn, "no route to 239.255.91.1", "names interface eth0")
	expect(t, rs, CheckLoopback, OK)
}

func TestRmemMaxBelowBuffer(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 95, "a")
	healthy(t, n, "a")
	ns := n.NS["a"]
	limit := hostRmemMax(t)
	if rmemPerNetns(t, ns) {
		limit = 212992
		setSysctl(t, ns, "net.core.rmem_max", "212992")
	}
	// A channel asking for more than the limit (the default, 16 MiB, on most hosts).
	want := max(limit*2, 16<<20)
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0", RcvBuf: want}, Options{})
	expect(t, rs, CheckRmemMax, Warn, fmt.Sprintf("net.core.rmem_max is %d bytes, below the %d bytes", limit, want))
	if !strings.Contains(rs[CheckRmemMax].Fix, fmt.Sprintf("sysctl -w net.core.rmem_max=%d", want)) {
		t.Errorf("fix %q", rs[CheckRmemMax].Fix)
	}
	// A channel asking for the limit is fine.
	rs = runIn(t, n, "a", Channel{Group: group, Interface: "eth0", RcvBuf: limit}, Options{})
	expect(t, rs, CheckRmemMax, OK)
}

// TestRPFilterStrictOffSubnet sends from an address of another subnet to a host with strict
// rp_filter: the datagram really is dropped, and the doctor says so; in loose mode it arrives
// and the doctor agrees.
func TestRPFilterStrictOffSubnet(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 96, "a", "b")
	healthy(t, n, "a")
	healthy(t, n, "b")
	off := netip.MustParseAddr("198.18.97.1")
	testenv.Sh(t, "ip", "-n", n.NS["a"], "addr", "add", off.String()+"/24", "dev", "eth0")
	setSysctl(t, n.NS["b"], "net.ipv4.conf.all.rp_filter", "1")
	setSysctl(t, n.NS["b"], "net.ipv4.conf.eth0.rp_filter", "1")
	recv := join(t, n, "b")
	var send *net.UDPConn
	if err := n.In("a", func() error {
		var err error
		send, err = net.ListenUDP("udp4", &net.UDPAddr{IP: off.AsSlice()})
		if err != nil {
			return err
		}
		ifi, _ := net.InterfaceByName("eth0")
		return ipv4.NewPacketConn(send).SetMulticastInterface(ifi)
	}); err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	arrives := func() bool {
		if _, err := send.WriteTo([]byte("probe"), net.UDPAddrFromAddrPort(group)); err != nil {
			t.Fatal(err)
		}
		recv.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		buf := make([]byte, 100)
		_, _, err := recv.ReadFrom(buf)
		return err == nil
	}
	if arrives() {
		t.Fatal("with rp_filter=1 a datagram from another subnet arrived: the fault is not made")
	}
	rs := runIn(t, n, "b", Channel{Group: group, Interface: "eth0", Sender: off}, Options{})
	expect(t, rs, CheckRPFilter, Fail, "rp_filter on eth0 is 1 (strict", "from sender 198.18.97.1", "no route back")
	if !strings.Contains(rs[CheckRPFilter].Fix, "net.ipv4.conf.eth0.rp_filter=2") {
		t.Errorf("fix %q", rs[CheckRPFilter].Fix)
	}
	// Without the sender's address: a warning naming the subnets that pass.
	rs = runIn(t, n, "b", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckRPFilter, Warn, "outside 198.18.96.0/24")
	// The sender on the subnet passes.
	rs = runIn(t, n, "b", Channel{Group: group, Interface: "eth0", Sender: n.Addr["a"]}, Options{})
	expect(t, rs, CheckRPFilter, OK)
	// The fix works.
	setSysctl(t, n.NS["b"], "net.ipv4.conf.eth0.rp_filter", "2")
	setSysctl(t, n.NS["b"], "net.ipv4.conf.all.rp_filter", "2")
	if !arrives() {
		t.Fatal("with rp_filter=2 the datagram from another subnet still does not arrive")
	}
	rs = runIn(t, n, "b", Channel{Group: group, Interface: "eth0", Sender: off}, Options{})
	expect(t, rs, CheckRPFilter, OK, "loose")
}

// TestFirewallDrop: an nftables rule inside the namespace drops the channel's port; the firewall
// check names the rule and the loopback check fails because of it.
func TestFirewallDrop(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 98, "a")
	healthy(t, n, "a")
	ns := n.NS["a"]
	nft := func(args ...string) { testenv.Sh(t, append([]string{"ip", "netns", "exec", ns, "nft"}, args...)...) }
	nft("add", "table", "inet", "hdoc")
	nft("add", "chain", "inet", "hdoc", "input", "{ type filter hook input priority 0 ; }")
	// A rule for another port changes nothing.
	nft("add", "rule", "inet", "hdoc", "input", "udp", "dport", "9999", "drop")
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckFirewall, OK)
	expect(t, rs, CheckLoopback, OK)
	// Random loss: a warning.
	nft("add", "rule", "inet", "hdoc", "input", "udp", "dport", "7491", "numgen", "random", "mod", "10", "0", "drop")
	rs = runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckFirewall, Warn, "drops some datagrams to udp port 7491", "table inet hdoc chain input")
	// Every datagram of the port.
	nft("add", "rule", "inet", "hdoc", "input", "udp", "dport", "{ 7000-7500 }", "drop")
	rs = runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckFirewall, Fail, "nftables drops udp port 7491", "table inet hdoc chain input rule handle")
	if !strings.Contains(rs[CheckFirewall].Fix, "nft delete rule inet hdoc input handle") {
		t.Errorf("fix %q", rs[CheckFirewall].Fix)
	}
	expect(t, rs, CheckLoopback, Fail, "did not come back")
	if got := fmt.Sprint(Failed(rsSlice(rs))); !strings.Contains(got, "firewall") || !strings.Contains(got, "loopback") {
		t.Errorf("Failed = %s, want firewall and loopback", got)
	}
}

func TestFirewallPolicyDrop(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 99, "a")
	healthy(t, n, "a")
	ns := n.NS["a"]
	nft := func(args ...string) { testenv.Sh(t, append([]string{"ip", "netns", "exec", ns, "nft"}, args...)...) }
	nft("add", "table", "ip", "hdoc")
	nft("add", "chain", "ip", "hdoc", "input", "{ type filter hook input priority 0 ; policy drop ; }")
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckFirewall, Fail, "policy drop and no rule accepting udp dport 7491")
	expect(t, rs, CheckLoopback, Fail)
	nft("add", "rule", "ip", "hdoc", "input", "udp", "dport", "7491", "accept")
	rs = runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckFirewall, OK)
	expect(t, rs, CheckLoopback, OK)
}

func TestTTLWithGateway(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 100, "a")
	healthy(t, n, "a")
	ns := n.NS["a"]
	testenv.Sh(t, "ip", "-n", ns, "route", "del", "224.0.0.0/4", "dev", "eth0")
	testenv.Sh(t, "ip", "-n", ns, "route", "add", "default", "via", "198.18.100.254")
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckTTL, Warn, "ttl 1", "via gateway 198.18.100.254")
	expect(t, rs, CheckRoute, OK, "route default")
	rs = runIn(t, n, "a", Channel{Group: group, Interface: "eth0", TTL: 4}, Options{})
	expect(t, rs, CheckTTL, OK, "ttl 4")
}

// TestNoQuerier: nothing queries on the segment; listening for a query says so.
func TestNoQuerier(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 101, "a")
	healthy(t, n, "a")
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{QuerierWait: 1500 * time.Millisecond})
	expect(t, rs, CheckQuerier, Warn, "no IGMP query heard on eth0")
	rs = runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckQuerier, Info, "cannot tell")
	expect(t, rs, CheckIGMP, Info, "nothing on this host has joined")
}

// TestNoCarrier: the switch side of the link (the bridge's end of the veth pair) goes down.
func TestNoCarrier(t *testing.T) {
	n := testenv.NewNet(t, nsPrefix, 103, "a")
	healthy(t, n, "a")
	testenv.Sh(t, "ip", "-n", n.Bridge, "link", "set", "v0", "down")
	rs := runIn(t, n, "a", Channel{Group: group, Interface: "eth0"}, Options{})
	expect(t, rs, CheckInterface, Fail, "interface eth0 is up but has no carrier")
}
