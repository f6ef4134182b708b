//go:build linux

package mcdoctor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/herald-mq/herald/multicast"
)

// route is what the kernel's routing table says about one destination.
type route struct {
	known   bool   // ip answered (false: ip is missing or failed; err says why)
	err     string // why there is no route, or why it is unknown
	dev     string // the interface the kernel picks
	dst     string // the FIB entry that matched ("default", "224.0.0.0/4")
	gateway string
}

func run(ctx context.Context, ch Channel, o Options) []Result {
	if ch.TTL == 0 {
		ch.TTL = multicast.DefaultTTL
	}
	if ch.RcvBuf == 0 {
		ch.RcvBuf = multicast.DefaultRcvBuf
	}
	if o.LoopbackWait == 0 {
		o.LoopbackWait = time.Second
	}
	rt := lookupRoute(ctx, ch.Group.Addr())
	name := ch.Interface
	if name == "" {
		name = rt.dev
	}
	var rs []Result
	ifi, r := checkInterface(ch, name, rt)
	rs = append(rs, r, checkRoute(ch, rt))
	rs = append(rs, checkRmemMax(ch))
	rs = append(rs, checkRPFilter(ctx, ch, ifi))
	igmp, querier := checkIGMP(ctx, ch, ifi, o)
	rs = append(rs, igmp, querier)
	rs = append(rs, checkFirewall(ctx, ch))
	rs = append(rs, checkTTL(ch, rt, name))
	rs = append(rs, checkLoopback(ctx, ch, ifi, o))
	return rs
}

// ipJSON runs ip -j with args and decodes its output into v.
func ipJSON(ctx context.Context, v any, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"-j"}, args...)...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		msg = strings.TrimPrefix(msg, "RTNETLINK answers: ")
		if msg == "" {
			msg = err.Error()
		}
		return errors.New(msg)
	}
	return json.Unmarshal(out, v)
}

func lookupRoute(ctx context.Context, dst netip.Addr) route {
	if _, err := exec.LookPath("ip"); err != nil {
		return route{err: "ip is not installed (apt-get install iproute2)"}
	}
	var got []struct{ Dev, Dst, Gateway string }
	if err := ipJSON(ctx, &got, "route", "get", dst.String()); err != nil {
		return route{known: true, err: err.Error()}
	}
	if len(got) == 0 {
		return route{known: true, err: "no route"}
	}
	rt := route{known: true, dev: got[0].Dev}
	var fib []struct{ Dev, Dst, Gateway string }
	if err := ipJSON(ctx, &fib, "route", "get", "fibmatch", dst.String()); err == nil && len(fib) > 0 {
		rt.dst, rt.gateway = fib[0].Dst, fib[0].Gateway
	}
	return rt
}

func checkInterface(ch Channel, name string, rt route) (*net.Interface, Result) {
	r := Result{Check: CheckInterface}
	if name == "" {
		r.Status = Fail
		r.Detail = fmt.Sprintf("no interface configured and no route to %s to pick one (%s)", ch.Group.Addr(), rt.err)
		r.Fix = "set interface in the channel's [[multicast.channel]] (or --interface), or add a route: ip route add 224.0.0.0/4 dev IFACE"
		return nil, r
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		r.Status = Fail
		r.Detail = fmt.Sprintf("interface %s does not exist on this host", name)
		r.Fix = "name an existing interface (see: ip -br link) in the channel's interface setting or --interface"
		return nil, r
	}
	addr := ifaceAddr(ifi)
	switch {
	case ifi.Flags&net.FlagUp == 0:
		r.Status = Fail
		r.Detail = fmt.Sprintf("interface %s is down", name)
		r.Fix = fmt.Sprintf("bring it up: ip link set dev %s up (and make it persistent in the host's network configuration)", name)
	case ifi.Flags&net.FlagRunning == 0:
		r.Status = Fail
		r.Detail = fmt.Sprintf("interface %s is up but has no carrier (cable, switch port or peer down)", name)
		r.Fix = fmt.Sprintf("check the link: ip link show %s; ethtool %s", name, name)
	case !addr.IsValid():
		r.Status = Warn
		r.Detail = fmt.Sprintf("interface %s is up but has no IPv4 address: datagrams leave with source 0.0.0.0 and receivers cannot NAK back", name)
		r.Fix = fmt.Sprintf("give it an address: ip addr add ADDR/PREFIX dev %s", name)
	case ifi.Flags&net.FlagMulticast == 0:
		// Linux still sends and joins on such an interface when a socket names it (Herald's do,
		// and the loopback check below works), but the flag says the link cannot do multicast.
		r.Status = Warn
		r.Detail = fmt.Sprintf("interface %s has no MULTICAST flag: Herald still sends and joins there because it names the interface, but programs that choose interfaces by this flag skip it (OpenPGM, routing daemons), and the link may really not carry multicast (tunnels, some virtual interfaces)", name)
		r.Fix = fmt.Sprintf("ip link set dev %s multicast on (if the link does carry multicast), or use an interface that has it", name)
	default:
		r.Status = OK
		r.Detail = fmt.Sprintf("interface %s is up, has MULTICAST and address %s", name, addr)
	}
	return ifi, r
}

func ifaceAddr(ifi *net.Interface) netip.Addr {
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			ip, _ := netip.AddrFromSlice(n.IP.To4())
			return ip
		}
	}
	return netip.Addr{}
}

func checkRoute(ch Channel, rt route) Result {
	r := Result{Check: CheckRoute}
	g := ch.Group.Addr()
	switch {
	case !rt.known:
		r.Status = Info
		r.Detail = "cannot tell which interface the kernel picks for " + g.String() + ": " + rt.err
	case rt.err != "" && ch.Interface == "":
		r.Status = Fail
		r.Detail = fmt.Sprintf("no route to %s (%s) and no interface configured: heraldd and herald listen fall back to the first multicast interface", g, rt.err)
		r.Fix = "add a multicast route: ip route add 224.0.0.0/4 dev IFACE (persist it), or set the channel's interface"
	case rt.err != "":
		r.Status = Warn
		r.Detail = fmt.Sprintf("no route to %s (%s): Herald works because it names interface %s, but tools that do not (and a heraldd or herald listen run without --interface) cannot send or join", g, rt.err, ch.Interface)
		r.Fix = fmt.Sprintf("ip route add 224.0.0.0/4 dev %s (persist it in the host's network configuration)", ch.Interface)
	case ch.Interface != "" && rt.dev != ch.Interface:
		r.Status = Warn
		r.Detail = fmt.Sprintf("the kernel routes %s via %s (route %s), not via the configured %s: Herald sends and joins on %s, but receivers run without --interface join on %s", g, rt.dev, rt.dst, ch.Interface, ch.Interface, rt.dev)
		r.Fix = fmt.Sprintf("ip route replace 224.0.0.0/4 dev %s (or correct the channel's interface)", ch.Interface)
	default:
		r.Status = OK
		r.Detail = fmt.Sprintf("%s is routed via %s (route %s)", g, rt.dev, rt.dst)
		if rt.dst == "default" {
			r.Detail += "; it follows the default route: a route 224.0.0.0/4 dev " + rt.dev + " keeps it there if the default route moves"
		}
	}
	return r
}

func readSysctl(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func checkRmemMax(ch Channel) Result {
	r := Result{Check: CheckRmemMax}
	v, err := readSysctl("/proc/sys/net/core/rmem_max")
	if err != nil {
		r.Status = Info
		r.Detail = "cannot read net.core.rmem_max: " + err.Error()
		return r
	}
	if v < int64(ch.RcvBuf) {
		r.Status = Warn
		r.Detail = fmt.Sprintf("net.core.rmem_max is %d bytes, below the %d bytes of receive buffer herald listen asks for: a receiver not running as root gets %d and drops datagrams in bursts (kernel-drops in herald listen --stats)", v, ch.RcvBuf, v)
		r.Fix = fmt.Sprintf("sysctl -w net.core.rmem_max=%d; persist it: echo net.core.rmem_max=%d > /etc/sysctl.d/60-herald.conf", ch.RcvBuf, ch.RcvBuf)
		return r
	}
	r.Status = OK
	r.Detail = fmt.Sprintf("net.core.rmem_max is %d bytes, enough for the %d bytes herald listen asks for", v, ch.RcvBuf)
	return r
}

func checkRPFilter(ctx context.Context, ch Channel, ifi *net.Interface) Result {
	r := Result{Check: CheckRPFilter}
	if ifi == nil {
		r.Status = Info
		r.Detail = "not checked: no interface"
		return r
	}
	all, err1 := readSysctl("/proc/sys/net/ipv4/conf/all/rp_filter")
	dev, err2 := readSysctl("/proc/sys/net/ipv4/conf/" + ifi.Name + "/rp_filter")
	if err := errors.Join(err1, err2); err != nil {
		r.Status = Info
		r.Detail = "cannot read rp_filter: " + err.Error()
		return r
	}
	eff := max(all, dev) // the kernel uses the larger of the two
	fix := fmt.Sprintf("use loose mode: sysctl -w net.ipv4.conf.%s.rp_filter=2 (persist it in /etc/sysctl.d/)", ifi.Name)
	if eff != 1 {
		r.Status = OK
		r.Detail = fmt.Sprintf("rp_filter on %s is %d (%s): multicast from any sender is accepted", ifi.Name, eff, map[int64]string{0: "off", 2: "loose"}[eff])
		return r
	}
	strict := fmt.Sprintf("rp_filter on %s is 1 (strict; all=%d, %s=%d)", ifi.Name, all, ifi.Name, dev)
	if ch.Sender.IsValid() {
		back := lookupRoute(ctx, ch.Sender)
		switch {
		case !back.known:
			r.Status = Info
			r.Detail = strict + "; cannot tell the route back to sender " + ch.Sender.String() + ": " + back.err
		case back.err != "" || back.dev != ifi.Name:
			via := "there is no route back to it (" + back.err + ")"
			if back.err == "" {
				via = "the route back to it goes via " + back.dev
			}
			r.Status = Fail
			r.Detail = fmt.Sprintf("%s: datagrams from sender %s arrive on %s but %s, so the kernel drops them silently", strict, ch.Sender, ifi.Name, via)
			r.Fix = fix + fmt.Sprintf(", or route %s via %s", ch.Sender, ifi.Name)
		default:
			r.Status = OK
			r.Detail = fmt.Sprintf("%s, and the route back to sender %s goes via %s: its datagrams pass", strict, ch.Sender, ifi.Name)
		}
		return r
	}
	var defaults []struct{ Dev string }
	if err := ipJSON(ctx, &defaults, "route", "show", "default"); err == nil {
		for _, d := range defaults {
			if d.Dev == ifi.Name {
				r.Status = OK
				r.Detail = strict + ", but the default route is via " + ifi.Name + ": senders on any subnet pass (name the sender with --sender to check it)"
				return r
			}
		}
	}
	var subnets []string
	addrs, _ := ifi.Addrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			ones, _ := n.Mask.Size()
			subnets = append(subnets, fmt.Sprintf("%s/%d", n.IP.Mask(n.Mask), ones))
		}
	}
	r.Status = Warn
	r.Detail = fmt.Sprintf("%s and no default route via %s: multicast from senders outside %s (the subnets routed via %s) is dropped silently (name the sender with --sender to check it)",
		strict, ifi.Name, strings.Join(subnets, ", "), ifi.Name)
	r.Fix = fix
	return r
}

func checkIGMP(ctx context.Context, ch Channel, ifi *net.Interface, o Options) (Result, Result) {
	m := Result{Check: CheckIGMP}
	q := Result{Check: CheckQuerier}
	if ifi == nil {
		m.Status, q.Status = Info, Info
		m.Detail, q.Detail = "not checked: no interface", "not checked: no interface"
		return m, q
	}
	b, err := os.ReadFile("/proc/thread-self/net/igmp")
	if err != nil {
		m.Status, q.Status = Info, Info
		m.Detail = "cannot read /proc/net/igmp: " + err.Error()
		q.Detail = m.Detail
		return m, q
	}
	g := ch.Group.Addr()
	st := parseIGMP(b)[ifi.Name]
	switch {
	case st == nil && ifi.Flags&net.FlagUp == 0:
		m.Status = Info
		m.Detail = fmt.Sprintf("not checked: %s is down (see the interface check)", ifi.Name)
	case st == nil:
		m.Status = Fail
		m.Detail = fmt.Sprintf("%s has no IGMP state: the kernel does not do multicast on it", ifi.Name)
		m.Fix = fmt.Sprintf("ip link set dev %s multicast on", ifi.Name)
	case st.groups[g] > 0:
		m.Status = OK
		m.Detail = fmt.Sprintf("%s is joined on %s by %d socket(s) (IGMP %s)", g, ifi.Name, st.groups[g], st.version)
	default:
		m.Status = Info
		m.Detail = fmt.Sprintf("nothing on this host has joined %s on %s now: expected where only heraldd sends; herald listen joins while it runs (the loopback check below joins too)", g, ifi.Name)
	}
	if st != nil && (st.version == "V1" || st.version == "V2") {
		q.Status = OK
		q.Detail = fmt.Sprintf("an IGMP%s querier was heard on %s recently (the kernel answers in its version)", strings.ToLower(st.version), ifi.Name)
		return m, q
	}
	noQuerierFix := "enable an IGMP querier on the segment: on the switch or router (ip igmp snooping querier), or on a Linux bridge: ip link set dev BRIDGE type bridge mcast_querier 1"
	if o.QuerierWait <= 0 {
		q.Status = Info
		q.Detail = fmt.Sprintf("cannot tell from /proc/net/igmp whether %s has an IGMPv3 querier or none (no v1/v2 querier was heard); run with --querier-wait 130s to listen for one: without a querier, switches with IGMP snooping stop forwarding the group after a few minutes", ifi.Name)
		return m, q
	}
	from, err := listenQuery(ctx, ifi, o.QuerierWait)
	switch {
	case err != nil:
		q.Status = Info
		q.Detail = "cannot listen for IGMP queries: " + err.Error() + " (it needs root: CAP_NET_RAW)"
	case from.IsValid():
		q.Status = OK
		q.Detail = fmt.Sprintf("IGMP query heard on %s from %s", ifi.Name, from)
	default:
		q.Status = Warn
		q.Detail = fmt.Sprintf("no IGMP query heard on %s in %s: without a querier, switches with IGMP snooping stop forwarding the group to receivers after a few minutes (membership timeout, 260 s by default)", ifi.Name, o.QuerierWait)
		q.Fix = noQuerierFix
	}
	return m, q
}

// listenQuery waits up to d for an IGMP membership query on ifi and returns its source.
func listenQuery(ctx context.Context, ifi *net.Interface, d time.Duration) (netip.Addr, error) {
	c, err := net.ListenPacket("ip4:igmp", "0.0.0.0")
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	pc := ipv4.NewPacketConn(c)
	if err := pc.SetControlMessage(ipv4.FlagInterface, true); err != nil {
		return netip.Addr{}, err
	}
	deadline := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	pc.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for {
		n, cm, src, err := pc.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return netip.Addr{}, nil
			}
			return netip.Addr{}, err
		}
		if n > 0 && buf[0] == 0x11 && cm != nil && cm.IfIndex == ifi.Index {
			a, _ := netip.AddrFromSlice(src.(*net.IPAddr).IP.To4())
			return a, nil
		}
	}
}

func checkTTL(ch Channel, rt route, ifName string) Result {
	r := Result{Check: CheckTTL}
	switch {
	case rt.gateway != "" && ch.TTL <= 1:
		r.Status = Warn
		r.Detail = fmt.Sprintf("ttl %d with %s routed via gateway %s (route %s): datagrams stay on the segment of %s; receivers behind %s get nothing", ch.TTL, ch.Group.Addr(), rt.gateway, rt.dst, rt.dev, rt.gateway)
		r.Fix = "if receivers are behind routers: set the channel's ttl to the number of routers + 1 and enable multicast routing (PIM) on them; if all are on this segment: ip route add 224.0.0.0/4 dev " + rt.dev
	case rt.gateway != "":
		r.Status = OK
		r.Detail = fmt.Sprintf("ttl %d: datagrams may cross %d router(s) beyond gateway %s, if they route multicast (PIM)", ch.TTL, ch.TTL-1, rt.gateway)
	case ch.TTL <= 1:
		r.Status = OK
		r.Detail = fmt.Sprintf("ttl %d: the segment of %s only, and the group is routed on-link", ch.TTL, ifName)
	default:
		r.Status = OK
		r.Detail = fmt.Sprintf("ttl %d: routers that do multicast routing may forward the datagrams beyond the segment of %s", ch.TTL, ifName)
	}
	return r
}

// checkLoopback joins the group on the interface, sends one datagram to it with TTL 0 and
// IP_MULTICAST_LOOP (so it never leaves the host) and waits for it. The datagram starts with
// "herald-doctor", which Herald receivers on this host drop and count as malformed (or, with a
// key, as an authentication failure).
func checkLoopback(ctx context.Context, ch Channel, ifi *net.Interface, o Options) Result {
	r := Result{Check: CheckLoopback}
	if ifi == nil {
		r.Status = Fail
		r.Detail = "not run: no interface to join on"
		r.Fix = "fix the interface check first"
		return r
	}
	fail := func(what string, err error) Result {
		r.Status = Fail
		r.Detail = fmt.Sprintf("loopback on %s: %s: %v", ifi.Name, what, err)
		r.Fix = "fix the checks above that are not OK; if all are, look for other firewall tools (ebtables, a security module) and the kernel log (dmesg)"
		return r
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
		})
		return errors.Join(err, serr)
	}}
	c, err := lc.ListenPacket(ctx, "udp4", ch.Group.String())
	if err != nil {
		return fail("bind "+ch.Group.String(), err)
	}
	defer c.Close()
	rp := ipv4.NewPacketConn(c)
	gaddr := &net.UDPAddr{IP: ch.Group.Addr().AsSlice(), Port: int(ch.Group.Port())}
	if err := rp.JoinGroup(ifi, &net.UDPAddr{IP: gaddr.IP}); err != nil {
		return fail("join "+ch.Group.Addr().String(), err)
	}
	s, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		return fail("sender socket", err)
	}
	defer s.Close()
	sp := ipv4.NewPacketConn(s)
	if err := errors.Join(sp.SetMulticastInterface(ifi), sp.SetMulticastTTL(0), sp.SetMulticastLoopback(true)); err != nil {
		return fail("sender socket options", err)
	}
	token := make([]byte, 16)
	rand.Read(token)
	msg := append([]byte("herald-doctor "), hex.EncodeToString(token)...)
	if _, err := sp.WriteTo(msg, nil, gaddr); err != nil {
		return fail("send to "+ch.Group.String(), err)
	}
	c.SetReadDeadline(time.Now().Add(o.LoopbackWait))
	buf := make([]byte, 65536)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				r.Status = Fail
				r.Detail = fmt.Sprintf("a datagram sent to %s on %s (TTL 0, loopback) did not come back within %s: something on this host drops it", ch.Group, ifi.Name, o.LoopbackWait)
				r.Fix = fmt.Sprintf("look for firewall rules on udp port %d (nft list ruleset; iptables-save) and the checks above", ch.Group.Port())
				return r
			}
			return fail("receive", err)
		}
		if bytes.Equal(buf[:n], msg) {
			r.Status = OK
			r.Detail = fmt.Sprintf("joined %s on %s, sent a datagram (TTL 0: it did not leave the host) and received it", ch.Group, ifi.Name)
			return r
		}
	}
}

func checkFirewall(ctx context.Context, ch Channel) Result {
	r := Result{Check: CheckFirewall}
	port := ch.Group.Port()
	if _, err := exec.LookPath("nft"); err == nil {
		out, err := exec.CommandContext(ctx, "nft", "-j", "list", "ruleset").Output()
		if err != nil {
			msg := err.Error()
			var ee *exec.ExitError
			if errors.As(err, &ee) && len(ee.Stderr) > 0 {
				msg = strings.TrimSpace(string(ee.Stderr))
			}
			r.Status = Info
			r.Detail = "cannot tell whether nftables drops udp port " + strconv.Itoa(int(port)) + ": nft: " + msg
			r.Fix = "run herald doctor as root to read the ruleset"
			return r
		}
		fs, err := parseNft(out, port)
		if err != nil {
			r.Status = Info
			r.Detail = "cannot tell: " + err.Error()
			return r
		}
		var drops, some []nftFinding
		for _, f := range fs {
			if f.drop == nftDrop {
				drops = append(drops, f)
			} else {
				some = append(some, f)
			}
		}
		switch {
		case len(drops) > 0:
			r.Status = Fail
			r.Detail = fmt.Sprintf("nftables drops udp port %d: %s", port, drops[0].where)
			for _, f := range drops[1:] {
				r.Detail += "; " + f.where
			}
			r.Fix = drops[0].fix
		case len(some) > 0:
			r.Status = Warn
			r.Detail = fmt.Sprintf("nftables drops some datagrams to udp port %d (the rule has other conditions: addresses, numgen, ct state...): %s", port, some[0].where)
			for _, f := range some[1:] {
				r.Detail += "; " + f.where
			}
			r.Fix = some[0].fix
		default:
			r.Status = OK
			r.Detail = fmt.Sprintf("no nftables rule or chain policy drops udp port %d (iptables-nft rules included; iptables-legacy rules are not in this ruleset)", port)
		}
		return r
	}
	if _, err := exec.LookPath("iptables-save"); err == nil {
		out, err := exec.CommandContext(ctx, "iptables-save").Output()
		if err != nil {
			r.Status = Info
			r.Detail = "cannot tell whether iptables drops udp port " + strconv.Itoa(int(port)) + ": iptables-save: " + err.Error()
			r.Fix = "run herald doctor as root to read the rules"
			return r
		}
		if lines := parseIptablesSave(out, port); len(lines) > 0 {
			r.Status = Fail
			r.Detail = fmt.Sprintf("iptables drops udp port %d: %s", port, strings.Join(lines, "; "))
			r.Fix = fmt.Sprintf("delete the rule (iptables -D with the same arguments) or insert an accept before it: iptables -I INPUT -p udp --dport %d -j ACCEPT", port)
			return r
		}
		r.Status = OK
		r.Detail = fmt.Sprintf("no iptables rule drops udp port %d (chain policies are not judged without nft; the loopback check below tests the path)", port)
		return r
	}
	r.Status = Info
	r.Detail = "cannot tell whether a firewall drops udp port " + strconv.Itoa(int(port)) + ": neither nft nor iptables-save is installed (the loopback check below tests the path)"
	return r
}
