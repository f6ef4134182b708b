package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/herald-mq/herald/internal/testenv"
	"github.com/herald-mq/herald/multicast"
)

// TestMulticastTooLarge: a message on a multicast topic larger than the protocol carries
// (multicast.MaxMessage, reassembled from fragments) is refused with an ERROR naming the channel
// (herald send exits non-zero), never published to some and silently dropped on the LAN. Messages
// larger than one datagram go as fragments; large messages to queues and other topics go through.
func TestMulticastTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app")
	const group = "239.255.78.10:7810"
	dir := t.TempDir()
	cfgPath := writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}})
	// A STOMP body limit above the channel's, so that the channel's check is what refuses.
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(cfg), "[stomp]\n", "[stomp]\nmax_body_bytes = 33554432\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := nw.startDaemon(t, "app", cfgPath)
	send := func(dest string, size int) (int, string) {
		f := filepath.Join(dir, "body")
		if err := os.WriteFile(f, bytes.Repeat([]byte("x"), size), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", nw.NS["app"], herald, "--server", d.stomp, "send", "--receipt", "--file", f, dest)
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
	if code, out := send("/topic/metrics.big", 200_000); code != 0 {
		t.Errorf("a 200,000-byte message to a multicast topic (fragments): exit %d: %s", code, out)
	}
	big := multicast.MaxMessage + 1
	code, out := send("/topic/metrics.huge", big)
	t.Logf("a %d-byte message to a multicast topic: exit %d: %s", big, code, strings.TrimSpace(out))
	if code == 0 || !strings.Contains(out, "metrics") || !strings.Contains(out, fmt.Sprint(multicast.MaxMessage)) {
		t.Errorf("a %d-byte message to a multicast topic: exit %d, output %q; want a non-zero exit and an error naming the channel and the limit", big, code, out)
	}
	if code, out := send("/topic/other.huge", big); code != 0 {
		t.Errorf("a %d-byte message to a topic on no channel: exit %d: %s", big, code, out)
	}
	if code, out := send("/queue/huge", big); code != 0 {
		t.Errorf("a %d-byte message to a queue: exit %d: %s", big, code, out)
	}
}
