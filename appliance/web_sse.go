package appliance

// Server-sent events at /events?topic=PATTERN.
//
// An SSE stream is a STOMP session: the handler connects to the broker
// over an in-process pipe (accept, with the HTTP client's address), logs
// in with the request's Basic credentials (none: anonymous) and
// subscribes to /topic/PATTERN. So the users, permissions, connection
// limits, slow-subscriber bound (topics.subscriber_buffer*) and memory
// budget are those of every STOMP subscriber. Between that session and the
// HTTP response each stream holds at most web.sse_buffer_bytes of events,
// charged to the memory budget; a client that falls further behind gets a
// last "error" event naming the setting and is dropped.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// pipeConn is one end of an in-process pipe with the addresses of the
// HTTP connection it serves, so that per-address limits and the
// loopback rule see the real client.
type pipeConn struct {
	net.Conn
	local, remote net.Addr
	tls           *tls.ConnectionState // of the HTTPS request, nil for HTTP
}

// TLSConnectionState is the HTTPS request's: a client certificate logs
// the stream in as on the STOMP TLS listener.
func (p pipeConn) TLSConnectionState() (tls.ConnectionState, bool) {
	if p.tls == nil {
		return tls.ConnectionState{}, false
	}
	return *p.tls, true
}

func (p pipeConn) LocalAddr() net.Addr  { return p.local }
func (p pipeConn) RemoteAddr() net.Addr { return p.remote }

// sseEvent formats one event: id, optional event type, data lines.
func sseEvent(id, typ string, data []byte) []byte {
	var sb strings.Builder
	if id != "" {
		sb.WriteString("id: ")
		sb.WriteString(id)
		sb.WriteByte('\n')
	}
	if typ != "" {
		sb.WriteString("event: ")
		sb.WriteString(typ)
		sb.WriteByte('\n')
	}
	// A data field holds one line: CR, LF and CRLF all end lines in SSE.
	s := strings.ReplaceAll(string(data), "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	for line := range strings.SplitSeq(s, "\n") {
		sb.WriteString("data: ")
		sb.WriteString(line)
		sb.WriteByte('\n')
	}
	sb.WriteByte('\n')
	return []byte(sb.String())
}

// sseComment formats comment lines (ignored by EventSource, shown by curl).
func sseComment(text string) []byte {
	var sb strings.Builder
	for line := range strings.SplitSeq(text, "\n") {
		sb.WriteString(": ")
		sb.WriteString(line)
		sb.WriteByte('\n')
	}
	sb.WriteByte('\n')
	return []byte(sb.String())
}

// sseJSON is the data of an event with format=json.
type sseJSON struct {
	Topic     string            `json:"topic"`
	ID        string            `json:"id"`
	Body      string            `json:"body"`
	Headers   map[string]string `json:"headers,omitempty"`
	LastValue bool              `json:"last_value,omitempty"`
	// Timestamp is the broker's: ms since the epoch the SEND was accepted.
	Timestamp  int64 `json:"timestamp,omitempty"`
	History    bool  `json:"history,omitempty"`     // from topic history (history=N, Last-Event-ID)
	HistoryGap bool  `json:"history_gap,omitempty"` // messages before this one were lost from history
}

// serveEvents streams a topic pattern's messages as server-sent events.
func (b *Broker) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !b.originAllowed(r) {
		refuseOrigin(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	pattern := r.URL.Query().Get("topic")
	if pattern == "" {
		http.Error(w, "missing topic: /events?topic=NAME (wildcards * and > as in SUBSCRIBE, for example metrics.>)", http.StatusBadRequest)
		return
	}
	pattern = strings.TrimPrefix(pattern, prefixTopic)
	if _, _, err := parseDest(prefixTopic+pattern, true); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	asJSON := false
	switch f := r.URL.Query().Get("format"); f {
	case "", "text":
	case "json":
		asJSON = true
	default:
		http.Error(w, fmt.Sprintf("format %q: want text (the body as data, the default) or json", f), http.StatusBadRequest)
		return
	}
	var topicsEvery, overviewEvery time.Duration
	for _, p := range []struct {
		key, what string
		d         *time.Duration
	}{
		{"topics", "the list of live topics", &topicsEvery},
		{"overview", "the overview of queues, topics and channels", &overviewEvery},
	} {
		if v := r.URL.Query().Get(p.key); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second || d > 10*time.Minute {
				http.Error(w, fmt.Sprintf("%s %q: want a duration from 1s to 10m (how often to send %s)", p.key, v, p.what), http.StatusBadRequest)
				return
			}
			*p.d = d
		}
	}
	// History: the last N of each topic first (history=N), or, on a
	// reconnect (Last-Event-ID), every kept message after the last seen.
	var subHdrs []stomp.Header
	if v := r.URL.Query().Get("history"); v != "" {
		n, err := strconv.Atoi(v)
		if lim := b.cfg().Topics.SubscriberBuffer; err != nil || n < 0 || n > lim {
			http.Error(w, fmt.Sprintf("history %q: want how many of each topic's latest messages to send first, from 0 to %d (topics.subscriber_buffer)", v, lim), http.StatusBadRequest)
			return
		}
		subHdrs = append(subHdrs, stomp.Header{Key: hdrHistory, Value: v})
	}
	last := r.Header.Get("Last-Event-ID")
	resumed := false
	if _, ok := parseTopicID(last); ok && b.historyMayKeep(pattern) {
		subHdrs = []stomp.Header{{Key: hdrHistory, Value: strconv.Itoa(b.cfg().Topics.SubscriberBuffer)}, {Key: hdrHistoryAfter, Value: last}}
		resumed = true
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming not supported", http.StatusInternalServerError)
		return
	}

	// The stream counts in the broker's wait group, like a session.
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()
	defer b.wg.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	// The STOMP session of this stream.
	srvEnd, cliEnd := net.Pipe()
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		local = httpAddr("")
	}
	remote := httpAddr(r.RemoteAddr)
	b.accept(pipeConn{srvEnd, local, remote, r.TLS})
	opts := client.Options{
		Host:          "herald",
		AcceptVersion: "1.2",
		// The session expects beats from its client; none are needed the
		// other way (the SSE heart-beat is the handler's).
		HeartBeat:   [2]time.Duration{10 * time.Second, 0},
		DialTimeout: b.cfg().Stomp.ConnectTimeout.Duration,
	}
	if user, pass, ok := r.BasicAuth(); ok {
		opts.Login, opts.Passcode = user, pass
	}
	conn, err := client.Handshake(ctx, pipeConn{cliEnd, remote, local, nil}, "herald", opts)
	if err != nil {
		cliEnd.Close()
		b.httpSTOMPError(w, err, true)
		return
	}
	defer conn.Close()
	sub, err := conn.SubscribeReceipt(ctx, prefixTopic+pattern, "auto", subHdrs...)
	if err != nil {
		b.httpSTOMPError(w, err, false)
		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	if o := r.Header.Get("Origin"); o != "" {
		// Allowed above: its EventSource may read the stream, with
		// credentials (withCredentials) for a login.
		h.Set("Access-Control-Allow-Origin", o)
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Vary", "Origin")
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	hello := fmt.Sprintf("herald: topic %s", pattern)
	switch {
	case resumed:
		hello += fmt.Sprintf("\nresuming after %s from topic history (topics.history)", last)
	case last != "":
		hello += fmt.Sprintf("\nresuming from now: no topics.history rule keeps %s, messages after %s are not replayed (a [[topics.history]] rule for it, or topics.last_value = true, sends the latest first)", pattern, last)
	}
	w.Write(sseComment(hello))
	flusher.Flush()

	// The pump reads the session's messages into a queue bounded by
	// web.sse_buffer_bytes; the loop below writes it to the client.
	limit := b.cfg().Web.SSEBufferBytes
	var (
		mu      sync.Mutex
		queue   [][]byte
		queued  int64
		over    bool
		ended   error
		wakeup  = make(chan struct{}, 1)
		charged int64
		done    bool // the handler is returning: the pump charges no more
	)
	defer func() {
		mu.Lock()
		done = true
		b.mem.release(charged)
		charged = 0
		mu.Unlock()
	}()
	go func() {
		defer func() {
			select {
			case wakeup <- struct{}{}:
			default:
			}
		}()
		for {
			var f *stomp.Frame
			var ok bool
			select {
			case f, ok = <-sub.C():
			case <-ctx.Done():
				return
			}
			if !ok {
				mu.Lock()
				ended = conn.Err()
				if ended == nil {
					ended = errors.New("subscription ended")
				}
				mu.Unlock()
				return
			}
			ev := b.formatEvent(f, asJSON)
			mu.Lock()
			if done {
				mu.Unlock()
				return
			}
			// One event is always taken, however large (the STOMP
			// limits bound it).
			if queued > 0 && queued+int64(len(ev)) > limit {
				over = true
				mu.Unlock()
				return
			}
			queue = append(queue, ev)
			queued += int64(len(ev))
			charged += int64(len(ev))
			b.mem.charge(int64(len(ev)))
			mu.Unlock()
			select {
			case wakeup <- struct{}{}:
			default:
			}
		}
	}()

	beat := time.NewTicker(b.cfg().Web.SSEHeartbeat.Duration)
	defer beat.Stop()
	writeTimeout := b.cfg().Stomp.WriteTimeout.Duration
	var topicsTick, overviewTick <-chan time.Time
	sessionID := strings.TrimPrefix(conn.Session(), "herald-")
	if topicsEvery > 0 {
		t := time.NewTicker(topicsEvery)
		defer t.Stop()
		topicsTick = t.C
		w.Write(b.topicsEvent(sessionID, pattern))
		flusher.Flush()
	}
	if overviewEvery > 0 {
		t := time.NewTicker(overviewEvery)
		defer t.Stop()
		overviewTick = t.C
		w.Write(b.overviewEvent(sessionID))
		flusher.Flush()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-overviewTick:
			rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := w.Write(b.overviewEvent(sessionID)); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			continue
		case <-topicsTick:
			rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := w.Write(b.topicsEvent(sessionID, pattern)); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			continue
		case <-beat.C:
			rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := w.Write([]byte(":\n\n")); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			continue
		case <-wakeup:
		}
		mu.Lock()
		items := queue
		queue = nil
		isOver, end := over, ended
		mu.Unlock()
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		for _, ev := range items {
			if _, err := w.Write(ev); err != nil {
				return
			}
		}
		if rc.Flush() != nil {
			return
		}
		var n int64
		for _, ev := range items {
			n += int64(len(ev))
		}
		mu.Lock()
		queued -= n
		charged -= n
		mu.Unlock()
		b.mem.release(n)
		switch {
		case isOver:
			b.log.Info("web: slow SSE client dropped", "peer", r.RemoteAddr, "topic", pattern, "sse_buffer_bytes", limit)
			rc.SetWriteDeadline(time.Now().Add(lastWriteTimeout))
			w.Write(sseEvent("", "error", fmt.Appendf(nil, "slow client: more than %d bytes of events waited for this stream (web.sse_buffer_bytes); reconnect, or raise web.sse_buffer_bytes", limit)))
			rc.Flush()
			return
		case end != nil:
			var se *client.ServerError
			msg := end.Error()
			if errors.As(end, &se) {
				msg = se.Frame.Get("message")
				if body := strings.TrimSpace(string(se.Frame.Body)); body != "" {
					msg += ": " + body
				}
			}
			rc.SetWriteDeadline(time.Now().Add(lastWriteTimeout))
			w.Write(sseEvent("", "error", []byte(msg)))
			rc.Flush()
			return
		}
	}
}

// formatEvent is a MESSAGE as an event: id the message-id (t + the
// broker's topic sequence), data the body (or JSON with the topic name and
// headers).
func (b *Broker) formatEvent(f *stomp.Frame, asJSON bool) []byte {
	id := f.Get("message-id")
	var gap []byte
	if f.Get(hdrHistoryGap) == "true" {
		gap = sseComment(fmt.Sprintf("history gap: messages of %s before %s were dropped from history (topics.history keep and max_age, topics.history_max_bytes)", strings.TrimPrefix(f.Get("destination"), prefixTopic), id))
	}
	if !asJSON {
		return append(gap, sseEvent(id, "", f.Body)...)
	}
	j := sseJSON{
		Topic:      strings.TrimPrefix(f.Get("destination"), prefixTopic),
		ID:         id,
		Body:       string(f.Body),
		LastValue:  f.Get("last-value") == "true",
		History:    f.Get(hdrHistory) == "true",
		HistoryGap: gap != nil,
	}
	j.Timestamp, _ = strconv.ParseInt(f.Get(hdrTimestampT), 10, 64)
	for _, h := range f.Headers {
		switch h.Key {
		case "subscription", "message-id", "destination", "last-value", "content-length", hdrHistory, hdrHistoryGap, hdrTimestampT:
			continue
		}
		if j.Headers == nil {
			j.Headers = map[string]string{}
		}
		if _, dup := j.Headers[h.Key]; !dup {
			j.Headers[h.Key] = h.Value
		}
	}
	data, _ := json.Marshal(j)
	return append(gap, sseEvent(id, "", data)...)
}

// httpSTOMPError answers a CONNECT or SUBSCRIBE refused by the session:
// 401 for a failed login (asking for Basic credentials), 503 for the
// connection limits, 403 for a missing permission.
func (b *Broker) httpSTOMPError(w http.ResponseWriter, err error, connecting bool) {
	var se *client.ServerError
	if !errors.As(err, &se) {
		http.Error(w, "herald: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	msg := se.Frame.Get("message")
	text := msg
	if body := strings.TrimSpace(string(se.Frame.Body)); body != "" {
		text += ": " + body
	}
	code := http.StatusForbidden
	switch {
	case connecting && (strings.Contains(msg, "authentication") || strings.Contains(msg, "login") || strings.Contains(msg, "anonymous")):
		code = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", `Basic realm="herald", charset="UTF-8"`)
	case strings.Contains(msg, "too many") || strings.Contains(msg, "shutting down"):
		code = http.StatusServiceUnavailable
	}
	http.Error(w, text, code)
}

// maxTopicsEvent bounds the topics listed in one "topics" event.
const maxTopicsEvent = 1000

// topicsEvent is a "topics" event: the live topics (the admin topics view)
// that match pattern and that the stream's user may read, at most
// maxTopicsEvent of them, by name.
func (b *Broker) topicsEvent(sessionID, pattern string) []byte {
	id := b.sseIdentity(sessionID)
	p := b.authz.policy.Load()
	out := []TopicView{}
	for _, v := range b.Topics() {
		if len(out) >= maxTopicsEvent {
			break
		}
		if strings.ContainsAny(v.Name, "*>") || (v.Name != pattern && !MatchTopic(pattern, v.Name)) {
			continue // a subscription pattern, or not this stream's
		}
		if p != nil && !p.Allowed(id, auth.Read, auth.KindTopic, v.Name) {
			continue
		}
		out = append(out, v)
	}
	data, _ := json.Marshal(out)
	return sseEvent("", "topics", data)
}

// sseIdentity is who the stream's session logged in as.
func (b *Broker) sseIdentity(sessionID string) auth.Identity {
	id := auth.Identity{Anonymous: true}
	if n, err := strconv.ParseUint(sessionID, 10, 64); err == nil {
		b.mu.Lock()
		s := b.sessions[n]
		b.mu.Unlock()
		if s != nil {
			if i := s.ident.Load(); i != nil {
				id = *i
			}
		}
	}
	return id
}

// overviewChannel is a multicast channel in the overview.
type overviewChannel struct {
	Name   string   `json:"name"`
	Group  string   `json:"group"`
	Topics []string `json:"topics"`
}

// overview is the data of an "overview" event: what the stream's user may
// read, for the dashboard's read-only overview page. Clients compute rates
// from the counters of successive events.
type overview struct {
	Queues   []QueueView       `json:"queues"`
	Topics   []TopicView       `json:"topics"`
	Channels []overviewChannel `json:"channels"`
	Time     int64             `json:"time"` // ms since the epoch
}

// maxOverviewRows bounds each list of an "overview" event.
const maxOverviewRows = 1000

// overviewEvent is an "overview" event: the queues and topics the stream's
// user may read (at most maxOverviewRows of each, by name), and the
// multicast channels that carry a topic pattern it may read.
func (b *Broker) overviewEvent(sessionID string) []byte {
	id := b.sseIdentity(sessionID)
	p := b.authz.policy.Load()
	may := func(kind, name string) bool { return p == nil || p.Allowed(id, auth.Read, kind, name) }
	o := overview{Queues: []QueueView{}, Topics: []TopicView{}, Channels: []overviewChannel{}, Time: b.now().UnixMilli()}
	for _, q := range b.Queues() {
		if len(o.Queues) < maxOverviewRows && may(auth.KindQueue, q.Name) {
			o.Queues = append(o.Queues, q)
		}
	}
	for _, t := range b.Topics() {
		if len(o.Topics) < maxOverviewRows && !hasWildcard(t.Name) && may(auth.KindTopic, t.Name) {
			o.Topics = append(o.Topics, t)
		}
	}
	for _, c := range b.cfg().Multicast.Channels {
		// Only the patterns the user may read, as for topics: a channel's
		// other patterns are not the user's to see.
		var mine []string
		for _, t := range c.Topics {
			if may(auth.KindTopic, t) {
				mine = append(mine, t)
			}
		}
		if len(mine) > 0 {
			o.Channels = append(o.Channels, overviewChannel{Name: c.Name, Group: c.Group, Topics: mine})
		}
	}
	data, _ := json.Marshal(o)
	return sseEvent("", "overview", data)
}
