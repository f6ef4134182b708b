package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestMulticastLateJoin: `herald listen --late-join 5`, started behind 10% loss on a channel
// that has already carried 600 small messages and two 200 kB ones (fragments), prints first
// exactly the last 5 messages of each topic (the two large ones whole), in order, then every
// live message, with no gap and no duplicate. The fragment counters are real: the channel's
// fragmented_messages_total and fragments_total in GET /v1/channels, `herald channels --json`
// and the metrics; the listener's reassembled, fragments-dropped, incomplete and
// history-answers in --stats. The channel and the listener use the dashboard profile (a
// dashboard's: a 2 s repair budget, which a loaded test host does not exhaust).
func TestMulticastLateJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app", "r1")
	const group, port, n = "239.255.78.11:7811", 7811, 5
	dir := t.TempDir()
	cfg := writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}, profile: "dashboard"})
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "[admin]\n", "[admin]\nmetrics_listen = \"127.0.0.1:0\"\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := nw.startDaemon(t, "app", cfg)
	pub := nw.dialStomp(t, "app", d.stomp)
	topics := []string{"metrics.cpu", "metrics.mem", "metrics.disk"}
	count := map[string]uint64{}
	bigBody := func(seq uint64) string { return mcBody("metrics.big", seq) + strings.Repeat("x", 200_000) }
	sendBig := func(k int) {
		for i := 0; i < k; i++ {
			count["metrics.big"]++
			seq := count["metrics.big"]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := pub.SendReceipt(ctx, "/topic/metrics.big", []byte(bigBody(seq)), stomp.Header{Key: "n", Value: strconv.FormatUint(seq, 10)})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(t, pub, count, topics, 600, 5000)
	sendBig(2)
	before := copyCount(count)
	nw.dropShare("r1", port)
	l := nw.startListener(t, herald, "r1", group, "--late-join", strconv.Itoa(n), "--profile", "dashboard")
	// It joins on the idle sender's next HEARTBEAT and prints the history.
	waitAll(t, 10*time.Second, 1, before, l)
	publish(t, pub, count, topics, 600, 5000)
	sendBig(1)
	waitAll(t, 15*time.Second, 1, count, l)
	l.stop(t)

	// The listener's output: per topic the last n before it started, then everything.
	next := map[string]uint64{}
	for _, e := range l.snapshot() {
		switch {
		case e.Session != nil:
		case e.Gap != nil:
			t.Errorf("gap %+v, want none (10%% loss is repairable, the history is in the window)", *e.Gap)
		default:
			want := next[e.Topic]
			if want == 0 {
				want = max(before[e.Topic]+1, n+1) - n
			}
			if e.Seq != want {
				t.Fatalf("%s: message %d, want %d (the last %d before the start are %d-%d)", e.Topic, e.Seq, want, n,
					max(before[e.Topic]+1, n+1)-n, before[e.Topic])
			}
			body := mcBody(e.Topic, e.Seq)
			if e.Topic == "metrics.big" {
				body = bigBody(e.Seq)
			}
			if e.Body != body || e.Headers["n"] != strconv.FormatUint(e.Seq, 10) {
				t.Fatalf("%s %d: a body of %d bytes, headers %v: not the one sent", e.Topic, e.Seq, len(e.Body), e.Headers)
			}
			next[e.Topic] = e.Seq + 1
		}
	}
	for topic, c := range count {
		if next[topic] != c+1 {
			t.Errorf("%s: ends at %d, want %d", topic, next[topic]-1, c)
		}
	}
	stats := listenCounters(l.stderr.String())
	if stats == nil {
		t.Fatalf("herald listen --json --stats printed no counters: %s", l.stderr.String())
	}
	for k, want := range map[string]uint64{"reassembled": 3, "fragments_dropped": 0, "incomplete": 0, "history_answers": 1} {
		if stats[k] != want {
			t.Errorf("herald listen --stats: %s %d, want %d (%v)", k, stats[k], want, stats)
		}
	}
	if f := stats["fragments"]; f < 3*(200_000/1342) {
		t.Errorf("herald listen --stats: fragments %d, want at least %d (3 messages of 200 kB)", f, 3*(200_000/1342))
	}

	// The channel's counters, in the API, the CLI and the metrics.
	sock := dir + "/admin.sock"
	c := admin.NewClient(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := c.Channels(ctx)
	if err != nil || len(cl.Channels) != 1 {
		t.Fatalf("channels: %v %+v", err, cl)
	}
	out, err := exec.Command(herald, "channels", "--json", "--socket", sock).Output()
	var cli admin.ChannelList
	if err != nil || json.Unmarshal(out, &cli) != nil || len(cli.Channels) != 1 {
		t.Fatalf("herald channels --json: %v: %s", err, out)
	}
	// The sender answers every history request that reaches it; behind 10% loss an answer can
	// be lost and the listener asks again (its history-requests), so the channel counts from 1
	// up to the listener's requests, never more.
	asked, ok := stats["history_requests"]
	if !ok {
		t.Errorf("herald listen --stats: no history_requests counter in %v", stats)
	}
	for where, v := range map[string]admin.ChannelView{"GET /v1/channels": cl.Channels[0], "herald channels --json": cli.Channels[0]} {
		if v.FragmentedMessages != 3 || v.Fragments < 3*(200_000/1342) || v.HistoryAnswers < 1 || v.HistoryAnswers > asked || v.Streams != 4 {
			t.Errorf("%s: fragmented %d fragments %d history answers %d streams %d; want 3, at least %d, 1-%d (the listener's requests), 4",
				where, v.FragmentedMessages, v.Fragments, v.HistoryAnswers, v.Streams, 3*(200_000/1342), asked)
		}
	}
	if out, err := exec.Command(herald, "channels", "--socket", sock).Output(); err != nil || !strings.Contains(string(out), "3 (") {
		t.Errorf("herald channels: %v: %s, want the FRAGMENTED column with 3 messages", err, out)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	metrics := scrapeMetrics(t, nw, "app", st.MetricsListen)
	for _, m := range []string{`herald_channel_fragmented_messages_total{channel="metrics"}`, `herald_channel_fragments_total{channel="metrics"}`,
		`herald_channel_history_answers_total{channel="metrics"}`} {
		if !metricPositive(metrics, m) {
			t.Errorf("metrics: %s missing or not positive", m)
		}
	}
}

// scrapeMetrics reads /metrics from addr inside host's namespace.
func scrapeMetrics(t *testing.T, nw *mcNet, host, addr string) string {
	t.Helper()
	var text string
	if err := nw.in(host, func() error {
		out, err := exec.Command("curl", "-sf", "http://"+addr+"/metrics").Output()
		text = string(out)
		if err != nil {
			return fmt.Errorf("curl %s/metrics: %w", addr, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return text
}
