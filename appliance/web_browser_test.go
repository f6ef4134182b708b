package appliance_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/testenv"
)

// chromium starts a headless Chromium (Debian's chromium package) for the
// test and returns a browser context; it skips (fails under
// HERALD_REQUIRE_INTEROP=1) when Chromium is not installed.
func chromium(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		testenv.Missing(t, testenv.InteropEnv, "needs Chromium to run a real browser: apt-get install chromium")
		return nil
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // as root Chromium refuses to start with its sandbox
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancelC(); cancelA() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// evalUntil evaluates expr in the page until it is true, then returns.
func evalUntil(t *testing.T, ctx context.Context, d time.Duration, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			log, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(window.logs||[]).join("\n")`))
			t.Fatalf("the page did not get %s within %s; its log:\n%s", what, d, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stompjsPage subscribes with @stomp/stompjs to a topic (auto) and a queue
// (client-individual, each message acked with a receipt), and sends one
// message with a receipt. window.state records what happened.
const stompjsPage = `<!doctype html>
<meta charset="utf-8"><title>stompjs</title>
<script src="/stomp.umd.min.js"></script>
<pre id="out"></pre>
<script>
window.logs = [];
window.state = {connected: false, subscribed: 0, topic: [], queue: [], acked: 0, sendReceipt: false, error: ""};
const st = window.state;
const client = new StompJs.Client({
  brokerURL: "ws://" + location.host + "/stomp",
  connectHeaders: {login: "alice", passcode: "right"},
  reconnectDelay: 0,
  heartbeatIncoming: 1000,
  heartbeatOutgoing: 1000,
  debug: (s) => window.logs.push(s),
});
client.onStompError = (f) => { st.error = f.headers.message + " " + f.body; };
client.onWebSocketError = () => { st.error = st.error || "websocket error"; };
client.onConnect = () => {
  st.connected = true;
  const r1 = "sub-topic", r2 = "sub-queue", r3 = "send";
  client.watchForReceipt(r1, () => st.subscribed++);
  client.watchForReceipt(r2, () => st.subscribed++);
  client.subscribe("/topic/browser.values", (m) => {
    st.topic.push(m.body);
    document.getElementById("out").textContent += m.body + "\n";
  }, {receipt: r1});
  client.subscribe("/queue/browser.jobs", (m) => {
    st.queue.push(m.body);
    const r = "ack-" + st.queue.length;
    client.watchForReceipt(r, () => st.acked++);
    m.ack({receipt: r});
  }, {ack: "client-individual", receipt: r2});
  client.watchForReceipt(r3, () => st.sendReceipt = true);
  client.publish({destination: "/queue/from.browser", body: "hello from " + navigator.userAgent.split(" ")[0], headers: {receipt: r3}});
};
client.activate();
</script>`

// A real browser: @stomp/stompjs (vendored in testdata/stompjs) in
// headless Chromium subscribes to a topic and a queue over /stomp with a
// login, sends with a receipt, acks each queue message with a receipt, and
// receives what Go publishes over TCP, in order.
func TestWeb_BrowserStompJS(t *testing.T) {
	ctx := chromium(t)
	tb := authBroker(t, "[users.alice]\npassword = \"{pw:right}\"\nread = [\"/topic/>\", \"/queue/>\"]\nwrite = [\"/topic/>\", \"/queue/>\"]\ncreate = [\"/queue/>\"]\n", nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, stompjsPage)
	})
	mux.HandleFunc("/stomp.umd.min.js", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join("testdata", "stompjs", "stomp.umd.min.js"))
	})
	addr := startWeb(t, tb, mux)
	if _, err := os.Stat(filepath.Join("testdata", "stompjs", "stomp.umd.min.js")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, ctx, 20*time.Second, "both subscription receipts", `window.state.subscribed === 2 || window.state.error !== ""`)
	if errText, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`window.state.error`)); errText != "" {
		t.Fatalf("page error: %s", errText)
	}
	evalUntil(t, ctx, 10*time.Second, "the receipt of its SEND", `window.state.sendReceipt`)

	pub, err := dialAs(tb.Addr, "alice", "right")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	cctx := ctxT(t)
	// What the browser sent is on its queue.
	in, err := pub.SubscribeReceipt(cctx, "/queue/from.browser", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if m := recv(t, in); len(m.Body) < len("hello from ") || string(m.Body[:11]) != "hello from " {
		t.Fatalf("browser's message %q", m.Body)
	}
	const n = 50
	for i := range n {
		if _, err := pub.SendReceipt(cctx, "/topic/browser.values", fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := pub.SendReceipt(cctx, "/queue/browser.jobs", fmt.Appendf(nil, "job%d", i), stomp.Header{Key: "persistent", Value: "true"}); err != nil {
			t.Fatal(err)
		}
	}
	evalUntil(t, ctx, 20*time.Second, fmt.Sprintf("%d topic and %d queue messages, every ack receipted", n, n),
		fmt.Sprintf(`window.state.topic.length >= %d && window.state.queue.length >= %d && window.state.acked >= %d`, n, n, n))
	got, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
		Topic []string `json:"topic"`
		Queue []string `json:"queue"`
		Acked int      `json:"acked"`
	}](`window.state`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Topic) != n || len(got.Queue) != n || got.Acked != n {
		t.Fatalf("page got %d topic, %d queue messages, %d ack receipts; want %d each", len(got.Topic), len(got.Queue), got.Acked, n)
	}
	for i := range n {
		if got.Topic[i] != fmt.Sprintf("v%d", i) || got.Queue[i] != fmt.Sprintf("job%d", i) {
			t.Fatalf("message %d: topic %q, queue %q (out of order or lost)", i, got.Topic[i], got.Queue[i])
		}
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("out").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("v%d", n-1); !containsLine(text, want) {
		t.Fatalf("the page's DOM does not show %s:\n%s", want, text)
	}
	// Every ack reached the broker: the queue is empty.
	waitQueue(t, tb, "browser.jobs", "empty after the browser's acks", func(v appliance.QueueView) bool { return v.Messages == 0 })
}

func containsLine(text, line string) bool {
	for _, l := range splitLines(text) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// The built-in dashboard at / in headless Chromium: its charts (uPlot)
// are full at once from topic history, before any live message; it then
// shows the latest value of Graphite plaintext series and of a JSON field
// published from Go, lists the live topics, and its overview page lists
// queues and topics. With HERALD_TEST_ARTIFACTS set, a screenshot is saved
// there (docs/dashboard.png is one).
func TestWeb_BrowserDashboard(t *testing.T) {
	ctx := chromium(t)
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.History = []appliance.TopicHistoryRule{{Match: "metrics.>", Keep: 600}}
	})
	addr := startWeb(t, tb, nil)
	p := tb.Dial(t)
	cctx := ctxT(t)
	// 40 points of history per series, a minute apart, ending now.
	const points = 40
	now := time.Now().Unix()
	for i := 0; i < points; i++ {
		ts := now - int64(points-1-i)*60
		x := float64(i)
		cpu1 := 40 + 15*math.Sin(x/5)
		cpu2 := 55 + 10*math.Cos(x/7)
		body := fmt.Sprintf("servers.web1.cpu %.1f %d\nservers.web2.cpu %.1f %d", cpu1, ts, cpu2, ts)
		if _, err := p.SendReceipt(cctx, "/topic/metrics.web", []byte(body)); err != nil {
			t.Fatal(err)
		}
		if _, err := p.SendReceipt(cctx, "/topic/metrics.room", fmt.Appendf(nil, `{"temp": %.2f, "label": "hall", "time": %d}`, 20+math.Sin(x/9), ts)); err != nil {
			t.Fatal(err)
		}
	}
	// A queue for the overview.
	if _, err := p.SendReceipt(cctx, "/queue/jobs", []byte("j")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1400, 800), chromedp.Navigate("http://"+addr+"/?topic=metrics.>")); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, ctx, 20*time.Second, "its event stream open", `document.body.dataset.state === "live"`)
	card := func(series string) string {
		return fmt.Sprintf(`document.querySelector('.card[data-series="%s"]')`, series)
	}
	full := fmt.Sprintf(`["servers.web1.cpu", "servers.web2.cpu", "metrics.room.temp"].every(s => { const c = document.querySelector('.card[data-series="' + s + '"]'); return c && c.dataset.points === "%d" && c.querySelector("canvas"); })`, points)
	evalUntil(t, ctx, 10*time.Second, "three charts drawn full from history", full)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
		History int `json:"history"`
		Live    int `json:"live"`
	}](`window.dashboard`))
	if err != nil {
		t.Fatal(err)
	}
	if got.History != 2*points || got.Live != 0 {
		t.Fatalf("the page got %d history and %d live messages, want %d and 0", got.History, got.Live, 2*points)
	}
	temps, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`window.dashboard.series.get("metrics.room.temp").ys`))
	if err != nil || len(temps) != points {
		t.Fatalf("metrics.room.temp points %v (%v)", temps, err)
	}
	for i, v := range temps {
		if want := math.Round((20+math.Sin(float64(i)/9))*100) / 100; v != want {
			t.Fatalf("metrics.room.temp point %d is %v, want %v (out of order or lost): %v", i, v, want, temps)
		}
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#cards .card").length`)); err != nil || n != 3 {
		t.Fatalf("%d charts (%v), want 3 (neither the non-numeric label field nor the time field is a series)", n, err)
	}
	// The canvas was drawn on: some pixels are not the background.
	painted, err := chromedp.Run(ctx, chromedp.Evaluate[bool](card("servers.web1.cpu")+`.querySelector("canvas").getContext("2d").getImageData(0, 0, 400, 100).data.some((v, i) => i % 4 === 3 && v > 0)`))
	if err != nil || !painted {
		t.Fatalf("the chart's canvas is blank (%v)", err)
	}
	// Live: the latest values, one more point.
	for _, m := range []struct{ topic, body string }{
		{"/topic/metrics.web", fmt.Sprintf("servers.web1.cpu 42.5 %d\nservers.web2.cpu 50 %d", now+60, now+60)},
		{"/topic/metrics.room", fmt.Sprintf(`{"temp": 21.25, "label": "hall", "time": %d}`, now+60)},
	} {
		if _, err := p.SendReceipt(cctx, m.topic, []byte(m.body)); err != nil {
			t.Fatal(err)
		}
	}
	value := func(series string) string { return card(series) + `.querySelector(".value").textContent` }
	evalUntil(t, ctx, 10*time.Second, "the latest values on its charts",
		value("servers.web1.cpu")+` === "42.5" && `+value("metrics.room.temp")+` === "21.25" && `+card("servers.web1.cpu")+fmt.Sprintf(`.dataset.points === "%d"`, points+1))
	evalUntil(t, ctx, 10*time.Second, "the live topics listed",
		`!!document.querySelector('#topics tr[data-topic="metrics.web"]') && !!document.querySelector('#topics tr[data-topic="metrics.room"]')`)
	if dir := os.Getenv("HERALD_TEST_ARTIFACTS"); dir != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The overview page: queues and topics with their figures.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`location.hash = "#overview"; true`)); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, ctx, 15*time.Second, "the overview of queues and topics",
		`!document.getElementById("overview").hidden && !!document.querySelector('#ov-queues tr[data-queue="jobs"]') && !!document.querySelector('#ov-topics tr[data-topic="metrics.room"]')`)
}
