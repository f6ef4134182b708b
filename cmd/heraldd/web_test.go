package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testcert"
)

// heraldd --web-listen serves STOMP over WebSocket; with web.tls = true in
// the config, over HTTPS with the STOMP certificate.
func TestWebListen(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", useTLS), func(t *testing.T) {
			dir := t.TempDir()
			web := freeAddr(t)
			var extra []string
			var hc *http.Client
			scheme := "ws"
			if useTLS {
				certs := testcert.New(t)
				conf := filepath.Join(dir, "herald.toml")
				src := fmt.Sprintf("[stomp]\ntls_cert = %q\ntls_key = %q\n[web]\ntls = true\n", certs.ServerCert, certs.ServerKey)
				if err := os.WriteFile(conf, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				extra = append(extra, "--config", conf)
				pem, err := os.ReadFile(certs.CAFile)
				if err != nil {
					t.Fatal(err)
				}
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(pem)
				hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
				scheme = "wss"
			}
			c := startChild(t, filepath.Join(dir, "data"), freeAddr(t), append(extra, "--web-listen", web)...)
			_ = c
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var ws *websocket.Conn
			var err error
			for {
				ws, _, err = websocket.Dial(ctx, scheme+"://"+web+"/stomp", &websocket.DialOptions{HTTPClient: hc, Subprotocols: appliance.WebSubprotocols})
				if err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("websocket dial %s://%s/stomp: %v", scheme, web, err)
			}
			nc := appliance.NewWebSocketConn(ws, &net.TCPAddr{}, &net.TCPAddr{})
			sc, err := client.Handshake(ctx, nc, "127.0.0.1", client.Options{AcceptVersion: "1.2"})
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			sub, err := sc.SubscribeReceipt(ctx, "/queue/webd", "auto")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sc.SendReceipt(ctx, "/queue/webd", []byte("through heraldd")); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-sub.C():
				if string(m.Body) != "through heraldd" {
					t.Fatalf("body %q", m.Body)
				}
			case <-ctx.Done():
				t.Fatal("no message")
			}
			// The dashboard is served at /.
			hs := "http"
			if useTLS {
				hs = "https"
			}
			if hc == nil {
				hc = http.DefaultClient
			}
			resp, err := hc.Get(hs + "://" + web + "/")
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(page), "new EventSource(") {
				t.Fatalf("GET /: %d, %d bytes without the dashboard's script", resp.StatusCode, len(page))
			}
		})
	}
}
