package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/multicast"
)

func startTestServe(t *testing.T, buf int) *serveHub {
	t.Helper()
	h, err := startServe(serveConfig{addr: "127.0.0.1:0", clientBuffer: buf, maxClients: 8, group: "239.255.0.1:7400"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	return h
}

// sseReader reads server-sent events from a real HTTP response.
type sseReader struct {
	sc *bufio.Scanner
}

type sseEv struct{ typ, id, data string }

func (r *sseReader) next() (sseEv, bool) {
	var e sseEv
	var data []string
	for r.sc.Scan() {
		l := r.sc.Text()
		switch {
		case l == "":
			if data != nil || e.typ != "" {
				e.data = strings.Join(data, "\n")
				return e, true
			}
		case strings.HasPrefix(l, "event: "):
			e.typ = l[7:]
		case strings.HasPrefix(l, "id: "):
			e.id = l[4:]
		case strings.HasPrefix(l, "data: "):
			data = append(data, l[6:])
		}
	}
	return e, false
}

func openSSE(t *testing.T, h *serveHub, query string, origin string) (*http.Response, *sseReader) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+h.Addr().String()+"/events?"+query, nil)
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return resp, &sseReader{sc: sc}
}

// wsStomp is a STOMP client over a real WebSocket.
type wsStomp struct {
	t  *testing.T
	c  *websocket.Conn
	rd *stomp.Reader
}

func dialWS(t *testing.T, h *serveHub) *wsStomp {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+h.Addr().String()+"/stomp", &websocket.DialOptions{Subprotocols: []string{"v12.stomp"}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	nc := websocket.NetConn(context.Background(), c, websocket.MessageText)
	return &wsStomp{t: t, c: c, rd: stomp.NewReader(nc, stomp.Limits{})}
}

func (w *wsStomp) send(f *stomp.Frame) {
	w.t.Helper()
	if err := w.c.Write(context.Background(), websocket.MessageText, stomp.Encode(f, stomp.V12)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wsStomp) read() *stomp.Frame {
	w.t.Helper()
	for {
		f, err := w.rd.ReadFrame()
		if err != nil {
			w.t.Fatalf("read frame: %v", err)
		}
		if f != nil {
			w.rd.SetVersion(stomp.V12)
			return f
		}
	}
}

// TestListenServe: messages and gaps of the receiver reach a WebSocket STOMP subscriber and an
// SSE client (real HTTP and WebSocket on loopback), in order, only those of their patterns; a
// gap is a MESSAGE with gap-from/gap-to and an SSE "gap" event; SEND gets an ERROR; the page is
// the dashboard with the gap script; foreign origins are refused.
func TestListenServe(t *testing.T) {
	h := startTestServe(t, 1<<20)
	resp, sse := openSSE(t, h, "topic=px.>&format=json", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /events: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	ws := dialWS(t, h)
	ws.send(stomp.NewFrame(stomp.CmdConnect, "accept-version", "1.1,1.2", "host", "/"))
	if f := ws.read(); f.Command != stomp.CmdConnected || f.Get("version") != "1.2" {
		t.Fatalf("got %s %v, want CONNECTED 1.2", f.Command, f.Headers)
	}
	ws.send(stomp.NewFrame(stomp.CmdSubscribe, "id", "s1", "destination", "/topic/px.*", "receipt", "r1"))
	if f := ws.read(); f.Command != stomp.CmdReceipt || f.Get("receipt-id") != "r1" {
		t.Fatalf("got %s %v, want RECEIPT r1", f.Command, f.Headers)
	}
	for h.clientCount() < 2 {
		time.Sleep(time.Millisecond) // the SSE handler registers after its headers went out
	}
	const sess = 0x65670000aaaabbbb
	for i := uint64(1); i <= 100; i++ {
		if i >= 50 && i <= 52 {
			if i == 50 {
				h.publish(multicast.Gap{Topic: "px.eu", Stream: 1, From: 50, To: 52, Reason: multicast.ReasonExpired, Session: sess})
			}
			continue
		}
		h.publish(multicast.Message{Topic: "px.eu", Stream: 1, StreamSeq: i, Body: []byte(fmt.Sprint(i)), Session: sess,
			Headers: []multicast.Header{{Key: "n", Value: fmt.Sprint(i)}}})
		h.publish(multicast.Message{Topic: "ops.disk", Stream: 2, StreamSeq: i, Body: []byte("other"), Session: sess})
	}
	// WebSocket: 1-49, the gap 50-52, 53-100.
	for i := uint64(1); i <= 100; i++ {
		f := ws.read()
		if f.Command != stomp.CmdMessage || f.Get("subscription") != "s1" || f.Get("destination") != "/topic/px.eu" {
			t.Fatalf("frame %d: %s %v", i, f.Command, f.Headers)
		}
		if i == 50 {
			if f.Get("gap-from") != "50" || f.Get("gap-to") != "52" || f.Get("gap-reason") != "expired" || len(f.Body) != 0 {
				t.Fatalf("want the gap 50-52 expired, got %v %q", f.Headers, f.Body)
			}
			i = 52
			continue
		}
		if string(f.Body) != fmt.Sprint(i) || f.Get("n") != fmt.Sprint(i) {
			t.Fatalf("WebSocket message %d: %v %q", i, f.Headers, f.Body)
		}
	}
	// SSE: the same, as JSON, and the gap as an event of type gap.
	for i := uint64(1); i <= 100; i++ {
		e, ok := sse.next()
		if !ok {
			t.Fatalf("SSE ended at %d", i)
		}
		if i == 50 {
			var g struct {
				Topic    string
				From, To uint64
				Reason   string
			}
			if e.typ != "gap" || json.Unmarshal([]byte(e.data), &g) != nil || g.Topic != "px.eu" || g.From != 50 || g.To != 52 || g.Reason != "expired" {
				t.Fatalf("SSE event %q %q, want the gap 50-52", e.typ, e.data)
			}
			i = 52
			continue
		}
		var m struct{ Topic, Body string }
		if e.typ != "" || json.Unmarshal([]byte(e.data), &m) != nil || m.Topic != "px.eu" || m.Body != fmt.Sprint(i) {
			t.Fatalf("SSE event %d: %q %q", i, e.typ, e.data)
		}
	}
	// Read-only: a SEND gets an ERROR and the end of the connection.
	ws.send(stomp.NewFrame(stomp.CmdSend, "destination", "/topic/px.eu"))
	if f := ws.read(); f.Command != stomp.CmdError || !strings.Contains(string(f.Body), "read-only") {
		t.Fatalf("SEND: got %s %v %q, want an ERROR saying read-only", f.Command, f.Headers, f.Body)
	}
	// The page.
	pr, err := http.Get("http://" + h.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(pr.Body)
	pr.Body.Close()
	if pr.StatusCode != 200 || !bytes.Contains(page, []byte("<title>Herald</title>")) || !bytes.Contains(page, []byte(`addEventListener("gap"`)) ||
		bytes.Index(page, []byte(`addEventListener("gap"`)) > bytes.Index(page, []byte("new EventSource(")) {
		t.Errorf("GET /: %s, want the dashboard with the gap script before the page's own", pr.Status)
	}
	// Origins: the server's own is allowed, another refused (SSE and WebSocket).
	if resp, _ := openSSE(t, h, "topic=px.eu", "http://"+h.Addr().String()); resp.StatusCode != 200 {
		t.Errorf("same-origin SSE: %s", resp.Status)
	}
	if resp, _ := openSSE(t, h, "topic=px.eu", "http://evil.example"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign-origin SSE: %s, want 403", resp.Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, wr, err := websocket.Dial(ctx, "ws://"+h.Addr().String()+"/stomp", &websocket.DialOptions{
		Subprotocols: []string{"v12.stomp"}, HTTPHeader: http.Header{"Origin": {"http://evil.example"}}})
	if err == nil || wr == nil || wr.StatusCode != http.StatusForbidden {
		t.Errorf("foreign-origin WebSocket: %v, want 403", err)
	}
}

// TestListenServe_SlowClient: a client that reads nothing has at most --serve-client-buffer
// bytes queued for it; past that it is dropped with an error event naming the setting, while a
// client that reads gets everything.
func TestListenServe_SlowClient(t *testing.T) {
	const buf = 64 << 10
	h := startTestServe(t, buf)
	slow, slowSSE := openSSE(t, h, "topic=>", "")
	_, fast := openSSE(t, h, "topic=>", "")
	for h.clientCount() < 2 {
		time.Sleep(time.Millisecond)
	}
	body := bytes.Repeat([]byte("v"), 1000)
	const n = 20000 // 20 MB: far more than the sockets hold
	got := make(chan int)
	var read atomic.Int64
	go func() {
		k := 0
		for k < n {
			e, ok := fast.next()
			if !ok {
				break
			}
			if e.typ == "" {
				k++
				read.Store(int64(k))
			}
		}
		got <- k
	}()
	peak := 0
	for i := 1; i <= n; i++ {
		h.publish(multicast.Message{Topic: "a.b", Stream: 1, StreamSeq: uint64(i), Body: body})
		for deadline := time.Now().Add(5 * time.Second); int64(i)-read.Load() > 30 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Microsecond) // a publisher as fast as the reading client
		}
		peak = max(peak, h.peak())
	}
	if k := <-got; k != n {
		t.Errorf("the reading client got %d messages, want %d", k, n)
	}
	if peak > buf {
		t.Errorf("a client had %d bytes queued, bound %d", peak, buf)
	}
	// The slow client now reads: what was sent before the drop, then the error, then the end.
	var last sseEv
	msgs := 0
	for {
		e, ok := slowSSE.next()
		if !ok {
			break
		}
		if e.typ == "" {
			msgs++
		}
		last = e
	}
	slow.Body.Close()
	if last.typ != "error" || !strings.Contains(last.data, "--serve-client-buffer") || msgs >= n {
		t.Errorf("slow client: %d messages then %q %q, want fewer than %d and an error naming --serve-client-buffer", msgs, last.typ, last.data, n)
	}
}
