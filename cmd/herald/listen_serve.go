package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/webui"
	"github.com/herald-mq/herald/multicast"
)

// herald listen --serve ADDR: the multicast receiver re-serves its channel to local browsers and
// programs, read-only, over STOMP on WebSocket (/stomp), server-sent events (/events) and the
// appliance's dashboard page (/). Gaps are events too: an SSE "gap" event, a MESSAGE frame with
// gap-from, gap-to and gap-reason headers, a row on the page.

const (
	// defaultServeClientBuffer bounds the bytes waiting for one client (--serve-client-buffer).
	defaultServeClientBuffer = 4 << 20
	// defaultServeMaxClients bounds the clients served at once (--serve-max-clients).
	defaultServeMaxClients = 64
	// serveTopicsMax bounds the topics counted for the page's "topics" event.
	serveTopicsMax = 10000
	// serveHeartbeat: an SSE comment this often keeps proxies and idle clients alive.
	serveHeartbeat = 15 * time.Second
	// serveFrameLimit bounds a frame a WebSocket client sends (they only subscribe).
	serveFrameLimit = 64 << 10
	// serveWriteTimeout: a client that takes nothing for this long is dropped (its queue is
	// bounded anyway; this ends the goroutine and the connection).
	serveWriteTimeout = 30 * time.Second
)

type serveConfig struct {
	addr         string
	clientBuffer int
	maxClients   int
	origins      []string // normalised, or "*"
	group        string
}

// serveHub fans the receiver's events out to the clients. Every client has a queue bounded in
// bytes; a client that lets it fill is dropped with an error naming --serve-client-buffer.
type serveHub struct {
	cfg serveConfig
	ln  net.Listener
	srv *http.Server
	ctx context.Context
	end context.CancelFunc

	mu      sync.Mutex
	clients map[*serveClient]struct{}
	topics  map[string]uint64 // messages per topic (at most serveTopicsMax topics)
	session uint64
	wg      sync.WaitGroup
}

type serveClient struct {
	sse     bool
	json    bool              // SSE: format=json
	pattern string            // SSE: the topic pattern
	subs    map[string]string // WebSocket: subscription id -> topic pattern
	version string            // WebSocket: STOMP version

	// Guarded by serveHub.mu.
	q       [][]byte
	qBytes  int
	peak    int    // the most bytes ever queued (tests)
	final   []byte // closing: written after q, then the connection ends
	closing bool
	wake    chan struct{}
}

// parseServeAddr puts an address without a host on loopback.
func parseServeAddr(a string) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		if _, perr := strconv.Atoi(a); perr != nil {
			return "", usageErrorf("--serve %q: want [HOST]:PORT, e.g. :8080 (on 127.0.0.1) or 0.0.0.0:8080 (every interface)", a)
		}
		host, port = "", a
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// normOrigin normalises an Origin ("scheme://host[:port]") to lower case without its default port.
func normOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", errors.New("want scheme://host[:port] with scheme http or https and no path")
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		host = strings.ToLower(u.Hostname())
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	return u.Scheme + "://" + host, nil
}

func startServe(cfg serveConfig) (*serveHub, error) {
	for i, o := range cfg.origins {
		if o == "*" {
			continue
		}
		n, err := normOrigin(o)
		if err != nil {
			return nil, usageErrorf("--serve-allow-origin %q: %v (example: http://wall.example:8080, or * for any)", o, err)
		}
		cfg.origins[i] = n
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("--serve %s: %w", cfg.addr, err)
	}
	h := &serveHub{cfg: cfg, ln: ln, clients: map[*serveClient]struct{}{}, topics: map[string]uint64{}}
	h.ctx, h.end = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("/", h.servePage)
	mux.HandleFunc("/events", h.serveEvents)
	mux.HandleFunc("/stomp", h.serveStomp)
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	h.wg.Add(1)
	go func() { defer h.wg.Done(); h.srv.Serve(ln) }()
	return h, nil
}

// Addr is the address served.
func (h *serveHub) Addr() net.Addr { return h.ln.Addr() }

// close ends every client and the listener.
func (h *serveHub) close() {
	h.end()
	h.srv.Close()
	h.wg.Wait()
}

// originAllowed: no Origin (not a browser), the server's own origin, or an allowed one.
func (h *serveHub) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	got, err := normOrigin(o)
	if err != nil {
		return false
	}
	if self, err := normOrigin("http://" + r.Host); err == nil && self == got {
		return true
	}
	for _, a := range h.cfg.origins {
		if a == "*" || a == got {
			return true
		}
	}
	return false
}

func (h *serveHub) refuseOrigin(w http.ResponseWriter, r *http.Request) {
	http.Error(w, fmt.Sprintf("origin %q is not allowed: start herald listen with --serve-allow-origin %s (the server's own origin is always allowed)",
		r.Header.Get("Origin"), r.Header.Get("Origin")), http.StatusForbidden)
}

// gapScript shows the gaps of the channel on the dashboard page: it wraps EventSource (before
// the page's script runs) to listen for "gap" events, and lists the latest in a table.
const gapScript = `<script>
"use strict";
// herald listen --serve: messages the multicast receiver could not recover are shown as gaps.
(function () {
  const Native = window.EventSource;
  const gaps = [];
  function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); }
  function show() {
    let el = document.getElementById("gaps");
    if (!el) {
      el = document.createElement("section");
      el.id = "gaps";
      el.innerHTML = '<table><thead><tr><th>gap</th><th>messages</th><th>reason</th><th>time</th></tr></thead><tbody></tbody></table>';
      (document.querySelector("main") || document.body).appendChild(el);
    }
    const tb = el.querySelector("tbody");
    tb.textContent = "";
    for (const g of gaps.slice().reverse()) {
      const tr = document.createElement("tr");
      tr.className = "gap";
      tr.dataset.gap = g.topic + " " + g.from + "-" + g.to;
      cell(tr, g.topic);
      cell(tr, g.from === g.to ? String(g.from) : g.from + "-" + g.to, "num");
      cell(tr, g.reason);
      cell(tr, new Date(g.time).toLocaleTimeString(), "time");
      tb.appendChild(tr);
    }
    document.body.dataset.gaps = String(gaps.length);
  }
  window.EventSource = function (url, init) {
    const es = new Native(url, init);
    es.addEventListener("gap", (e) => {
      try { const g = JSON.parse(e.data); g.time = Date.now(); gaps.push(g); if (gaps.length > 50) gaps.shift(); } catch (err) { return; }
      if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", show, {once: true}); else show();
    });
    return es;
  };
  window.EventSource.prototype = Native.prototype;
})();
</script>
`

// page is the appliance's dashboard with the gap script first in <head>.
func servePageBytes() []byte {
	p := webui.Page()
	if i := bytes.Index(p, []byte("<head>")); i >= 0 {
		i += len("<head>")
		return slices.Concat(p[:i], []byte("\n"+gapScript), p[i:])
	}
	return append([]byte(gapScript), p...)
}

var servePage = sync.OnceValue(servePageBytes)

func (h *serveHub) servePage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.Write(servePage())
}

// add registers a client, or refuses it past --serve-max-clients.
func (h *serveHub) add(c *serveClient) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.clients) >= h.cfg.maxClients {
		return fmt.Errorf("too many clients: %d served (raise --serve-max-clients)", len(h.clients))
	}
	c.wake = make(chan struct{}, 1)
	h.clients[c] = struct{}{}
	return nil
}

func (h *serveHub) remove(c *serveClient) {
	h.mu.Lock()
	delete(h.clients, c)
	c.q, c.qBytes = nil, 0
	h.mu.Unlock()
}

func (c *serveClient) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// enqueue queues b for c (h.mu held); past the client's byte bound, c is dropped.
func (h *serveHub) enqueue(c *serveClient, b []byte) {
	if c.closing {
		return
	}
	if c.qBytes+len(b) > h.cfg.clientBuffer {
		msg := fmt.Sprintf("slow client: more than %d bytes waiting to be sent to it (--serve-client-buffer); reconnect, or raise --serve-client-buffer", h.cfg.clientBuffer)
		if c.sse {
			h.closeClient(c, sseEvent("", "error", []byte(msg)))
		} else {
			h.closeClient(c, stompError(c.version, "slow client", msg))
		}
		return
	}
	c.q = append(c.q, b)
	c.qBytes += len(b)
	c.peak = max(c.peak, c.qBytes)
	c.signal()
}

// closeClient drops what waits for c and ends it after final (h.mu held).
func (h *serveHub) closeClient(c *serveClient, final []byte) {
	c.q, c.qBytes = nil, 0
	c.final, c.closing = final, true
	c.signal()
}

// grab takes what waits to be sent to c (after a wake).
func (h *serveHub) grab(c *serveClient) (q [][]byte, final []byte, closing bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q, final, closing = c.q, c.final, c.closing
	c.q, c.qBytes = nil, 0
	return q, final, closing
}

// publish hands an event to every client it matches.
func (h *serveHub) publish(e multicast.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var sseText, sseJSON []byte
	switch e := e.(type) {
	case multicast.Message:
		if _, ok := h.topics[e.Topic]; ok || len(h.topics) < serveTopicsMax {
			h.topics[e.Topic]++
		}
		id := fmt.Sprintf("%016x-%d-%d", e.Session, e.Stream, e.StreamSeq)
		for c := range h.clients {
			if c.sse {
				if !multicast.MatchTopic(c.pattern, e.Topic) {
					continue
				}
				if c.json {
					if sseJSON == nil {
						sseJSON = sseMessageJSON(id, e)
					}
					h.enqueue(c, sseJSON)
				} else {
					if sseText == nil {
						sseText = sseEvent(id, "", e.Body)
					}
					h.enqueue(c, sseText)
				}
				continue
			}
			for sub, p := range c.subs {
				if multicast.MatchTopic(p, e.Topic) {
					h.enqueue(c, stompMessage(c.version, sub, id, e))
				}
			}
		}
	case multicast.Gap:
		id := fmt.Sprintf("%016x-%d-%d-%d", e.Session, e.Stream, e.From, e.To)
		for c := range h.clients {
			if c.sse {
				// A stream no CATALOG named (empty topic) may be any client's: all are told.
				if e.Topic == "" || multicast.MatchTopic(c.pattern, e.Topic) {
					if sseJSON == nil {
						data, _ := json.Marshal(map[string]any{"topic": e.Topic, "stream": e.Stream, "from": e.From, "to": e.To, "reason": e.Reason.String()})
						sseJSON = sseEvent("", "gap", data)
					}
					h.enqueue(c, sseJSON)
				}
				continue
			}
			for sub, p := range c.subs {
				if e.Topic == "" || multicast.MatchTopic(p, e.Topic) {
					h.enqueue(c, stompGap(c.version, sub, id, e))
				}
			}
		}
	case multicast.SessionChange:
		h.session = e.New
		data := []byte(fmt.Sprintf(`{"old":"%016x","new":"%016x"}`, e.Old, e.New))
		for c := range h.clients {
			if c.sse {
				h.enqueue(c, sseEvent("", "session", data))
			}
		}
	}
}

// sseEvent formats one server-sent event.
func sseEvent(id, typ string, data []byte) []byte {
	var b bytes.Buffer
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	if typ != "" {
		b.WriteString("event: " + typ + "\n")
	}
	s := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
	for _, line := range strings.Split(s, "\n") {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// sseMessageJSON is a message as the appliance's /events?format=json gives it.
func sseMessageJSON(id string, e multicast.Message) []byte {
	j := struct {
		Topic    string            `json:"topic"`
		ID       string            `json:"id"`
		Body     string            `json:"body"`
		Headers  map[string]string `json:"headers,omitempty"`
		Repaired bool              `json:"repaired,omitempty"`
	}{Topic: e.Topic, ID: id, Body: string(e.Body), Repaired: e.Repaired}
	for _, hd := range e.Headers {
		if j.Headers == nil {
			j.Headers = map[string]string{}
		}
		if _, dup := j.Headers[hd.Key]; !dup {
			j.Headers[hd.Key] = hd.Value
		}
	}
	data, _ := json.Marshal(j)
	return sseEvent(id, "", data)
}

func stompMessage(v, sub, id string, e multicast.Message) []byte {
	f := stomp.NewFrame(stomp.CmdMessage, "subscription", sub, "message-id", id, "destination", "/topic/"+e.Topic)
	for _, hd := range e.Headers {
		switch hd.Key {
		case "subscription", "message-id", "destination", "content-length", "ack":
			continue
		}
		f.Headers = append(f.Headers, stomp.Header{Key: hd.Key, Value: hd.Value})
	}
	if e.Repaired {
		f.Headers = append(f.Headers, stomp.Header{Key: "repaired", Value: "true"})
	}
	f.Body = e.Body
	return stomp.Encode(f, v)
}

// stompGap is a gap as a MESSAGE frame without a body: stream sequences gap-from to gap-to of
// the destination's topic will never come.
func stompGap(v, sub, id string, e multicast.Gap) []byte {
	f := stomp.NewFrame(stomp.CmdMessage, "subscription", sub, "message-id", id, "destination", "/topic/"+e.Topic,
		"gap-from", strconv.FormatUint(e.From, 10), "gap-to", strconv.FormatUint(e.To, 10), "gap-reason", e.Reason.String())
	return stomp.Encode(f, v)
}

func stompError(v, msg, body string) []byte {
	f := stomp.NewFrame(stomp.CmdError, "message", msg, "content-type", "text/plain")
	f.Body = []byte(body)
	return stomp.Encode(f, v)
}

// serveEvents streams the messages of ?topic=PATTERN as server-sent events, as the appliance's
// /events does (format=text or json, topics=DURATION for the page's list of live topics), plus
// "gap" and "session" events.
func (h *serveHub) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !h.originAllowed(r) {
		h.refuseOrigin(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	pattern := strings.TrimPrefix(q.Get("topic"), "/topic/")
	if pattern == "" {
		http.Error(w, "missing topic: /events?topic=NAME (wildcards * and > as in SUBSCRIBE, for example metrics.>)", http.StatusBadRequest)
		return
	}
	c := &serveClient{sse: true, pattern: pattern}
	switch f := q.Get("format"); f {
	case "", "text":
	case "json":
		c.json = true
	default:
		http.Error(w, fmt.Sprintf("format %q: want text (the body as data, the default) or json", f), http.StatusBadRequest)
		return
	}
	var topicsEvery time.Duration
	if v := q.Get("topics"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > 10*time.Minute {
			http.Error(w, fmt.Sprintf("topics %q: want a duration from 1s to 10m (how often to send the list of live topics)", v), http.StatusBadRequest)
			return
		}
		topicsEvery = d
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming not supported", http.StatusInternalServerError)
		return
	}
	if err := h.add(c); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer h.remove(c)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, ": herald listen --serve: multicast group %s, topic %s (no history: the stream starts now)\nretry: 2000\n\n", h.cfg.group, pattern)
	if topicsEvery > 0 {
		w.Write(h.topicsEvent(pattern))
	}
	flusher.Flush()
	hb := time.NewTicker(serveHeartbeat)
	defer hb.Stop()
	var topicsC <-chan time.Time
	if topicsEvery > 0 {
		tt := time.NewTicker(topicsEvery)
		defer tt.Stop()
		topicsC = tt.C
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.ctx.Done():
			return
		case <-hb.C:
			http.NewResponseController(w).SetWriteDeadline(time.Now().Add(serveWriteTimeout))
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
			continue
		case <-topicsC:
			http.NewResponseController(w).SetWriteDeadline(time.Now().Add(serveWriteTimeout))
			if _, err := w.Write(h.topicsEvent(pattern)); err != nil {
				return
			}
			flusher.Flush()
			continue
		case <-c.wake:
		}
		batch, final, closing := h.grab(c)
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(serveWriteTimeout))
		for _, b := range batch {
			if _, err := w.Write(b); err != nil {
				return
			}
		}
		if closing {
			w.Write(final)
			flusher.Flush()
			return
		}
		flusher.Flush()
	}
}

// topicsEvent lists the topics matching pattern seen so far, with the clients reading each and
// the messages received, as the appliance's "topics" event (at most 1000, by name).
func (h *serveHub) topicsEvent(pattern string) []byte {
	type view struct {
		Name        string `json:"name"`
		Subscribers int    `json:"subscribers"`
		In          uint64 `json:"in_total"`
	}
	h.mu.Lock()
	out := []view{}
	for t, n := range h.topics {
		if !multicast.MatchTopic(pattern, t) {
			continue
		}
		v := view{Name: t, In: n}
		for c := range h.clients {
			if c.sse && multicast.MatchTopic(c.pattern, t) {
				v.Subscribers++
			}
			for _, p := range c.subs {
				if multicast.MatchTopic(p, t) {
					v.Subscribers++
				}
			}
		}
		out = append(out, v)
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b view) int { return strings.Compare(a.Name, b.Name) })
	out = out[:min(len(out), 1000)]
	data, _ := json.Marshal(out)
	return sseEvent("", "topics", data)
}

type serveAddr string

func (a serveAddr) Network() string { return "tcp" }
func (a serveAddr) String() string  { return string(a) }

// serveStomp is STOMP over WebSocket, read-only: CONNECT, SUBSCRIBE to /topic/PATTERN,
// UNSUBSCRIBE, DISCONNECT and receipts; SEND (or a transaction) gets an ERROR.
func (h *serveHub) serveStomp(w http.ResponseWriter, r *http.Request) {
	if !h.originAllowed(r) {
		h.refuseOrigin(w, r)
		return
	}
	c := &serveClient{subs: map[string]string{}, version: stomp.V12}
	if err := h.add(c); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer h.remove(c)
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:       appliance.WebSubprotocols,
		InsecureSkipVerify: true, // the Origin was checked above
	})
	if err != nil {
		return
	}
	ws.SetReadLimit(-1) // the STOMP reader bounds frames
	conn := appliance.NewWebSocketConn(ws, serveAddr(h.ln.Addr().String()), serveAddr(r.RemoteAddr))
	defer conn.Close()
	stop := context.AfterFunc(h.ctx, func() { conn.Close() }) // the hub ends: so does the session
	defer stop()
	rd := stomp.NewReader(conn, stomp.Limits{MaxBody: serveFrameLimit, MaxHeaderBytes: serveFrameLimit, MaxHeaderLine: serveFrameLimit})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-c.wake:
			case <-h.ctx.Done():
				conn.Close()
				return
			}
			q, final, closing := h.grab(c)
			conn.SetWriteDeadline(time.Now().Add(serveWriteTimeout))
			for _, b := range q {
				if _, err := conn.Write(b); err != nil {
					conn.Close()
					return
				}
			}
			if closing {
				if final != nil {
					conn.Write(final)
				}
				time.Sleep(50 * time.Millisecond) // not synchronisation: let the ERROR leave before the close
				conn.Close()
				return
			}
		}
	}()
	defer func() { <-done }()
	fail := func(msg, body string) {
		h.mu.Lock()
		h.closeClient(c, stompError(c.version, msg, body))
		h.mu.Unlock()
	}
	connected := false
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := rd.ReadFrame()
		if err != nil {
			var se *stomp.Error
			if errors.As(err, &se) {
				fail("malformed frame", err.Error())
				return
			}
			h.mu.Lock()
			h.closeClient(c, nil)
			h.mu.Unlock()
			return
		}
		if f == nil {
			continue // a heart-beat
		}
		if !connected {
			if f.Command != stomp.CmdConnect && f.Command != stomp.CmdStomp {
				fail("not connected", "send CONNECT first")
				return
			}
			c.version = negotiate(f.Get("accept-version"))
			rd.SetVersion(c.version)
			conn.SetReadDeadline(time.Time{})
			connected = true
			h.mu.Lock()
			h.enqueue(c, stomp.Encode(stomp.NewFrame(stomp.CmdConnected, "version", c.version, "heart-beat", "0,0",
				"server", "herald-listen", "session", r.RemoteAddr), c.version))
			h.mu.Unlock()
			continue
		}
		switch f.Command {
		case stomp.CmdSubscribe:
			dest := f.Get("destination")
			pattern, ok := strings.CutPrefix(dest, "/topic/")
			if !ok || pattern == "" {
				fail("read-only topics", fmt.Sprintf("destination %q: herald listen --serve re-serves the topics of a multicast channel: subscribe to /topic/NAME (wildcards * and >)", dest))
				return
			}
			id := f.Get("id")
			if id == "" {
				id = dest // STOMP 1.0: the destination names the subscription
			}
			h.mu.Lock()
			c.subs[id] = pattern
			h.mu.Unlock()
		case stomp.CmdUnsubscribe:
			h.mu.Lock()
			delete(c.subs, f.Get("id"))
			h.mu.Unlock()
		case stomp.CmdAck, stomp.CmdNack:
			// Topic messages need no acknowledgement.
		case stomp.CmdDisconnect:
			h.mu.Lock()
			var last []byte
			if rc := f.Get("receipt"); rc != "" {
				last = stomp.Encode(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", rc), c.version)
			}
			c.final, c.closing = last, true // after what is queued
			c.signal()
			h.mu.Unlock()
			return
		default:
			fail("read-only", fmt.Sprintf("%s: herald listen --serve is read-only (it re-serves a multicast channel): send to the appliance instead", f.Command))
			return
		}
		if rc := f.Get("receipt"); rc != "" {
			h.mu.Lock()
			h.enqueue(c, stomp.Encode(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", rc), c.version))
			h.mu.Unlock()
		}
	}
}

// negotiate picks the highest STOMP version offered (1.0 when none is named).
func negotiate(accept string) string {
	best := stomp.V10
	for _, v := range strings.Split(accept, ",") {
		switch strings.TrimSpace(v) {
		case stomp.V12:
			return stomp.V12
		case stomp.V11:
			best = stomp.V11
		}
	}
	return best
}

// listenServe starts --serve from the command line's flags.
func listenServe(cCtx *cli.Context, a, group string) (*serveHub, error) {
	addr, err := parseServeAddr(a)
	if err != nil {
		return nil, err
	}
	cfg := serveConfig{addr: addr, clientBuffer: cCtx.Int("serve-client-buffer"), maxClients: cCtx.Int("serve-max-clients"),
		origins: cCtx.StringSlice("serve-allow-origin"), group: group}
	if cfg.clientBuffer < 64<<10 || cfg.clientBuffer > 1<<30 {
		return nil, usageErrorf("--serve-client-buffer %d: want 65536 to 1073741824 bytes", cfg.clientBuffer)
	}
	if cfg.maxClients < 1 || cfg.maxClients > 100000 {
		return nil, usageErrorf("--serve-max-clients %d: want 1 to 100000", cfg.maxClients)
	}
	h, err := startServe(cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cCtx.App.ErrWriter, "herald listen: serving http://%s/ (dashboard), ws://%s/stomp (STOMP, read-only), http://%s/events?topic=PATTERN (server-sent events)\n",
		h.Addr(), h.Addr(), h.Addr())
	return h, nil
}

// clientCount is how many clients are served (tests).
func (h *serveHub) clientCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// peak is the most bytes any client ever had queued (tests).
func (h *serveHub) peak() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := 0
	for c := range h.clients {
		p = max(p, c.peak)
	}
	return p
}
