package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Net is a test network made of network namespaces: a bridge in its own
// namespace and one namespace per host, joined to the bridge by a veth pair
// whose host end is eth0, addressed 198.18.SUBNET.N/24 (N = 1, 2, ... in
// the order the hosts were given). 198.18.0.0/15 is reserved for network
// benchmarks: nothing here can reach another network. Everything is deleted
// when the test ends.
type Net struct {
	T      testing.TB
	Bridge string                // namespace of the bridge
	NS     map[string]string     // host -> namespace
	Addr   map[string]netip.Addr // host -> address of its eth0
}

var netSeq atomic.Int32

// NewNet builds a Net for hosts; prefix names its namespaces (and finds the
// ones a crashed run left behind), subnet is the third octet. It needs root
// and ip (RequireRoot) and skips in -short mode.
func NewNet(t testing.TB, prefix string, subnet byte, hosts ...string) *Net {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	RequireRoot(t, "ip", "bridge", "nft")
	RemoveStale(prefix)
	id := fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), netSeq.Add(1))
	n := &Net{T: t, Bridge: id + "-br", NS: map[string]string{}, Addr: map[string]netip.Addr{}}
	t.Cleanup(func() {
		for _, ns := range n.NS {
			exec.Command("ip", "netns", "del", ns).Run()
		}
		exec.Command("ip", "netns", "del", n.Bridge).Run()
	})
	Sh(t, "ip", "netns", "add", n.Bridge)
	Sh(t, "ip", "-n", n.Bridge, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	Sh(t, "ip", "-n", n.Bridge, "link", "set", "br0", "up")
	for i, h := range hosts {
		ns := id + "-" + h
		n.NS[h] = ns
		n.Addr[h] = netip.AddrFrom4([4]byte{198, 18, subnet, byte(i + 1)})
		Sh(t, "ip", "netns", "add", ns)
		v := fmt.Sprintf("v%d", i)
		Sh(t, "ip", "-n", n.Bridge, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", ns)
		Sh(t, "ip", "-n", n.Bridge, "link", "set", v, "master", "br0", "up")
		Sh(t, "ip", "-n", ns, "addr", "add", n.Addr[h].String()+"/24", "dev", "eth0")
		Sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")
		Sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	n.waitForwarding(len(hosts))
	return n
}

// waitForwarding waits until the bridge has ports ports, all forwarding
// (which takes the carrier of both veth ends).
func (n *Net) waitForwarding(ports int) {
	t := n.T
	t.Helper()
	var out []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var err error
		out, err = exec.Command("bridge", "-n", n.Bridge, "-j", "link", "show").Output()
		if err != nil {
			t.Fatalf("bridge -n %s -j link show: %v", n.Bridge, err)
		}
		var links []struct{ State string }
		if err := json.Unmarshal(out, &links); err != nil {
			t.Fatalf("bridge -n %s -j link show: %v: %s", n.Bridge, err, out)
		}
		forwarding := 0
		for _, l := range links {
			if l.State == "forwarding" {
				forwarding++
			}
		}
		if forwarding == ports {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge %s: got %d ports forwarding after 5s, want %d: %s", n.Bridge, forwarding, ports, out)
		}
	}
}

// Sh runs a command and fails the test with its output if it fails.
func Sh(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// RemoveStale deletes namespaces named with prefix that a run which died
// before its cleanup left behind (their pid, the first field after the
// prefix, is gone).
func RemoveStale(prefix string) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(strings.TrimPrefix(name, prefix), "-")[0])
		if err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
			continue // a live test process owns it
		}
		exec.Command("ip", "netns", "del", name).Run()
	}
}

// In runs f on an OS thread switched into host's namespace: sockets f
// creates live there (and keep working from any goroutine afterwards).
func (n *Net) In(host string, f func() error) error {
	return InNamespace(n.NS[host], f)
}

// InNamespace runs f on an OS thread switched into the named namespace.
func InNamespace(ns string, f func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with its goroutine instead of
		// going back to the pool in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("setns back: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// DropShare makes host drop one incoming UDP datagram to port in ten, at
// random (nftables numgen: netem is not available).
func (n *Net) DropShare(host string, port int) {
	ns := n.NS[host]
	Sh(n.T, "ip", "netns", "exec", ns, "nft", "add", "table", "inet", "t")
	Sh(n.T, "ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "t", "input", "{ type filter hook input priority 0 ; }")
	Sh(n.T, "ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "t", "input", "udp", "dport", strconv.Itoa(port), "numgen", "random", "mod", "10", "0", "drop")
}
