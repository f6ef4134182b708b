package appliance_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testcert"
)

// A client certificate logs in over wss (and over an HTTPS SSE stream) as
// on the STOMP TLS listener, and herald connections shows the WebSocket's
// TLS version.
func TestWeb_ClientCertificateLogin(t *testing.T) {
	certs := testcert.New(t)
	tb := authBroker(t, tlsUsers, nil)
	tc, err := appliance.TLSConfig(appliance.StompConfig{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tb.B.ListenWeb("127.0.0.1:0", tc, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.String()
	aliceCert, aliceKey := certs.Client(t, "alice")
	dial := func(ctc *tls.Config, login, pass string) (*client.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: ctc}}
		ws, _, err := websocket.Dial(ctx, "wss://"+addr+"/stomp", &websocket.DialOptions{HTTPClient: hc, Subprotocols: appliance.WebSubprotocols})
		if err != nil {
			t.Fatalf("wss dial: %v", err)
		}
		ws.SetReadLimit(-1)
		nc := appliance.NewWebSocketConn(ws, &net.TCPAddr{}, &net.TCPAddr{})
		c, err := client.Handshake(context.Background(), nc, "127.0.0.1", client.Options{Login: login, Passcode: pass, DialTimeout: 10 * time.Second})
		if err != nil {
			nc.Close()
			return nil, err
		}
		t.Cleanup(func() { c.Close() })
		return c, nil
	}
	c, err := dial(certs.ClientTLS(t, aliceCert, aliceKey), "", "")
	if err != nil {
		t.Fatalf("wss with alice's certificate and no login: %v", err)
	}
	if _, err := c.SendReceipt(ctxT(t), "/queue/alice", []byte("x")); err != nil {
		t.Fatalf("alice's write over wss: %v", err)
	}
	var found bool
	for _, v := range tb.B.Connections() {
		if v.User == "alice" {
			found = true
			if v.Auth != "certificate" || !strings.HasPrefix(v.TLS, "TLS 1.") {
				t.Fatalf("alice's wss connection shows auth %q tls %q, want certificate and its TLS version", v.Auth, v.TLS)
			}
		}
	}
	if !found {
		t.Fatalf("no connection of alice in %+v", tb.B.Connections())
	}

	if _, err := c.SendReceipt(ctxT(t), "/queue/bob", []byte("x")); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("alice's certificate wrote to bob's queue: %v", err)
	}
	if _, err := dial(certs.ClientTLS(t, "", ""), "", ""); err == nil {
		t.Fatal("wss without a certificate nor a login was let in")
	}
	if _, err := dial(certs.ClientTLS(t, "", ""), "bob", "b"); err != nil {
		t.Fatalf("password over wss: %v", err)
	}
	// SSE over HTTPS: the certificate logs the stream in (alice may not
	// read this topic: the refusal names her).
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: certs.ClientTLS(t, aliceCert, aliceKey)}}
	resp, err := hc.Get("https://" + addr + "/events?topic=secret")
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 512)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body[:n]), "alice") {
		t.Fatalf("SSE with alice's certificate: %d %q, want 403 naming alice (logged in, not allowed)", resp.StatusCode, body[:n])
	}
}
