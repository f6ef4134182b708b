package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestMulticastStreamCatchUp: a stream mapped to a multicast channel
// (streams = ["stats.>"]) between network namespaces. Every append reaches
// `herald listen` as a message of topic /stream/NAME with its
// x-stream-offset; a receiver cut off (nftables drops every datagram of
// the channel) for longer than the channel's 64 KiB window holds reports
// the loss as #GAP and prints how to catch up (#CATCHUP: herald receive
// /stream/NAME --offset FROM --count N) for exactly the offsets it lost;
// running that command over STOMP returns exactly those messages.
func TestMulticastStreamCatchUp(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app", "r1")
	const group, port = "239.255.78.9:7809", 7809
	cfgPath := writeDaemonConfig(t, t.TempDir(), nw.Addr["app"].String(), mcChannel{group: group, extra: "window = 65536\nstreams = [\"stats.>\"]\n"})
	l := nw.startListener(t, herald, "r1", group)
	d := nw.startDaemon(t, "app", cfgPath)
	pub := nw.dialStomp(t, "app", d.stomp)
	appendN := func(c *client.Conn, from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			body := []byte("v" + strconv.Itoa(i))
			var err error
			if i == from+n-1 || i%200 == 199 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err = c.SendReceipt(ctx, "/stream/stats.a", body)
				cancel()
			} else {
				err = c.Send("/stream/stats.a", body)
			}
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		}
	}
	// offsets returns the offsets r1 received on multicast, and its gaps
	// and catch-up lines.
	type catchUp struct {
		Stream  string `json:"stream"`
		From    uint64 `json:"from"`
		To      uint64 `json:"to"`
		Command string `json:"command"`
	}
	state := func() (got map[uint64]bool, last int64, gaps int, cus []catchUp) {
		got, last = map[uint64]bool{}, -1
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, e := range l.events {
			if e.Gap != nil && e.Gap.Topic == "/stream/stats.a" {
				gaps++
			}
			if e.Topic != "/stream/stats.a" {
				continue
			}
			off, err := strconv.ParseUint(e.Headers["x-stream-offset"], 10, 64)
			if err != nil {
				t.Errorf("multicast message without x-stream-offset: %+v", e)
				continue
			}
			if e.Body != "v"+strconv.FormatUint(off, 10) || e.Headers["timestamp"] == "" {
				t.Errorf("offset %d: body %q, timestamp %q", off, e.Body, e.Headers["timestamp"])
			}
			got[off] = true
			last = max(last, int64(off))
		}
		for _, j := range l.junk {
			var c struct {
				CatchUp *catchUp `json:"catchup"`
			}
			if json.Unmarshal([]byte(j), &c) == nil && c.CatchUp != nil {
				cus = append(cus, *c.CatchUp)
			} else {
				t.Errorf("listen printed %q", j)
			}
		}
		return
	}
	waitLast := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, last, _, _ := state(); last >= want {
				return
			}
			if time.Now().After(deadline) {
				_, last, gaps, _ := state()
				t.Fatalf("r1 got offsets up to %d (gaps %d), want %d", last, gaps, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	appendN(pub, 0, 300)
	waitLast(299)
	if got, _, gaps, _ := state(); len(got) != 300 || gaps != 0 {
		t.Fatalf("before the cut: %d offsets, %d gaps; want 300 and none", len(got), gaps)
	}
	// Cut r1 off while 3,000 appends (about 10 windows) go out.
	ns := nw.NS["r1"]
	testenv.Sh(t, "ip", "netns", "exec", ns, "nft", "add", "table", "inet", "cut")
	t.Cleanup(func() { exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "cut").Run() })
	testenv.Sh(t, "ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "cut", "input", "{ type filter hook input priority 0 ; }")
	testenv.Sh(t, "ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "cut", "input", "udp", "dport", strconv.Itoa(port), "drop")
	appendN(pub, 300, 3000)
	time.Sleep(200 * time.Millisecond)
	testenv.Sh(t, "ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "cut")
	appendN(pub, 3300, 300)
	waitLast(3599)
	time.Sleep(300 * time.Millisecond) // a catch-up line follows its gap
	got, _, gaps, cus := state()
	lost := map[uint64]bool{}
	for off := uint64(0); off < 3600; off++ {
		if !got[off] {
			lost[off] = true
		}
	}
	t.Logf("r1: %d of 3600 offsets by multicast, %d lost, %d gaps, %d catch-up lines", len(got), len(lost), gaps, len(cus))
	if len(lost) == 0 || gaps == 0 {
		t.Fatalf("no loss while cut off (%d lost, %d gaps): the cut did not outlast the window", len(lost), gaps)
	}
	covered := map[uint64]bool{}
	for _, c := range cus {
		if c.Stream != "stats.a" || c.Command != fmt.Sprintf("herald receive /stream/stats.a --offset %d --count %d", c.From, c.To-c.From+1) {
			t.Errorf("catch-up line %+v", c)
		}
		for off := c.From; off <= c.To; off++ {
			if covered[off] {
				t.Errorf("offset %d in two catch-up lines", off)
			}
			covered[off] = true
		}
	}
	for off := range lost {
		if !covered[off] {
			t.Errorf("lost offset %d: no catch-up line covers it", off)
		}
	}
	for off := range covered {
		if !lost[off] {
			t.Errorf("catch-up line covers offset %d, which r1 received", off)
		}
	}
	// Run the printed commands over STOMP from r1's namespace.
	for _, c := range cus {
		args := append(strings.Fields(c.Command)[1:], "--server", d.stomp, "--timeout", "10s")
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns, herald}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", c.Command, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if uint64(len(lines)) != c.To-c.From+1 {
			t.Fatalf("%s printed %d lines, want %d", c.Command, len(lines), c.To-c.From+1)
		}
		for i, line := range lines {
			if want := "v" + strconv.FormatUint(c.From+uint64(i), 10); line != want {
				t.Fatalf("%s: line %d is %q, want %q", c.Command, i, line, want)
			}
		}
	}
}
