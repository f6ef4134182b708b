package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/herald-mq/herald/internal/testenv"
)

// TestMulticastTooLarge: a message on a multicast topic that cannot go in one datagram is refused
// with an ERROR naming the channel (herald send exits non-zero), never published to some and
// silently dropped on the LAN. Messages that fit, and large messages to queues, go through.
func TestMulticastTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app")
	const group = "239.255.78.10:7810"
	dir := t.TempDir()
	d := nw.startDaemon(t, "app", writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}}))
	send := func(dest string, size int) (int, string) {
		cmd := exec.Command("ip", "netns", "exec", nw.NS["app"], herald, "--server", d.stomp, "send", "--receipt", dest, strings.Repeat("x", size))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := send("/topic/metrics.small", 1000); code != 0 {
		t.Fatalf("a 1000-byte message to a multicast topic: exit %d: %s", code, out)
	}
	code, out := send("/topic/metrics.big", 70000)
	t.Logf("a 70,000-byte message to a multicast topic: exit %d: %s", code, strings.TrimSpace(out))
	if code == 0 || !strings.Contains(out, "metrics") || !strings.Contains(out, "datagram") {
		t.Errorf("a 70,000-byte message to a multicast topic: exit %d, output %q; want a non-zero exit and an error naming the channel and the datagram limit", code, out)
	}
	if code, out := send("/topic/other.big", 70000); code != 0 {
		t.Errorf("a 70,000-byte message to a topic on no channel: exit %d: %s", code, out)
	}
	if code, out := send("/queue/big", 70000); code != 0 {
		t.Errorf("a 70,000-byte message to a queue: exit %d: %s", code, out)
	}
}
