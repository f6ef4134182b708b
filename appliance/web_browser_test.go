package appliance_test

import (
	"context"
	"fmt"
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

// The built-in dashboard at / in headless Chromium: it lists the live
// topic and shows the latest value of a Graphite plaintext series and of
// a JSON field published from Go. With HERALD_TEST_ARTIFACTS set, a
// screenshot is saved there.
func TestWeb_BrowserDashboard(t *testing.T) {
	ctx := chromium(t)
	tb := mustStartBroker(t, nil)
	addr := startWeb(t, tb, nil)
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/?topic=metrics.>")); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, ctx, 20*time.Second, "its event stream open", `document.body.dataset.state === "live"`)
	p := tb.Dial(t)
	cctx := ctxT(t)
	for i, body := range []string{
		"servers.web1.cpu 41.5 1700000000\nservers.web1.mem 2048 1700000000",
		"servers.web1.cpu 42.5 1700000010",
		`{"temp": 21.25, "label": "hall"}`,
	} {
		topic := "/topic/metrics.web1"
		if i == 2 {
			topic = "/topic/metrics.room"
		}
		if _, err := p.SendReceipt(cctx, topic, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	cell := func(series string) string {
		return fmt.Sprintf(`(document.querySelector('tr[data-series="%s"] td.value') || {}).textContent`, series)
	}
	evalUntil(t, ctx, 10*time.Second, "the latest values in its table",
		cell("servers.web1.cpu")+` === "42.5" && `+cell("servers.web1.mem")+` === "2048" && `+cell("metrics.room.temp")+` === "21.25"`)
	evalUntil(t, ctx, 10*time.Second, "the live topics listed",
		`!!document.querySelector('tr[data-topic="metrics.web1"]') && !!document.querySelector('tr[data-topic="metrics.room"]')`)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#values tbody tr").length`)); err != nil || n != 3 {
		t.Fatalf("%d rows in the values table (%v), want 3 (the non-numeric label field is not a series)", n, err)
	}
	if dir := os.Getenv("HERALD_TEST_ARTIFACTS"); dir != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "dashboard.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
