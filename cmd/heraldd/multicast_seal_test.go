package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/internal/testenv"
)

// TestMulticastSealed: a channel with seal = true. A listener started with --seal and the key,
// behind 10% loss, gets every message, a 300 KB one (fragments) included; a listener without the
// key prints nothing. The daemon wires seal and the key from the channel's settings.
func TestMulticastSealed(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app", "r1", "r2")
	const group, port = "239.255.78.12:7812", 7812
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "channel.key")
	if err := os.WriteFile(keyFile, []byte("c2VhbGVkIGNoYW5uZWwga2V5IGZvciB0aGUgdGVzdA==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nw.dropShare("r1", port)
	r1 := nw.startListener(t, herald, "r1", group, "--seal", "--key-file", keyFile, "--key-id", "3")
	r2 := nw.startListener(t, herald, "r2", group)
	cfgPath := writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}, keyFile: keyFile, keyID: 3})
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(cfg), "key_id = 3\n", "key_id = 3\nseal = true\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := nw.startDaemon(t, "app", cfgPath)
	pub := nw.dialStomp(t, "app", d.stomp)
	count := map[string]uint64{}
	publish(t, pub, count, []string{"metrics.cpu", "metrics.mem"}, 2000, 10000)
	big := strings.Repeat("sealed and fragmented ", 300_000/22)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := pub.SendReceipt(ctx, "/topic/metrics.big", []byte(big)); err != nil {
		t.Fatalf("a %d-byte message to a sealed channel: %v", len(big), err)
	}
	cancel()
	count["metrics.big"] = 1
	waitAll(t, 15*time.Second, 1, count, r1)
	time.Sleep(200 * time.Millisecond) // proves absence: r2 must print nothing of what went out
	s1, s2 := r1.stop(t), r2.stop(t)
	got := false
	last := map[string]uint64{}
	for _, e := range r1.snapshot() {
		switch {
		case e.Gap != nil:
			t.Errorf("listener with the key: gap %+v, want none (10%% loss is repairable)", *e.Gap)
		case e.Session != nil:
		case e.Topic == "metrics.big":
			got = e.Body == big
		default:
			if e.Seq != last[e.Topic]+1 || e.Body != mcBody(e.Topic, e.Seq) {
				t.Fatalf("listener with the key: %s #%d %q after #%d", e.Topic, e.Seq, e.Body, last[e.Topic])
			}
			last[e.Topic] = e.Seq
		}
	}
	if !got {
		t.Errorf("the listener with the key did not print the %d-byte message whole", len(big))
	}
	for _, topic := range []string{"metrics.cpu", "metrics.mem"} {
		if last[topic] != count[topic] {
			t.Errorf("listener with the key: %s ends at #%d, want #%d", topic, last[topic], count[topic])
		}
	}
	t.Logf("with the key behind 10%% loss: %d messages, %d NAKs, %d repairs, %d auth failures; without the key: %d datagrams, %d messages",
		s1.Messages, s1.NAKs, s1.Repairs, s1.AuthFailures, s2.Datagrams, s2.Messages)
	if s1.Repairs == 0 || s1.AuthFailures != 0 {
		t.Errorf("listener with the key: %d repairs, %d auth failures; want repairs (10%% loss) and no failure", s1.Repairs, s1.AuthFailures)
	}
	if s2.Messages != 0 || len(r2.snapshot()) != 0 {
		t.Errorf("listener without the key: %d messages, %d events; want none", s2.Messages, len(r2.snapshot()))
	}
	if !strings.Contains(r2.stderr.String(), "sealed") {
		t.Errorf("listener without the key: stderr %q, want the warning and counter naming sealed datagrams", r2.stderr)
	}
}
