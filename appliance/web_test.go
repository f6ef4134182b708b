package appliance_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testcert"
)

// startWeb starts the web listener of tb's broker on 127.0.0.1:0 and
// returns its host:port.
func startWeb(t testing.TB, tb *testBroker, handler http.Handler) string {
	t.Helper()
	addr, err := tb.B.ListenWeb("127.0.0.1:0", nil, handler)
	if err != nil {
		t.Fatal(err)
	}
	return addr.String()
}

// dialWS opens a WebSocket to /stomp offering the STOMP subprotocols.
func dialWS(ctx context.Context, addr string, h http.Header) (*websocket.Conn, *http.Response, error) {
	return websocket.Dial(ctx, "ws://"+addr+"/stomp", &websocket.DialOptions{Subprotocols: appliance.WebSubprotocols, HTTPHeader: h})
}

// wsClient is Herald's Go client over a WebSocket.
func wsClient(t testing.TB, addr string, opts client.Options) (*client.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := dialWS(ctx, addr, nil)
	if err != nil {
		t.Fatalf("websocket dial: %v", err)
	}
	if ws.Subprotocol() != "v12.stomp" {
		t.Fatalf("subprotocol %q, want v12.stomp", ws.Subprotocol())
	}
	ws.SetReadLimit(-1)
	nc := appliance.NewWebSocketConn(ws, &net.TCPAddr{}, &net.TCPAddr{})
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 10 * time.Second
	}
	c, err := client.Handshake(context.Background(), nc, "127.0.0.1", opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

func TestWeb_StompOverWebSocket_QueueAndTopic(t *testing.T) {
	tb := mustStartBroker(t, nil)
	addr := startWeb(t, tb, nil)
	c, err := wsClient(t, addr, client.Options{AcceptVersion: "1.2", HeartBeat: [2]time.Duration{time.Second, time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	sub, err := c.SubscribeReceipt(ctx, "/queue/web.q", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one", "two", strings.Repeat("x", 100<<10)} {
		if _, err := c.SendReceipt(ctx, "/queue/web.q", []byte(body)); err != nil {
			t.Fatalf("SEND with receipt over WebSocket: %v", err)
		}
	}
	for i, want := range []string{"one", "two", strings.Repeat("x", 100<<10)} {
		m := recv(t, sub)
		if string(m.Body) != want {
			t.Fatalf("message %d: body of %d bytes, want %d", i, len(m.Body), len(want))
		}
		if _, err := c.Request(ctx, &stomp.Frame{Command: stomp.CmdAck, Headers: stomp.Headers{hdr("id", m.Get("ack"))}}); err != nil {
			t.Fatalf("ACK with receipt: %v", err)
		}
	}
	waitQueue(t, tb, "web.q", "empty after the ACKs", func(v appliance.QueueView) bool { return v.Messages == 0 && v.InFlight == 0 })

	// A topic: a TCP publisher, the WebSocket subscriber.
	tsub, err := c.SubscribeReceipt(ctx, "/topic/web.t.>", "auto")
	if err != nil {
		t.Fatal(err)
	}
	p := tb.Dial(t)
	if _, err := p.SendReceipt(ctx, "/topic/web.t.a", []byte("42")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, tsub); string(m.Body) != "42" || m.Get("destination") != "/topic/web.t.a" {
		t.Fatalf("topic message %q to %s", m.Body, m.Get("destination"))
	}
	// Heart-beats both ways keep it up past several intervals.
	time.Sleep(3 * time.Second)
	if _, err := c.SendReceipt(ctx, "/topic/web.t.b", []byte("43")); err != nil {
		t.Fatalf("after 3 s of heart-beats: %v", err)
	}
	if m := recv(t, tsub); string(m.Body) != "43" {
		t.Fatalf("topic message %q", m.Body)
	}
}

// Frames are a byte stream across messages: several frames in one
// message, a frame split over a text and a binary message.
func TestWeb_FramesAcrossMessages(t *testing.T) {
	tb := mustStartBroker(t, nil)
	addr := startWeb(t, tb, nil)
	ctx := ctxT(t)
	ws, _, err := dialWS(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)
	msgs := []struct {
		typ websocket.MessageType
		s   string
	}{
		{websocket.MessageText, "CONNECT\naccept-version:1.2\nhost:x\n\n\x00SUBSCRIBE\nid:1\ndestination:/queue/split\nreceipt:r1\n\n\x00SEN"},
		{websocket.MessageBinary, "D\ndestination:/queue/split\ncontent-length:3\n\na\x00b\x00"},
	}
	for _, m := range msgs {
		if err := ws.Write(ctx, m.typ, []byte(m.s)); err != nil {
			t.Fatal(err)
		}
	}
	nc := appliance.NewWebSocketConn(ws, &net.TCPAddr{}, &net.TCPAddr{})
	r := stomp.NewReader(nc, stomp.Limits{})
	want := []string{stomp.CmdConnected, stomp.CmdReceipt, stomp.CmdMessage}
	for _, cmd := range want {
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := r.ReadFrame()
		for err == nil && f == nil { // heart-beat
			f, err = r.ReadFrame()
		}
		if err != nil {
			t.Fatalf("waiting for %s: %v", cmd, err)
		}
		if f.Command != cmd {
			t.Fatalf("got %s (%s), want %s", f.Command, f.Get("message"), cmd)
		}
		if cmd == stomp.CmdMessage && string(f.Body) != "a\x00b" {
			t.Fatalf("body %q, want a NUL b (sent in a binary message)", f.Body)
		}
	}
}

func TestWeb_Origin(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Web.AllowedOrigins = []string{"https://dash.example:8443"}
	})
	addr := startWeb(t, tb, nil)
	ctx := ctxT(t)
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true},                           // not a browser
		{"http://" + addr, true},             // same origin
		{"https://dash.example:8443", true},  // listed
		{"https://DASH.example:8443/", true}, // listed, other spelling
		{"https://evil.example", false},
		{"http://dash.example:8443", false}, // other scheme
		{"null", false},
	} {
		h := http.Header{}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		ws, resp, err := dialWS(ctx, addr, h)
		if tc.ok {
			if err != nil {
				t.Fatalf("origin %q refused: %v", tc.origin, err)
			}
			ws.CloseNow()
			continue
		}
		if err == nil {
			ws.CloseNow()
			t.Fatalf("origin %q accepted", tc.origin)
		}
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("origin %q: %v, want 403", tc.origin, err)
		}
	}
	// Allowed at once after a reload that lists it.
	cfg := *tb.B.Config()
	cfg.Web.AllowedOrigins = append([]string{"https://evil.example"}, cfg.Web.AllowedOrigins...)
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Origin": {"https://evil.example"}}
	ws, _, err := dialWS(ctx, addr, h)
	if err != nil {
		t.Fatalf("origin listed by reload refused: %v", err)
	}
	ws.CloseNow()
}

func TestWeb_LoginAndPermissions(t *testing.T) {
	tb := authBroker(t, "[users.alice]\npassword = \"{pw:right}\"\nread = [\"/topic/ok.>\"]\nwrite = [\"/topic/ok.>\"]\n", nil)
	addr := startWeb(t, tb, nil)
	_, err := wsClient(t, addr, client.Options{Login: "alice", Passcode: "wrong"})
	var se *client.ServerError
	if !errors.As(err, &se) || se.Frame.Get("message") != "authentication failed" {
		t.Fatalf("wrong password over WebSocket: %v, want ERROR authentication failed", err)
	}
	c, err := wsClient(t, addr, client.Options{Login: "alice", Passcode: "right", AcceptVersion: "1.2"})
	if err != nil {
		t.Fatalf("right password refused: %v", err)
	}
	ctx := ctxT(t)
	if _, err := c.SubscribeReceipt(ctx, "/topic/ok.x", "auto"); err != nil {
		t.Fatalf("permitted SUBSCRIBE: %v", err)
	}
	if _, err := c.SubscribeReceipt(ctx, "/topic/secret", "auto"); !errors.As(err, &se) || !strings.Contains(se.Frame.Get("message"), "denied") {
		t.Fatalf("SUBSCRIBE without read permission: %v, want an ERROR", err)
	}
}

// A WebSocket counts against the connection limits like a TCP client.
func TestWeb_ConnectionLimits(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Stomp.MaxConnectionsPerAddress = 1 })
	addr := startWeb(t, tb, nil)
	tb.Dial(t) // 127.0.0.1 holds its one connection over TCP
	_, err := wsClient(t, addr, client.Options{})
	var se *client.ServerError
	if !errors.As(err, &se) || !strings.Contains(se.Frame.Get("message"), "stomp.max_connections_per_address") {
		t.Fatalf("second connection from 127.0.0.1 over WebSocket: %v, want refused naming stomp.max_connections_per_address", err)
	}
}

func TestWeb_ConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*appliance.Config)
		want   string // "" = valid
	}{
		{func(c *appliance.Config) { c.Web.Listen = "127.0.0.1:15674" }, ""},
		{func(c *appliance.Config) { c.Web.Listen = "15674" }, "web.listen"},
		{func(c *appliance.Config) { c.Web.TLS = true }, "web.tls = true: set stomp.tls_cert"},
		{func(c *appliance.Config) {
			c.Web.TLS, c.Stomp.TLSCert, c.Stomp.TLSKey = true, "/c.pem", "/k.pem"
		}, ""},
		{func(c *appliance.Config) { c.Web.AllowedOrigins = []string{"*", "https://a.example:8443"} }, ""},
		{func(c *appliance.Config) { c.Web.AllowedOrigins = []string{"a.example"} }, "web.allowed_origins"},
		{func(c *appliance.Config) { c.Web.AllowedOrigins = []string{"https://a.example/path"} }, "web.allowed_origins"},
		{func(c *appliance.Config) { c.Web.SSEBufferBytes = 100 }, "web.sse_buffer_bytes"},
		{func(c *appliance.Config) { c.Web.SSEHeartbeat = appliance.Duration{Duration: time.Hour} }, "web.sse_heartbeat"},
	} {
		c := appliance.DefaultConfig()
		tc.mutate(&c)
		err := c.Validate()
		if tc.want == "" && err != nil {
			t.Errorf("%+v: %v", c.Web, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want an error naming %s", c.Web, err, tc.want)
		}
	}
	// A web listener other hosts reach needs users, as stomp.listen does.
	c := appliance.DefaultConfig()
	c.Web.Listen = "0.0.0.0:15674"
	if err := c.CheckExposure(); err == nil || !strings.Contains(err.Error(), "web.listen") {
		t.Fatalf("web.listen on every interface without users: %v, want refused", err)
	}
	c.Web.Listen = "127.0.0.1:15674"
	if err := c.CheckExposure(); err != nil {
		t.Fatalf("web.listen on loopback: %v", err)
	}
}

// A WebSocket subscriber that stops reading is bounded like a TCP one:
// past topics.subscriber_buffer it is disconnected and counted, and the
// publisher is not held.
func TestWeb_SlowWebSocketSubscriber(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.SubscriberBuffer = 100
		c.Stomp.MaxOutputBytes = 64 << 10
	})
	addr := startWeb(t, tb, nil)
	ctx := ctxT(t)
	ws, _, err := dialWS(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	// CONNECT and SUBSCRIBE, then never read again.
	if err := ws.Write(ctx, websocket.MessageText, []byte("CONNECT\naccept-version:1.2\nhost:x\n\n\x00SUBSCRIBE\nid:1\ndestination:/topic/fast\n\n\x00")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the subscription", func() bool {
		for _, v := range tb.B.Topics() {
			if v.Name == "fast" && v.Subscribers == 1 {
				return true
			}
		}
		return false
	})
	p := tb.Dial(t)
	body := []byte(strings.Repeat("y", 8<<10))
	for i := 0; tb.B.Stats().SlowDrops == 0; i++ {
		if i > 20000 {
			t.Fatal("160 MiB published and the WebSocket subscriber that does not read was never dropped")
		}
		if _, err := p.SendReceipt(ctx, "/topic/fast", body); err != nil {
			t.Fatalf("publisher held or refused by a slow WebSocket subscriber: %v", err)
		}
	}
	waitFor(t, 20*time.Second, "the slow connection gone (within the 5 s given to the writes of a dropped session)", func() bool { return tb.B.Stats().Connections == 1 })
}

// web.tls serves the STOMP certificate, and a reload that renews it
// applies to the next handshake of the web listener.
func TestWeb_TLSCertificateReload(t *testing.T) {
	first, second := testcert.New(t), testcert.New(t)
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Web.Listen, c.Web.TLS = "127.0.0.1:0", true
		c.Stomp.TLSCert, c.Stomp.TLSKey = first.ServerCert, first.ServerKey
	})
	tc, err := appliance.TLSConfig(tb.Cfg.Stomp)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tb.B.ListenWeb("127.0.0.1:0", tc, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.String()
	dialWith := func(ca string) error {
		pem, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "wss://"+addr+"/stomp", &websocket.DialOptions{HTTPClient: hc, Subprotocols: appliance.WebSubprotocols})
		if err == nil {
			ws.CloseNow()
		}
		return err
	}
	if err := dialWith(first.CAFile); err != nil {
		t.Fatalf("wss with the first certificate: %v", err)
	}
	cfg := *tb.B.Config()
	cfg.Stomp.TLSCert, cfg.Stomp.TLSKey = second.ServerCert, second.ServerKey
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if err := dialWith(second.CAFile); err != nil {
		t.Fatalf("wss after the reload, trusting the new certificate's CA: %v", err)
	}
	if err := dialWith(first.CAFile); err == nil {
		t.Fatal("the old certificate is still served after the reload")
	}
}

// HTTP connections that never upgrade are bounded too: at most
// stomp.max_connections at once, each closed 10 s after it last sent a
// request.
func TestWeb_IdleHTTPConnectionsBounded(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Stomp.MaxConnections = 2 })
	addr := startWeb(t, tb, nil)
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	// The third waits for a slot: its request is not answered while two
	// idle connections hold them.
	resp := make(chan error, 1)
	go func() {
		hc := &http.Client{Timeout: 30 * time.Second}
		r, err := hc.Get("http://" + addr + "/")
		if err == nil {
			r.Body.Close()
		}
		resp <- err
	}()
	select {
	case err := <-resp:
		t.Fatalf("answered (%v) while stomp.max_connections = 2 idle connections were open", err)
	case <-time.After(time.Second):
	}
	idle[0].Close()
	select {
	case err := <-resp:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not answered once a slot was free")
	}
}
