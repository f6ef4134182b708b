package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/bridge/bridgeview"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testenv"
)

// nsDialer dials from inside a network namespace.
type nsDialer struct{ ns string }

func (d nsDialer) Dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	err := testenv.InNamespace(d.ns, func() error {
		var err error
		c, err = net.DialTimeout(network, addr, time.Second)
		return err
	})
	return c, err
}

// startChildIn starts heraldd (this test binary) in namespace ns.
func startChildIn(t *testing.T, ns, dir, addr string, extra ...string) *child {
	t.Helper()
	args := append([]string{"netns", "exec", ns, os.Args[0], "--data-dir", dir, "--stomp-listen", addr, "--log-level", "warn"}, extra...)
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	cmd.Stderr = testenv.RaceWatch(t, os.Stderr)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start heraldd: %v", err)
	}
	c := &child{cmd: cmd, addr: addr}
	t.Cleanup(func() { c.cmd.Process.Signal(syscall.SIGKILL); c.cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := nsDialer{ns}.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("heraldd did not listen on %s within 30s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBridgeLinkCut: the sites' link to the JetStream cluster (3 nodes,
// replicas 3, in their own network namespace) is cut with nftables for 10 s
// (packets dropped, no reset) and restored while site A sends. A keeps
// every message meanwhile (store and forward); afterwards the stream and
// site B's queue hold every receipted message once, in order. Site B
// brings the stream in with 32 messages in flight (the consumer's max ack
// pending): messages the server handed to the lost connection come again
// only after their ack wait, and B's sequencer holds later ones back.
// Window32: A sends out with 32 in flight too. SlowFill: A sends out one
// at a time, so the stream fills slowly after the cut and B's consumer
// gets later messages one by one before the lost ones come again (this
// failed 3 of 3 before the sequencer, with B's window above 1).
func TestBridgeLinkCut(t *testing.T) {
	t.Run("Window32", func(t *testing.T) { bridgeLinkCut(t, "hbrcut", 61, bridgeTuning) })
	t.Run("SlowFill", func(t *testing.T) {
		bridgeLinkCut(t, "hbrslo", 62, strings.Replace(bridgeTuning, "max_in_flight = 32", "max_in_flight = 1", 1))
	})
}

func bridgeLinkCut(t *testing.T, prefix string, subnet byte, tuningA string) {
	n := testenv.NewNet(t, prefix, subnet, "site", "nats")
	siteNS, natsNS := n.NS["site"], n.NS["nats"]
	natsAddr := n.Addr["nats"].String()
	dial := nsDialer{siteNS}
	cl := natstest.StartProcsIn(t, 3, []string{"ip", "netns", "exec", natsNS}, natsAddr, dial)
	urls := quoteList(cl.URLs())
	dirA, dirB := t.TempDir(), t.TempDir()
	addrA := "127.0.0.1:61613" // in the site namespace
	addrB := "127.0.0.1:61614"
	conf := func(dir, id, tuning, mapping string) string {
		return writeBridgeConfig(t, t.TempDir(), fmt.Sprintf(`
data_dir = %q
[journal]
sync = "normal"
[admin]
socket = %q
[[bridge]]
name = "backbone"
kind = "jetstream"
direction = "both"
urls = %s
stream = "HERALD"
create_stream = true
replicas = 3
stream_subjects = ["sites.a.orders"]
appliance_id = %q
%s
%s
`, dir, dir+"/admin.sock", urls, id, tuning, mapping))
	}
	cfgA := conf(dirA, "site-a", tuningA, "[[bridge.map]]\nlocal = \"/queue/orders\"\nremote = \"sites.a.orders\"\ndirection = \"out\"")
	cfgB := conf(dirB, "site-b", bridgeTuning, "[[bridge.map]]\nlocal = \"/queue/from-a\"\nremote = \"sites.a.orders\"\ndirection = \"in\"")
	startChildIn(t, siteNS, dirA, addrA, "--config", cfgA)
	startChildIn(t, siteNS, dirB, addrB, "--config", cfgB)
	// Both links up before anything is sent: the cut must find B's
	// consumer mid-session, with messages on their way to it.
	waitBridgesUp(t, dirA+"/admin.sock", 60*time.Second)
	waitBridgesUp(t, dirB+"/admin.sock", 60*time.Second)

	nc, err := dial.Dial("tcp", addrA)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	ca, err := client.Handshake(ctx, nc, addrA, client.Options{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	nft := func(args ...string) {
		testenv.Sh(t, append([]string{"ip", "netns", "exec", siteNS, "nft"}, args...)...)
	}
	const total = 400
	var cutAt, restoredAt time.Time
	var during atomic.Int64
	for i := 0; i < total; i++ {
		if i == 100 {
			nft("add", "table", "inet", "cut")
			nft("add", "chain", "inet", "cut", "out", "{ type filter hook output priority 0 ; }")
			nft("add", "rule", "inet", "cut", "out", "ip", "daddr", natsAddr, "drop")
			nft("add", "chain", "inet", "cut", "in", "{ type filter hook input priority 0 ; }")
			nft("add", "rule", "inet", "cut", "in", "ip", "saddr", natsAddr, "drop")
			cutAt = time.Now()
		}
		if i >= 100 && i < 300 {
			during.Add(1)
			time.Sleep(10 * time.Second / 200) // the cut lasts the 200 sends: 10 s
		}
		if i == 300 {
			nft("delete", "table", "inet", "cut")
			restoredAt = time.Now()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := ca.SendReceipt(ctx, "/queue/orders", []byte(strconv.Itoa(i)), stomp.Header{Key: "dedup-id", Value: "p-" + strconv.Itoa(i)})
		cancel()
		if err != nil {
			t.Fatalf("send %d to A (during the cut: A must keep accepting): %v", i, err)
		}
	}
	t.Logf("link cut for %s; %d messages sent to A meanwhile", restoredAt.Sub(cutAt).Round(time.Millisecond), during.Load())

	_, js := natstest.Connect(t, cl.URLs(), nats.SetCustomDialer(dial))
	drained := time.Now()
	streamInOrder(t, js, "sites.a.orders", total, 120*time.Second)
	t.Logf("stream complete %s after the link came back", time.Since(restoredAt).Round(time.Millisecond))
	_ = drained

	nb, err := dial.Dial("tcp", addrB)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	cb, err := client.Handshake(ctx, nb, addrB, client.Options{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	sub, err := cb.SubscribeReceipt(context.Background(), "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(120 * time.Second)
	for i := 0; i < total; i++ {
		select {
		case f := <-sub.C():
			if got := string(f.Body); got != strconv.Itoa(i) {
				t.Fatalf("message %d at B: got %q (a duplicate, loss or reordering)", i, got)
			}
			cb.Ack(f)
		case <-timeout:
			t.Fatalf("only %d of %d messages arrived at B", i, total)
		}
	}
	select {
	case f := <-sub.C():
		t.Fatalf("a message more than the %d sent: %q", total, f.Body)
	case <-time.After(2 * time.Second):
	}
	t.Logf("B complete %s after the link came back", time.Since(restoredAt).Round(time.Millisecond))
	for _, b := range bridgeViews(t, dirB+"/admin.sock") {
		for _, d := range b.Directions {
			t.Logf("B %s: held back %d messages in all (%d now), %d gaps, %d reconnects", d.Direction, d.HeldBackTotal, d.HeldBack, d.Gaps, d.Reconnects)
			if d.Reconnects == 0 {
				t.Errorf("B's %s direction did not notice the cut (no reconnection): the test did not exercise it", d.Direction)
			}
			if d.Gaps != 0 {
				t.Errorf("B reported %d gaps, but nothing was removed from the stream: %s", d.Gaps, d.LastError)
			}
		}
	}
}

// waitBridgesUp waits until every direction of every bridge of the heraldd
// behind sock is up.
func waitBridgesUp(t *testing.T, sock string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		up, n := 0, 0
		if _, err := os.Stat(sock); err == nil {
			for _, b := range bridgeViews(t, sock) {
				for _, d := range b.Directions {
					n++
					if d.State == "up" {
						up++
					}
				}
			}
		}
		if n > 0 && up == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d bridge directions up after %s", sock, up, n, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// bridgeViews reads GET /v1/bridges on heraldd's admin socket.
func bridgeViews(t *testing.T, sock string) []bridgeview.View {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://admin/v1/bridges")
	if err != nil {
		t.Fatalf("GET /v1/bridges: %v", err)
	}
	defer resp.Body.Close()
	var l admin.BridgeList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatalf("GET /v1/bridges: %v", err)
	}
	return l.Bridges
}
