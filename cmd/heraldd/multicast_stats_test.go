package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestMulticastChannelStats runs a channel where loss happens (10% of the channel's datagrams
// dropped at one listener, a repair budget too small to keep up, a small window) and checks that
// the counters say so everywhere they are shown: GET /v1/channels, `herald channels --json` and
// the Prometheus metrics.
func TestMulticastChannelStats(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app", "r1", "r3")
	const group, port = "239.255.78.9:7809", 7809
	nw.dropShare("r1", port)
	nw.dropShare("r3", port)
	ls := []*mcListener{nw.startListener(t, herald, "r1", group), nw.startListener(t, herald, "r3", group)}
	dir := t.TempDir()
	cfg := writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}})
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The channel block is last: its keys can be appended. Two lossy listeners may each queue
	// 4 kB/s of repairs, the channel sends 4 kB/s: repairs wait and leave the 64 KiB window
	// (LOSS) while the listeners give up (gaps).
	s := strings.Replace(string(b), "[admin]\n", "[admin]\nmetrics_listen = \"127.0.0.1:0\"\n", 1) +
		"window = 65536\nrepair_rate = 4000\nsource_repair_rate = 4000\n"
	if err := os.WriteFile(cfg, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	d := nw.startDaemon(t, "app", cfg)
	pub := nw.dialStomp(t, "app", d.stomp)
	count := map[string]uint64{}
	publish(t, pub, count, []string{"metrics.cpu", "metrics.mem", "metrics.disk"}, 20000, 10000)
	time.Sleep(300 * time.Millisecond) // not synchronisation: the lossy listener's last NAKs and their answers
	for _, l := range ls {
		st := l.stop(t)
		t.Logf("listener %s: %d messages, %d gaps, %d NAKs, %d repairs", l.name, st.Messages, st.Gaps, st.NAKs, st.Repairs)
	}

	sock := dir + "/admin.sock"
	c := admin.NewClient(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := c.Channels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.Channels) != 1 {
		t.Fatalf("got %d channels, want 1", len(cl.Channels))
	}
	v := cl.Channels[0]
	js, _ := json.Marshal(v)
	t.Logf("GET /v1/channels: %s", js)
	checkChannelView(t, "GET /v1/channels", v, nw.Addr["r1"].String(), nw.Addr["r3"].String())

	// The CLI shows the same view.
	out, err := exec.Command(herald, "channels", "--json", "--socket", sock).Output()
	if err != nil {
		t.Fatalf("herald channels --json: %v", err)
	}
	var cli admin.ChannelList
	if err := json.Unmarshal(out, &cli); err != nil || len(cli.Channels) != 1 {
		t.Fatalf("herald channels --json: %v: %s", err, out)
	}
	checkChannelView(t, "herald channels --json", cli.Channels[0], nw.Addr["r1"].String(), nw.Addr["r3"].String())
	if out, err := exec.Command(herald, "channels", "--socket", sock).Output(); err != nil || !strings.Contains(string(out), "STREAMS") {
		t.Errorf("herald channels: %v: %s, want a STREAMS column", err, out)
	} else {
		t.Logf("herald channels:\n%s", out)
	}

	// And the metrics.
	metrics := channelMetrics(t, nw, c)
	lossy := []string{
		fmt.Sprintf(`herald_channel_source_naks_total{channel="metrics",source="%s"}`, nw.Addr["r1"]),
		fmt.Sprintf(`herald_channel_source_repair_bytes_total{channel="metrics",source="%s"}`, nw.Addr["r1"]),
	}
	for _, m := range []string{
		`herald_channel_losses_total{channel="metrics"}`,
		`herald_channel_streams{channel="metrics"}`,
		`herald_channel_repair_bytes_total{channel="metrics"}`,
		fmt.Sprintf(`herald_channel_source_naks_total{channel="metrics",source="%s"}`, nw.Addr["r3"]),
		fmt.Sprintf(`herald_channel_source_repair_bytes_total{channel="metrics",source="%s"}`, nw.Addr["r3"]),
		lossy[0], lossy[1],
	} {
		if !metricPositive(metrics, m) {
			t.Errorf("metrics: %s missing or not positive", m)
		}
	}
}

func checkChannelView(t *testing.T, where string, v admin.ChannelView, lossy ...string) {
	t.Helper()
	if v.Streams != 3 {
		t.Errorf("%s: streams %d, want 3", where, v.Streams)
	}
	if v.Losses == 0 || v.NAKs == 0 || v.Repairs == 0 || v.RepairBytes == 0 {
		t.Errorf("%s: losses %d, NAKs %d, repairs %d, repair bytes %d: want all > 0", where, v.Losses, v.NAKs, v.Repairs, v.RepairBytes)
	}
	if len(v.NAKSources) != len(lossy) || v.NAKSourceCount != len(lossy) {
		t.Fatalf("%s: NAK sources %+v (%d tracked), want %v", where, v.NAKSources, v.NAKSourceCount, lossy)
	}
	for _, src := range v.NAKSources {
		if !slices.Contains(lossy, src.Source) || src.NAKs == 0 || src.RepairBytes == 0 {
			t.Errorf("%s: NAK source %+v, want one of %v with NAKs and repair bytes > 0", where, src, lossy)
		}
	}
}

// metricPositive reports whether the exposition text has a sample named exactly m (name and
// labels) with a value above 0.
func metricPositive(text, m string) bool {
	for _, l := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(l, m+" "); ok {
			var f float64
			if _, err := fmt.Sscan(rest, &f); err == nil && f > 0 {
				return true
			}
		}
	}
	return false
}

// TestMulticastChannelStreamsEvicted: a channel limited to max_streams = 2,
// published to on 40 topics one after the other, forgets the streams whose
// data left its window, and says so in GET /v1/channels, herald channels
// --json and the metrics (streams_evicted_total): the copy into the view is
// the daemon's, as losses_total's was, and was missing.
func TestMulticastChannelStreamsEvicted(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app", "r1")
	const group = "239.255.78.10:7810"
	dir := t.TempDir()
	cfg := writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"},
		extra: "window = 65536\nmax_streams = 2\n"})
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "[admin]\n", "[admin]\nmetrics_listen = \"127.0.0.1:0\"\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := nw.startDaemon(t, "app", cfg)
	pub := nw.dialStomp(t, "app", d.stomp)
	count := map[string]uint64{}
	const topics = 40
	for i := 0; i < topics; i++ {
		publish(t, pub, count, []string{fmt.Sprintf("metrics.t%02d", i)}, 100, 20000)
	}
	sock := dir + "/admin.sock"
	c := admin.NewClient(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := c.Channels(ctx)
	if err != nil || len(cl.Channels) != 1 {
		t.Fatalf("GET /v1/channels: %v, %+v", err, cl)
	}
	v := cl.Channels[0]
	// 100 messages of a topic take more than a tenth of the 64 KiB window: at
	// most the last ten topics can still have data in it.
	t.Logf("streams %d, streams_evicted_total %d", v.Streams, v.StreamsEvicted)
	if v.StreamsEvicted < topics-10 || v.Streams > 10 {
		t.Errorf("GET /v1/channels: streams %d, streams_evicted_total %d; want at most 10 streams and at least %d evicted", v.Streams, v.StreamsEvicted, topics-10)
	}
	out, err := exec.Command(herald, "channels", "--json", "--socket", sock).Output()
	var cli admin.ChannelList
	if err != nil || json.Unmarshal(out, &cli) != nil || len(cli.Channels) != 1 || cli.Channels[0].StreamsEvicted != v.StreamsEvicted {
		t.Errorf("herald channels --json: %v: %s; want streams_evicted_total %d", err, out, v.StreamsEvicted)
	}
	metrics := channelMetrics(t, nw, c)
	if m := `herald_channel_streams_evicted_total{channel="metrics"}`; !metricPositive(metrics, m) {
		t.Errorf("metrics: %s missing or not positive", m)
	}
}

// channelMetrics reads the daemon's metrics, dialled from its namespace "app" (on this
// thread: net/http would dial from another).
func channelMetrics(t *testing.T, nw *mcNet, c *admin.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var metrics string
	if err := nw.in("app", func() error {
		conn, err := net.DialTimeout("tcp", st.MetricsListen, 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", st.MetricsListen)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		metrics = string(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return metrics
}
