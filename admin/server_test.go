package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestAPI_Endpoints walks every endpoint of docs/admin-api.md with its
// status codes and error bodies.
func TestAPI_Endpoints(t *testing.T) {
	d := admintest.Start(t, nil)
	c := admin.NewClient(d.Socket)
	defer c.Close()
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/jobs", 5, "job-")
	ctx := ctxT(t)
	// With a receipt: the topic is known once it comes (an unreceipted
	// SEND raced the topic list below on a loaded machine).
	if _, err := conn.SendReceipt(ctx, "/topic/prices", []byte("1.5")); err != nil {
		t.Fatal(err)
	}
	raw := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
		}}}
		req, _ := http.NewRequestWithContext(ctx, method, "http://herald"+path, strings.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
		}
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("%s %s: body: %v", method, path, err)
		}
		return resp.StatusCode, m
	}
	errorCases := []struct {
		method, path, body string
		status             int
		error              string
	}{
		{"GET", "/v1/queues/nope", "", 404, "no such queue"},
		{"GET", "/v1/queues/nope/messages", "", 404, "no such queue"},
		{"POST", "/v1/queues/nope/purge", "", 404, "no such queue"},
		{"DELETE", "/v1/queues/nope", "", 404, "no such queue"},
		{"GET", "/v1/queues/jobs/messages?limit=x", "", 400, "bad limit"},
		{"GET", "/v1/queues/jobs/messages?limit=5000", "", 400, "too large"},
		{"POST", "/v1/queues/jobs/requeue?max=-1", "", 400, "bad max"},
		{"DELETE", "/v1/connections/abc", "", 400, "bad connection id"},
		{"DELETE", "/v1/connections/999999", "", 404, "no connection 999999"},
		{"PUT", "/v1/log-level", `{"level":"loud"}`, 400, "unknown log level"},
		{"PUT", "/v1/log-level", `{"lvl":"debug"}`, 400, "bad request body"},
		{"POST", "/v1/backup", `{"path":"rel.db"}`, 400, "not absolute"},
		{"POST", "/v1/backup", `{"path":"/nonexistent/dir/x.db"}`, 400, "does not exist"},
		{"POST", "/v1/status", "", 405, "not allowed"},
		{"GET", "/v1/nothing", "", 404, "no endpoint"},
	}
	for _, tc := range errorCases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			status, body := raw(tc.method, tc.path, tc.body)
			if status != tc.status {
				t.Errorf("status: got %d, want %d (%v)", status, tc.status, body)
			}
			e, _ := body["error"].(string)
			h, _ := body["hint"].(string)
			if !strings.Contains(e, tc.error) || h == "" {
				t.Errorf("body: got %v, want error containing %q and a hint", body, tc.error)
			}
		})
	}

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "test" || !st.Ready || st.Queues != 1 || st.Messages != 5 || st.Journal == nil || st.Journal.Commits == 0 || len(st.Listeners) != 1 || st.Listeners[0] != d.STOMP {
		t.Errorf("status: got %+v", st)
	}
	if err := c.Ready(ctx); err != nil {
		t.Errorf("ready: %v", err)
	}
	p, err := c.Peek(ctx, "jobs", 3)
	if err != nil || len(p.Messages) != 3 || p.Messages[0].Body != "job-0" || p.Messages[2].Body != "job-2" || p.Messages[0].ID >= p.Messages[1].ID {
		t.Errorf("peek: got %+v, %v; want job-0..job-2 in order", p, err)
	}
	tl, err := c.Topics(ctx)
	if err != nil || len(tl.Topics) != 1 || tl.Topics[0].Name != "prices" {
		t.Errorf("topics: got %+v, %v", tl, err)
	}
	chl, err := c.Channels(ctx)
	if err != nil || chl.Channels == nil || len(chl.Channels) != 0 {
		t.Errorf("channels: got %+v, %v; want an empty list", chl, err)
	}
	d.Server.SetChannels(fakeChannels{{Name: "dash", Group: "239.1.2.3:7400", Messages: 7}})
	if chl, err = c.Channels(ctx); err != nil || len(chl.Channels) != 1 || chl.Channels[0].Messages != 7 {
		t.Errorf("channels after SetChannels: got %+v, %v", chl, err)
	}
	cl, err := c.Connections(ctx)
	if err != nil || len(cl.Connections) != 1 {
		t.Fatalf("connections: got %+v, %v", cl, err)
	}
	if _, err := c.CloseConnection(ctx, cl.Connections[0].ID, "test over"); err != nil {
		t.Errorf("close connection: %v", err)
	}
	select {
	case <-conn.Done():
	case <-time.After(5 * time.Second):
		t.Errorf("connection still open after DELETE /v1/connections/{id}")
	}
	cfg, err := c.Config(ctx)
	if err != nil || cfg.DataDir != d.Dir || cfg.Admin.Socket != d.Socket {
		t.Errorf("config: got %+v, %v", cfg, err)
	}
	lv, err := c.SetLogLevel(ctx, "debug")
	if err != nil || lv.Level != "debug" || lv.Previous != "info" || d.Level.Level().String() != "DEBUG" {
		t.Errorf("set log level: got %+v, %v (daemon at %s)", lv, err, d.Level.Level())
	}
	op, err := c.Purge(ctx, "jobs")
	if err != nil || op.Purged == nil || *op.Purged != 5 {
		t.Errorf("purge: got %+v, %v; want 5 purged", op, err)
	}
	op, err = c.DeleteQueue(ctx, "jobs")
	if err != nil || op.Deleted == nil {
		t.Errorf("delete: got %+v, %v", op, err)
	}
	var ae *admin.APIError
	if _, err := c.Queue(ctx, "jobs"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("queue after delete: got %v, want a 404 APIError", err)
	}
}

type fakeChannels []admin.ChannelView

func (f fakeChannels) Channels() []admin.ChannelView { return f }

// TestAPI_QueueBusyAndRequeue: DELETE of a consumed queue is 409; requeue
// moves dead letters back.
func TestAPI_QueueBusyAndRequeue(t *testing.T) {
	d := admintest.Start(t, nil)
	c := admin.NewClient(d.Socket)
	defer c.Close()
	ctx := ctxT(t)
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/work", 3, "w")
	sub, err := conn.SubscribeReceipt(ctx, "/queue/work", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	// The RECEIPT for SUBSCRIBE is queued before the broker registers the
	// consumer: the first delivery is what shows it registered.
	var msgs []*stomp.Frame
	for range 3 {
		select {
		case f := <-sub.C():
			msgs = append(msgs, f)
		case <-time.After(5 * time.Second):
			t.Fatal("no delivery")
		}
		if len(msgs) == 1 {
			var ae *admin.APIError
			if _, err := c.DeleteQueue(ctx, "work"); !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Hint == "" {
				t.Errorf("delete with a consumer: got %v, want 409 with a hint", err)
			}
		}
	}
	for _, f := range msgs {
		nack := stomp.NewFrame(stomp.CmdNack, "id", f.Get("ack"), "requeue", "false")
		if err := conn.Write(nack); err != nil {
			t.Fatal(err)
		}
	}
	sub.Unsubscribe(ctx)
	waitFor(t, func() bool { q, err := c.Queue(ctx, "work"); return err == nil && q.DLQDepth == 3 })
	op, err := c.Requeue(ctx, "work", 2)
	if err != nil || op.Requeued == nil || *op.Requeued != 2 || op.DLQ != "DLQ.work" {
		t.Fatalf("requeue: got %+v, %v; want 2 from DLQ.work", op, err)
	}
	q, _ := c.Queue(ctx, "work")
	if q.Messages != 2 || q.DLQDepth != 1 {
		t.Errorf("after requeue: got %d messages, DLQ %d; want 2 and 1", q.Messages, q.DLQDepth)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServer_Socket: mode 0660; a stale socket is replaced; a live one and
// a regular file are refused; Close removes it.
func TestServer_Socket(t *testing.T) {
	d := admintest.Start(t, nil)
	fi, err := os.Stat(d.Socket)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket: got %v %v, want a socket with mode 0660", fi.Mode(), err)
	}
	other := admin.New(admin.Options{Socket: d.Socket, Broker: d.Broker})
	if err := other.Start(context.Background()); !errors.Is(err, admin.ErrSocketInUse) {
		t.Errorf("second server on a live socket: got %v, want ErrSocketInUse", err)
	}
	if _, err := os.Stat(d.Socket); err != nil {
		t.Errorf("live socket removed by the refused server: %v", err)
	}

	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody answers: a dead daemon's socket
	s := admin.New(admin.Options{Socket: stale, Broker: d.Broker})
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("start over a stale socket: %v", err)
	}
	if err := admin.NewClient(stale).Ready(ctxT(t)); err != nil {
		t.Errorf("ready over the replaced socket: %v", err)
	}
	s.Close(context.Background())
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Close: got %v, want removed", err)
	}

	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("keep me"), 0o600)
	if err := admin.New(admin.Options{Socket: file, Broker: d.Broker}).Start(context.Background()); !errors.Is(err, admin.ErrNotSocket) {
		t.Errorf("regular file at the socket path: got %v, want ErrNotSocket", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Errorf("regular file changed: %q", b)
	}
}

// TestMetrics_Scrape: /metrics figures follow the traffic; /healthz
// answers; nothing of the admin API is served over TCP.
func TestMetrics_Scrape(t *testing.T) {
	d := admintest.Start(t, nil)
	base := "http://" + d.Metrics
	scrape := func() map[string]float64 {
		t.Helper()
		return scrapeMetrics(t, base)
	}
	before := scrape()
	if before[`herald_build_info{goversion="`+goVersion(before)+`",version="test"}`] != 1 {
		t.Errorf("herald_build_info missing")
	}
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/m", 20, "x")
	sub, err := conn.SubscribeReceipt(ctxT(t), "/topic/t.>", "auto")
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		conn.Send("/topic/t.a", []byte("v"))
		<-sub.C()
	}
	q, err := conn.SubscribeReceipt(ctxT(t), "/queue/m", "client-individual", stomp.Header{Key: "prefetch-count", Value: "3"})
	if err != nil {
		t.Fatal(err)
	}
	var held []*stomp.Frame
	for range 3 {
		held = append(held, <-q.C())
	}
	waitFor(t, func() bool { return scrape()[`herald_queue_in_flight_messages{queue="m"}`] == 3 })
	after := scrape()
	checks := []struct {
		name string
		want float64
	}{
		{`herald_queue_messages{queue="m"}`, 20},
		{`herald_queue_enqueued_total{queue="m"}`, 20},
		{`herald_queue_deliveries_total{queue="m"}`, 3},
		{`herald_queue_consumers{queue="m"}`, 1},
		{`herald_queue_dlq_messages{queue="m"}`, 0},
		{`herald_connections`, 1},
		{`herald_topic_messages_in_total{topic="t.a"}`, 4},
		{`herald_topic_subscribers{topic="t.>"}`, 1},
		{`herald_journal_read_errors_total`, 0}, // exported; no read failed
	}
	for _, c := range checks {
		if got, ok := after[c.name]; !ok || got != c.want {
			t.Errorf("%s: got %v (present %v), want %v", c.name, got, ok, c.want)
		}
	}
	// (20 SENDs, each waiting for its receipt: committed by the connection.)
	for _, name := range []string{"herald_journal_commit_duration_seconds_count", "herald_journal_batch_operations_count", "herald_journal_commits_total", "herald_journal_inline_commits_total", "herald_journal_wal_bytes"} {
		if after[name] <= before[name] && !(name == "herald_journal_wal_bytes" && after[name] > 0) {
			t.Errorf("%s: got %v after traffic, was %v; want it to grow", name, after[name], before[name])
		}
	}
	if after[`herald_queue_oldest_message_age_seconds{queue="m"}`] <= 0 {
		t.Errorf("oldest message age: got %v, want > 0", after[`herald_queue_oldest_message_age_seconds{queue="m"}`])
	}

	// Stale ACKs and NACKs are counted: in total, and per queue when they
	// carry the token of an older delivery attempt.
	ackReq := func(cmd, token string) {
		t.Helper()
		if _, err := conn.Request(ctxT(t), stomp.NewFrame(cmd, "id", token)); err != nil {
			t.Fatalf("%s %s: got %v, want a RECEIPT", cmd, token, err)
		}
	}
	const total, perQueue = `herald_stale_acks_total`, `herald_queue_stale_acks_total{queue="m"}`
	ackReq("NACK", held[0].Get("ack"))
	ackReq("ACK", held[1].Get("ack"))
	ackReq("ACK", held[1].Get("ack")) // again: it names no held message
	if got := scrape()[total] - after[total]; got != 1 {
		t.Errorf("%s rose by %v after one ACK of an acked message, want 1", total, got)
	}
	// Take the NACKed message's second attempt, acking what comes before.
	var again *stomp.Frame
	for again == nil {
		select {
		case m := <-q.C():
			if string(m.Body) == string(held[0].Body) {
				again = m
			} else {
				ackReq("ACK", m.Get("ack"))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("NACKed %q not redelivered within 10s", held[0].Body)
		}
	}
	before = scrape()
	ackReq("ACK", held[0].Get("ack")) // the first attempt's token
	ackReq("NACK", held[0].Get("ack"))
	stale := scrape()
	for _, name := range []string{total, perQueue} {
		if got := stale[name] - before[name]; got != 2 {
			t.Errorf("%s rose by %v after an ACK and a NACK of an older attempt, want 2", name, got)
		}
	}
	const acked = `herald_queue_acked_total{queue="m"}`
	if _, ok := stale[acked]; !ok || stale[acked] != before[acked] {
		t.Errorf("stale ACK applied: %s went from %v to %v (present %v), want unchanged", acked, before[acked], stale[acked], ok)
	}

	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Errorf("/healthz: got %d %q, want 200 ok", resp.StatusCode, b)
	}
	for _, p := range []string{"/v1/status", "/v1/queues", "/v1/config"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s over TCP: got %d, want 404", p, resp.StatusCode)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		req, _ := http.NewRequest(m, base+"/v1/queues/m/purge", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("%s over TCP: got %d, want an error", m, resp.StatusCode)
		}
	}
}

// scrapeMetrics reads base/metrics into series name (with labels) -> value.
func scrapeMetrics(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	re := regexp.MustCompile(`^([a-z_]+(?:\{[^}]*\})?) (\S+)$`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			out[m[1]] = v
		}
	}
	return out
}

// TestMetrics_SlowSubscriberDrops: a topic subscriber that stops reading is
// dropped once its buffer is full, and the drop shows in the metrics:
// herald_slow_subscriber_drops_total rises by exactly 1, the topic's counter
// by at least 1.
func TestMetrics_SlowSubscriberDrops(t *testing.T) {
	d := admintest.Start(t, func(c *appliance.Config) { c.Topics.SubscriberBuffer = 16 })
	base := "http://" + d.Metrics
	before := scrapeMetrics(t, base)
	// A subscriber that never reads its socket.
	nc, err := net.Dial("tcp", d.STOMP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r := stomp.NewReader(nc, stomp.Limits{})
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(nc, "CONNECT\naccept-version:1.2\nhost:x\n\n\x00SUBSCRIBE\nid:1\ndestination:/topic/flood\nreceipt:sub\n\n\x00")
	for _, want := range []string{stomp.CmdConnected, stomp.CmdReceipt} {
		var f *stomp.Frame
		for f == nil && err == nil {
			f, err = r.ReadFrame()
		}
		if err != nil || f.Command != want {
			t.Fatalf("slow subscriber: got %v (err %v), want %s", f, err, want)
		}
		if want == stomp.CmdConnected {
			r.SetVersion(f.Get("version"))
		}
	}
	pub := d.Dial(t)
	body := []byte(strings.Repeat("f", 32<<10))
	const total, dropped = `herald_slow_subscriber_drops_total`, `herald_topic_slow_subscriber_drops_total{topic="flood"}`
	// Publish until the drop shows: at most 2,000 messages (64 MiB), far
	// more than the buffer and the socket buffers hold.
	for i := 0; scrapeMetrics(t, base)[total] == before[total]; i++ {
		if i == 2000 {
			t.Fatalf("%s still %v after 2000 messages of 32 KiB to a subscriber that never reads", total, before[total])
		}
		if _, err := pub.SendReceipt(ctxT(t), "/topic/flood", body); err != nil {
			t.Fatal(err)
		}
	}
	// A few more: the subscriber is already dropped, not dropped again.
	for range 20 {
		if _, err := pub.SendReceipt(ctxT(t), "/topic/flood", body); err != nil {
			t.Fatal(err)
		}
	}
	after := scrapeMetrics(t, base)
	if got := after[total] - before[total]; got != 1 {
		t.Errorf("%s rose by %v, want 1 (one slow subscriber dropped)", total, got)
	}
	if after[dropped] < 1 {
		t.Errorf("%s: got %v, want at least 1", dropped, after[dropped])
	}
}

func goVersion(m map[string]float64) string {
	for k := range m {
		if strings.HasPrefix(k, "herald_build_info{") {
			if i := strings.Index(k, `goversion="`); i >= 0 {
				rest := k[i+len(`goversion="`):]
				return rest[:strings.IndexByte(rest, '"')]
			}
		}
	}
	return "?"
}

// TestAPI_Backup streams progress lines then a result, and refuses an
// existing destination.
func TestAPI_Backup(t *testing.T) {
	d := admintest.Start(t, nil)
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/b", 10, "m")
	c := admin.NewClient(d.Socket)
	defer c.Close()
	dest := filepath.Join(t.TempDir(), "copy.db")
	var progress int
	res, err := c.Backup(ctxT(t), dest, func(admin.BackupEvent) { progress++ })
	if err != nil || res.Type != "result" || res.Path != dest || res.Bytes == 0 || progress == 0 {
		t.Fatalf("backup: got %+v (%d progress events), %v", res, progress, err)
	}
	var ae *admin.APIError
	if _, err := c.Backup(ctxT(t), dest, nil); !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Errorf("backup over an existing file: got %v, want 409", err)
	}
}
