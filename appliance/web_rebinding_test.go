package appliance_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// TestWeb_OriginDNSRebinding: DNS rebinding: a page of http://rebind.attacker.example:PORT whose name
// the attacker re-points at 127.0.0.1 opens a WebSocket to the loopback
// web listener; the browser sends Origin and Host both naming the
// attacker's host, so the "same origin" test (Origin == scheme://Host)
// passes. Without a users file a loopback peer has full access, so any web
// page the local user visits can read and write every queue. The Origin
// check is "the only defence against cross-site WebSocket hijacking"
// (docs/design.md); it must not trust a Host that is not the listener's.
func TestWeb_OriginDNSRebinding(t *testing.T) {
	tb := mustStartBroker(t, nil) // no users file: loopback clients get full access
	addr := startWeb(t, tb, nil)
	_, port, _ := net.SplitHostPort(addr)
	evil := "rebind.attacker.example:" + port
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The listener's own origin, by address and as localhost, still is.
	for _, own := range []string{addr, "localhost:" + port} {
		ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/stomp", &websocket.DialOptions{
			Subprotocols: appliance.WebSubprotocols,
			Host:         own,
			HTTPHeader:   http.Header{"Origin": {"http://" + own}},
		})
		if err != nil {
			t.Fatalf("the listener's own origin http://%s: %v", own, err)
		}
		ws.CloseNow()
	}
	ws, resp, err := websocket.Dial(ctx, "ws://"+addr+"/stomp", &websocket.DialOptions{
		Subprotocols: appliance.WebSubprotocols,
		Host:         evil,
		HTTPHeader:   http.Header{"Origin": {"http://" + evil}},
	})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusForbidden {
			return // refused, before the upgrade
		}
		t.Fatalf("dial: %v", err)
	}
	nc := appliance.NewWebSocketConn(ws, &net.TCPAddr{}, &net.TCPAddr{})
	c, err := client.Handshake(ctx, nc, "127.0.0.1", client.Options{AcceptVersion: "1.2", DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("origin refused only at CONNECT? %v", err)
	}
	defer c.Close()
	if _, err := c.SendReceipt(ctx, "/queue/secret", []byte("written by a foreign page")); err != nil {
		t.Fatalf("send: %v", err)
	}
	t.Fatalf("a page of %s (Origin http://%s, Host %s) opened a STOMP session on the loopback listener with full access and wrote /queue/secret", evil, evil, evil)
}
