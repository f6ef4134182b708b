package appliance

// The web listener: STOMP over WebSocket at /stomp and server-sent events
// at /events (web_sse.go), for browsers.
//
// A WebSocket connection becomes a net.Conn (wsConn) and goes through
// Broker.accept like a TCP connection: one session code path, so every
// STOMP feature, heart-beat, timeout, permission, limit and the memory
// budget apply unchanged. WebSocket messages are a transport only: a
// message may carry several frames or part of one, in text or binary
// messages, and the session's byte stream is cut into messages where its
// writes fall (one flush, one message).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"golang.org/x/net/netutil"
)

// WebSubprotocols are the STOMP WebSocket subprotocols, preferred first.
var WebSubprotocols = []string{"v12.stomp", "v11.stomp", "v10.stomp"}

// validateWeb checks [web].
func (c *Config) validateWeb() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	w := &c.Web
	if w.Listen != "" {
		if _, _, err := net.SplitHostPort(w.Listen); err != nil {
			bad("web.listen: %q: want host:port (example: \"127.0.0.1:15674\")", w.Listen)
		}
	}
	if w.TLS && (c.Stomp.TLSCert == "" || c.Stomp.TLSKey == "") {
		bad("web.tls = true: set stomp.tls_cert and stomp.tls_key (PEM files); the web listener uses the STOMP certificate")
	}
	for _, o := range w.AllowedOrigins {
		if o == "*" {
			continue
		}
		if _, err := parseOrigin(o); err != nil {
			bad("web.allowed_origins: %q: %v (example: \"https://dashboard.example:8443\", or \"*\" for any)", o, err)
		}
	}
	if b := w.SSEBufferBytes; b < 4<<10 || b > 1<<30 {
		bad("web.sse_buffer_bytes: %d: want 4096 (4 KiB) to 1073741824 (1 GiB)", b)
	}
	if d := w.SSEHeartbeat.Duration; d < 100*time.Millisecond || d > 10*time.Minute {
		bad("web.sse_heartbeat: %s: want 100ms to 10m", w.SSEHeartbeat)
	}
	return errs
}

// parseOrigin normalises an Origin ("scheme://host[:port]", nothing else)
// to lower case with the default port left out.
func parseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" || u.User != nil {
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

// originAllowed decides a request's Origin header: none (not a browser:
// browsers always send it on WebSocket and cross-origin requests), the
// listener's own origin, or one of web.allowed_origins.
func (b *Broker) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	got, err := parseOrigin(o)
	if err != nil {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if self, err := parseOrigin(scheme + "://" + r.Host); err == nil && self == got && hostIsOwn(r.Host) {
		return true
	}
	for _, a := range b.cfg().Web.AllowedOrigins {
		if a == "*" {
			return true
		}
		if want, err := parseOrigin(a); err == nil && want == got {
			return true
		}
	}
	return false
}

// hostIsOwn reports whether a request's Host names this machine in a way
// no other site's DNS can: an IP address, localhost, or the machine's host
// name. A page whose own name an attacker points at this machine (DNS
// rebinding) has Origin and Host alike, so "the listener's own origin"
// holds only for these; any other name goes in web.allowed_origins.
func hostIsOwn(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".")
	if net.ParseIP(h) != nil || strings.EqualFold(h, "localhost") || strings.HasSuffix(strings.ToLower(h), ".localhost") {
		return true
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		return false
	}
	short, _, _ := strings.Cut(name, ".")
	return strings.EqualFold(h, name) || strings.EqualFold(h, short)
}

// refuseOrigin answers 403 to a page of a foreign origin.
func refuseOrigin(w http.ResponseWriter, r *http.Request) {
	http.Error(w, fmt.Sprintf("origin %q is not allowed: add it to web.allowed_origins (the listener's own origin is allowed when the address names this machine by IP address, localhost or its host name)", r.Header.Get("Origin")), http.StatusForbidden)
}

// WebHandler serves /stomp (STOMP over WebSocket), /events (SSE) and the
// built-in dashboard at / (web_dashboard.go).
func (b *Broker) WebHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/stomp", b.serveWebSocket)
	mux.HandleFunc("/events", b.serveEvents)
	mux.HandleFunc("/", serveDashboard)
	return mux
}

// ListenWeb starts the web listener on addr (HTTPS when tc is set; every
// handshake then takes the STOMP TLS configuration in force, see SetTLS)
// and returns the bound address. handler, when not nil, serves every path
// but /stomp and /events in place of the dashboard. Broker.Close stops it.
func (b *Broker) ListenWeb(addr string, tc *tls.Config, handler http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("web listen %s: %w (choose another with --web-listen or web.listen)", addr, err)
	}
	// HTTP connections (upgraded or not) are at most stomp.max_connections
	// at once, as at start: past it accepting waits for one to end. A
	// connection that sends no request is closed after 10 s
	// (ReadHeaderTimeout, also the keep-alive idle time). One address
	// holds at most stomp.max_connections_per_address of them (as on the
	// STOMP listener): past it a connection is refused at once, without
	// taking a slot, so that one client cannot hold every slot.
	var sln net.Listener = netutil.LimitListener(&perAddrListener{Listener: ln, b: b, tls: tc != nil, n: map[string]int{}}, b.cfg().Stomp.MaxConnections)
	if tc != nil {
		if b.authz.tls.Load() == nil {
			b.authz.tls.Store(tc)
		}
		sln = tls.NewListener(sln, &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"}, // WebSocket upgrades need HTTP/1.1
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				c := b.authz.tls.Load().Clone()
				c.NextProtos = []string{"http/1.1"}
				return c, nil
			},
		})
	}
	h := b.WebHandler()
	if handler != nil {
		mux := http.NewServeMux()
		mux.Handle("/stomp", h)
		mux.Handle("/events", h)
		mux.Handle("/", handler)
		h = mux
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		ln.Close()
		return nil, ErrClosed
	}
	b.listeners = append(b.listeners, sln)
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		srv.Serve(sln)
		// Requests still being read end here; upgraded WebSockets are
		// sessions (ended by Close), SSE streams watch b.stop.
		srv.Close()
	}()
	return ln.Addr(), nil
}

// perAddrListener refuses a connection from an address that already holds
// stomp.max_connections_per_address of the web listener's connections:
// over plain HTTP with a 503 naming the setting, over HTTPS by closing it
// (an answer would need the handshake, which would wait for the client).
type perAddrListener struct {
	net.Listener
	b   *Broker
	tls bool

	mu sync.Mutex
	n  map[string]int // open connections per client IP address
}

func (l *perAddrListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := peerAddress(c)
		limit := l.b.cfg().Stomp.MaxConnectionsPerAddress
		l.mu.Lock()
		if l.n[addr] < limit {
			l.n[addr]++
			l.mu.Unlock()
			return &perAddrConn{Conn: c, l: l, addr: addr}, nil
		}
		l.mu.Unlock()
		l.b.stats.refused.Add(1)
		reason := fmt.Sprintf("too many connections from %s (stomp.max_connections_per_address %d)", addr, limit)
		l.b.log.Warn("web: connection refused", "peer", c.RemoteAddr().String(), "reason", reason)
		if !l.tls {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"+reason+"\n")
		}
		c.Close()
	}
}

// perAddrConn gives its address's slot back when closed (also once
// hijacked: the WebSocket closes the connection it took over).
type perAddrConn struct {
	net.Conn
	l    *perAddrListener
	addr string
	once sync.Once
}

func (c *perAddrConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.n[c.addr]--; c.l.n[c.addr] <= 0 {
			delete(c.l.n, c.addr)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// serveWebSocket upgrades /stomp and hands the connection to accept.
func (b *Broker) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if !b.originAllowed(r) {
		b.log.Warn("web: origin refused", "peer", r.RemoteAddr, "origin", r.Header.Get("Origin"))
		refuseOrigin(w, r)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: WebSubprotocols,
		// The Origin was checked above, with web.allowed_origins.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept answered the request
	}
	// The STOMP reader bounds frames (stomp.max_*): messages are a byte
	// stream here, read in pieces, never held whole.
	c.SetReadLimit(-1)
	b.accept(newWSConn(c, r))
}

// wsChunk is the size of the pieces a message is read in.
const wsChunk = 32 << 10

// wsChunks holds the pieces: a connection takes one only while a message
// is arriving, so an idle WebSocket holds none.
var wsChunks = sync.Pool{New: func() any { b := make([]byte, wsChunk); return &b }}

// wsConn is a WebSocket connection as a net.Conn: Read returns the bytes
// of the messages received, text or binary, as one stream; each Write is
// sent as one message, text when it is valid UTF-8, binary otherwise.
// Deadlines behave as on a TCP connection (a read deadline that passes
// leaves the connection usable). At most two pieces of wsChunk bytes are
// held per connection while it receives, none while it waits for a
// message.
type wsConn struct {
	c             *websocket.Conn
	ctx           context.Context
	cancel        context.CancelFunc
	local, remote net.Addr
	chunks        chan *[]byte // filled pieces, from the reader goroutine
	cur           *[]byte      // the piece Read takes from
	pending       []byte       // what is left of it
	readErr       error        // set before chunks is closed
	closeOnce     sync.Once
	mu            sync.Mutex
	rdl, wdl      time.Time
	wtimer        *time.Timer   // cancels the write in progress at wdl
	rdlChanged    chan struct{} // closed and replaced by SetReadDeadline
	closed        chan struct{}
	tls           *tls.ConnectionState // of the HTTPS request upgraded (wss), nil for ws
}

// TLSConnectionState is the TLS state of the HTTPS connection the
// WebSocket was upgraded from: its client certificate logs in as on the
// STOMP TLS listener, and herald connections shows its version.
func (w *wsConn) TLSConnectionState() (tls.ConnectionState, bool) {
	if w.tls == nil {
		return tls.ConnectionState{}, false
	}
	return *w.tls, true
}

func newWSConn(c *websocket.Conn, r *http.Request) net.Conn {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		local = httpAddr("")
	}
	nc := NewWebSocketConn(c, local, httpAddr(r.RemoteAddr))
	nc.(*wsConn).tls = r.TLS
	return nc
}

// NewWebSocketConn adapts c (either end) to a net.Conn carrying a STOMP
// byte stream, as the web listener does: clients and benchmarks use it to
// run STOMP over WebSocket.
func NewWebSocketConn(c *websocket.Conn, local, remote net.Addr) net.Conn {
	ctx, cancel := context.WithCancel(context.Background())
	w := &wsConn{
		c: c, ctx: ctx, cancel: cancel,
		local: local, remote: remote,
		chunks:     make(chan *[]byte),
		rdlChanged: make(chan struct{}),
		closed:     make(chan struct{}),
	}
	go w.readLoop()
	return w
}

// httpAddr is a request's address as a *net.TCPAddr, so that the
// per-address connection limit counts it by IP like a TCP client.
func httpAddr(s string) net.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return &net.TCPAddr{}
}

func (w *wsConn) readLoop() {
	defer close(w.chunks)
	for {
		_, r, err := w.c.Reader(w.ctx)
		if err != nil {
			w.readErr = err
			return
		}
		for {
			buf := wsChunks.Get().(*[]byte)
			*buf = (*buf)[:cap(*buf)]
			n, err := r.Read(*buf)
			if n > 0 {
				*buf = (*buf)[:n]
				select {
				case w.chunks <- buf:
				case <-w.ctx.Done():
					wsChunks.Put(buf)
					w.readErr = net.ErrClosed
					return
				}
			} else {
				wsChunks.Put(buf)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				w.readErr = err
				return
			}
		}
	}
}

// timeoutError is what a passed deadline returns (net.Error, Timeout).
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func (w *wsConn) Read(p []byte) (int, error) {
	for len(w.pending) == 0 {
		w.mu.Lock()
		dl, changed := w.rdl, w.rdlChanged
		w.mu.Unlock()
		var timer *time.Timer
		var expired <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, timeoutError{}
			}
			timer = time.NewTimer(d)
			expired = timer.C
		}
		select {
		case buf, ok := <-w.chunks:
			if timer != nil {
				timer.Stop()
			}
			if !ok {
				return 0, w.wsErr(w.readErr)
			}
			w.cur, w.pending = buf, *buf
		case <-expired:
			return 0, timeoutError{}
		case <-changed:
			if timer != nil {
				timer.Stop()
			}
		case <-w.closed:
			if timer != nil {
				timer.Stop()
			}
			return 0, net.ErrClosed
		}
	}
	n := copy(p, w.pending)
	w.pending = w.pending[n:]
	if len(w.pending) == 0 {
		wsChunks.Put(w.cur)
		w.cur = nil
	}
	return n, nil
}

// wsErr maps the end of the message stream: a close from the peer is the
// end of the byte stream.
func (w *wsConn) wsErr(err error) error {
	if err == nil {
		return io.EOF
	}
	if s := websocket.CloseStatus(err); s == websocket.StatusNormalClosure || s == websocket.StatusGoingAway || s == websocket.StatusNoStatusRcvd {
		return io.EOF
	}
	if errors.Is(err, context.Canceled) {
		return net.ErrClosed
	}
	return err
}

func (w *wsConn) Write(p []byte) (int, error) {
	// The deadline may change while the write waits (a session being
	// dropped shortens it): the timer is reset by SetWriteDeadline.
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	w.mu.Lock()
	dl := w.wdl
	if !dl.IsZero() && time.Until(dl) <= 0 {
		w.mu.Unlock()
		return 0, timeoutError{}
	}
	w.wtimer = time.AfterFunc(time.Hour, cancel)
	if dl.IsZero() {
		w.wtimer.Stop()
	} else {
		w.wtimer.Reset(time.Until(dl))
	}
	timer := w.wtimer
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		timer.Stop()
		w.wtimer = nil
		w.mu.Unlock()
	}()
	typ := websocket.MessageText
	if !utf8.Valid(p) {
		typ = websocket.MessageBinary
	}
	if err := w.c.Write(ctx, typ, p); err != nil {
		w.mu.Lock()
		dl := w.wdl
		w.mu.Unlock()
		if !dl.IsZero() && !time.Now().Before(dl) {
			return 0, timeoutError{}
		}
		return 0, err
	}
	return len(p), nil
}

// Close sends a WebSocket close (in the background: the peer has five
// seconds to answer it) and stops the reader.
func (w *wsConn) Close() error {
	w.closeOnce.Do(func() {
		close(w.closed)
		go func() {
			w.c.Close(websocket.StatusNormalClosure, "")
			w.cancel()
		}()
	})
	return nil
}

func (w *wsConn) LocalAddr() net.Addr  { return w.local }
func (w *wsConn) RemoteAddr() net.Addr { return w.remote }

func (w *wsConn) SetDeadline(t time.Time) error {
	w.SetReadDeadline(t)
	return w.SetWriteDeadline(t)
}

func (w *wsConn) SetReadDeadline(t time.Time) error {
	w.mu.Lock()
	w.rdl = t
	close(w.rdlChanged)
	w.rdlChanged = make(chan struct{})
	w.mu.Unlock()
	return nil
}

func (w *wsConn) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	w.wdl = t
	if w.wtimer != nil { // a write in progress takes the new deadline
		if t.IsZero() {
			w.wtimer.Stop()
		} else {
			w.wtimer.Reset(time.Until(t))
		}
	}
	w.mu.Unlock()
	return nil
}
