package appliance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// sseEvent is one parsed server-sent event, or a comment.
type sseEv struct {
	id, event, data, comment string
}

// sseStream reads events from an /events response.
type sseStream struct {
	resp *http.Response
	r    *bufio.Reader
}

// openSSE GETs /events?QUERY with headers h and returns the response (the
// caller checks its status) and, on 200, a reader past the opening
// comment (sent once the subscription stands).
func openSSE(t *testing.T, addr, query string, h http.Header, hc *http.Client) (*http.Response, *sseStream) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+"/events?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return resp, nil
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}
	s := &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
	if ev := s.next(t); !strings.HasPrefix(ev.comment, "herald: topic ") {
		t.Fatalf("first event %+v, want the opening comment", ev)
	}
	return resp, s
}

// next reads one event (or comment block), failing t after 10 s.
func (s *sseStream) next(t *testing.T) sseEv {
	t.Helper()
	type res struct {
		ev  sseEv
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var ev sseEv
		var data []string
		seen := false
		for {
			line, err := s.r.ReadString('\n')
			if err != nil {
				ch <- res{err: err}
				return
			}
			line = strings.TrimSuffix(line, "\n")
			if line == "" {
				if !seen {
					continue
				}
				ev.data = strings.Join(data, "\n")
				ch <- res{ev: ev}
				return
			}
			seen = true
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "":
				if ev.comment != "" {
					ev.comment += "\n"
				}
				ev.comment += v
			case "id":
				ev.id = v
			case "event":
				ev.event = v
			case "data":
				data = append(data, v)
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("reading the event stream: %v", r.err)
		}
		return r.ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return sseEv{}
}

// nextEvent skips heart-beat comments.
func (s *sseStream) nextEvent(t *testing.T) sseEv {
	t.Helper()
	for {
		ev := s.next(t)
		if ev.data != "" || ev.event != "" || ev.id != "" {
			return ev
		}
	}
}

func TestWeb_SSE_Stream(t *testing.T) {
	tb := mustStartBroker(t, nil)
	addr := startWeb(t, tb, nil)
	_, s := openSSE(t, addr, "topic=sse.>", nil, nil)
	_, sj := openSSE(t, addr, "topic=/topic/sse.*&format=json", nil, nil)
	p := tb.Dial(t)
	ctx := ctxT(t)
	bodies := []string{"cpu.load 0.5 1700000000", "two\nlines", "three\r\nlines\rcr"}
	for i, b := range bodies {
		if _, err := p.SendReceipt(ctx, fmt.Sprintf("/topic/sse.t%d", i), []byte(b), hdr("unit", "s")); err != nil {
			t.Fatal(err)
		}
	}
	last := uint64(0)
	for i, b := range bodies {
		ev := s.nextEvent(t)
		want := strings.ReplaceAll(strings.ReplaceAll(b, "\r\n", "\n"), "\r", "\n")
		if ev.data != want {
			t.Fatalf("event %d data %q, want %q", i, ev.data, want)
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(ev.id, "t"), 10, 64)
		if err != nil || !strings.HasPrefix(ev.id, "t") || n <= last {
			t.Fatalf("event %d id %q after t%d: want t and a rising sequence", i, ev.id, last)
		}
		last = n
		je := sj.nextEvent(t)
		var j struct {
			Topic, ID, Body string
			Headers         map[string]string
		}
		if err := json.Unmarshal([]byte(je.data), &j); err != nil {
			t.Fatalf("json event %q: %v", je.data, err)
		}
		if j.Topic != fmt.Sprintf("sse.t%d", i) || j.Body != b || j.ID != ev.id || j.Headers["unit"] != "s" || je.id != ev.id {
			t.Fatalf("json event %+v (id %s), want topic sse.t%d, body %q, id %s, header unit", j, je.id, i, b, ev.id)
		}
	}

	// Last-Event-ID: no history to resume from, said in a comment.
	for _, q := range []string{"", "topic=", "topic=a..b", "topic=sse.x&format=xml"} {
		resp, err := http.Get("http://" + addr + "/events?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("query %q: %d %s, want 400", q, resp.StatusCode, body)
		}
	}
}

func TestWeb_SSE_ResumeSaysNoHistory(t *testing.T) {
	tb := mustStartBroker(t, nil)
	addr := startWeb(t, tb, nil)
	req, _ := http.NewRequest("GET", "http://"+addr+"/events?topic=r", nil)
	req.Header.Set("Last-Event-ID", "t41")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
	ev := s.next(t)
	if !strings.Contains(ev.comment, "resuming from now") || !strings.Contains(ev.comment, "t41") {
		t.Fatalf("opening comment %q: want it to say the stream resumes from now, after t41", ev.comment)
	}
}

func TestWeb_SSE_HeartBeat(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Web.SSEHeartbeat = appliance.Duration{Duration: 100 * time.Millisecond} })
	addr := startWeb(t, tb, nil)
	_, s := openSSE(t, addr, "topic=quiet", nil, nil)
	for range 3 {
		if ev := s.next(t); ev.data != "" || ev.id != "" {
			t.Fatalf("got %+v on a quiet topic, want heart-beat comments", ev)
		}
	}
}

func TestWeb_SSE_AuthAndOrigin(t *testing.T) {
	tb := authBroker(t, "[users.alice]\npassword = \"{pw:right}\"\nread = [\"/topic/ok.>\"]\n[users.pub]\npassword = \"{pw:p}\"\nwrite = [\"/topic/>\"]\n", func(c *appliance.Config) {
		c.Web.AllowedOrigins = []string{"https://dash.example"}
	})
	addr := startWeb(t, tb, nil)
	basic := func(u, p string) http.Header {
		r, _ := http.NewRequest("GET", "/", nil)
		r.SetBasicAuth(u, p)
		return r.Header
	}
	for _, tc := range []struct {
		what  string
		query string
		h     http.Header
		code  int
	}{
		{"no login, anonymous not allowed", "topic=ok.a", nil, http.StatusUnauthorized},
		{"wrong password", "topic=ok.a", basic("alice", "wrong"), http.StatusUnauthorized},
		{"no read permission", "topic=secret", basic("alice", "right"), http.StatusForbidden},
		{"foreign origin", "topic=ok.a", merge(basic("alice", "right"), http.Header{"Origin": {"https://evil.example"}}), http.StatusForbidden},
		{"allowed", "topic=ok.a", basic("alice", "right"), http.StatusOK},
		{"allowed origin", "topic=ok.>", merge(basic("alice", "right"), http.Header{"Origin": {"https://dash.example"}}), http.StatusOK},
	} {
		resp, s := openSSE(t, addr, tc.query, tc.h, nil)
		if resp.StatusCode != tc.code {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s: %d %s, want %d", tc.what, resp.StatusCode, body, tc.code)
		}
		if tc.code == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Fatalf("%s: 401 without a Basic challenge", tc.what)
		}
		if tc.code == http.StatusOK {
			if o := tc.h.Get("Origin"); o != "" && (resp.Header.Get("Access-Control-Allow-Origin") != o || resp.Header.Get("Access-Control-Allow-Credentials") != "true") {
				t.Fatalf("%s: Access-Control-Allow-Origin %q", tc.what, resp.Header.Get("Access-Control-Allow-Origin"))
			}
			p, err := dialAs(tb.Addr, "pub", "p")
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.SendReceipt(ctxT(t), "/topic/ok.a", []byte("7"))
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			if ev := s.nextEvent(t); ev.data != "7" {
				t.Fatalf("%s: event %+v", tc.what, ev)
			}
		}
	}
}

func merge(a, b http.Header) http.Header {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// A client that does not read is dropped once web.sse_buffer_bytes of
// events wait for it, with a last event naming the setting; the broker's
// memory is given back.
func TestWeb_SSE_SlowClientDropped(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Web.SSEBufferBytes = 64 << 10 })
	addr := startWeb(t, tb, nil)
	// A small receive buffer, so that the kernel holds little for it.
	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
	}}).DialContext}}
	_, s := openSSE(t, addr, "topic=flood", nil, hc)
	p := tb.Dial(t)
	ctx := ctxT(t)
	body := []byte(strings.Repeat("x", 16<<10))
	const n = 1600 // 25 MiB: more than the socket buffers hold
	for range n {
		if _, err := p.SendReceipt(ctx, "/topic/flood", body); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for {
		ev := s.nextEvent(t)
		if ev.event == "error" {
			if !strings.Contains(ev.data, "web.sse_buffer_bytes") {
				t.Fatalf("last event %q: want it to name web.sse_buffer_bytes", ev.data)
			}
			break
		}
		got++
		if got >= n {
			t.Fatalf("all %d events arrived: the client was never dropped", n)
		}
	}
	if _, err := s.r.ReadByte(); err != io.EOF && err != io.ErrUnexpectedEOF {
		t.Fatalf("after the error event: %v, want the end of the stream", err)
	}
	t.Logf("%d events of %d before the drop", got, n)
	waitFor(t, 10*time.Second, "the stream's memory given back", func() bool { return tb.B.Stats().MemoryUsed == 0 })
}

// curl reads the stream as it comes.
func TestWeb_SSE_Curl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("skipped: this test needs curl (apt-get install curl)")
	}
	tb := mustStartBroker(t, nil)
	addr := startWeb(t, tb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, curl, "-sSN", "http://"+addr+"/events?topic=curl.>")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	s := &sseStream{r: bufio.NewReader(out)}
	if ev := s.next(t); !strings.HasPrefix(ev.comment, "herald: topic curl.>") {
		t.Fatalf("curl's first event %+v", ev)
	}
	p := tb.Dial(t)
	if _, err := p.SendReceipt(ctx, "/topic/curl.temp", []byte("21.5")); err != nil {
		t.Fatal(err)
	}
	if ev := s.nextEvent(t); ev.data != "21.5" {
		t.Fatalf("curl got %+v", ev)
	}
}

// topics=DURATION adds "topics" events: the live topics matching the
// stream's pattern (the admin topics view), never subscription patterns.
func TestWeb_SSE_TopicsEvent(t *testing.T) {
	tb := mustStartBroker(t, nil)
	addr := startWeb(t, tb, nil)
	p := tb.Dial(t)
	ctx := ctxT(t)
	for _, d := range []string{"/topic/m.a", "/topic/m.b", "/topic/other"} {
		if _, err := p.SendReceipt(ctx, d, []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	_, s := openSSE(t, addr, "topic=m.*&topics=1s", nil, nil)
	ev := s.next(t)
	if ev.event != "topics" {
		t.Fatalf("first event %+v, want topics", ev)
	}
	var list []appliance.TopicView
	if err := json.Unmarshal([]byte(ev.data), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range list {
		names = append(names, v.Name)
	}
	if strings.Join(names, ",") != "m.a,m.b" || list[0].In != 1 {
		t.Fatalf("topics %v (%+v), want m.a,m.b with in_total 1", names, list)
	}
	if resp, _ := openSSE(t, addr, "topic=m.*&topics=1ms", nil, nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("topics=1ms: %d, want 400", resp.StatusCode)
	}
}

// 20 WebSocket and 20 SSE clients on one topic: every message, in order,
// to each.
func TestWeb_Fanout20And20(t *testing.T) {
	tb := mustStartBroker(t, nil)
	addr := startWeb(t, tb, nil)
	ctx := ctxT(t)
	const clients, n = 20, 200
	var wsSubs []*client.Subscription
	for range clients {
		c, err := wsClient(t, addr, client.Options{AcceptVersion: "1.2"})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.SubscribeReceipt(ctx, "/topic/fan", "auto")
		if err != nil {
			t.Fatal(err)
		}
		wsSubs = append(wsSubs, sub)
	}
	var streams []*sseStream
	for range clients {
		_, s := openSSE(t, addr, "topic=fan", nil, nil)
		streams = append(streams, s)
	}
	p := tb.Dial(t)
	for i := range n {
		if err := p.Send("/topic/fan", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.SendReceipt(ctx, "/topic/fan.end", nil); err != nil {
		t.Fatal(err)
	}
	for k, sub := range wsSubs {
		for i := range n {
			if m := recv(t, sub); string(m.Body) != strconv.Itoa(i) {
				t.Fatalf("WebSocket client %d: message %d is %q", k, i, m.Body)
			}
		}
	}
	for k, s := range streams {
		for i := range n {
			if ev := s.nextEvent(t); ev.data != strconv.Itoa(i) {
				t.Fatalf("SSE client %d: event %d is %q", k, i, ev.data)
			}
		}
	}
}
