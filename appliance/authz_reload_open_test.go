package appliance_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestAuthReload_DroppingUsersFileClosesRemoteClients: a reload that drops
// auth.users_file puts the open policy in force, which accepts loopback
// clients only; a connection from another address that logged in with
// narrow grants is closed. It kept its connection with every permission
// (the open policy allows everything). The broker listens in a network
// namespace of its own on 198.18.147.1, and the client connects from there
// to that address: a peer that is not loopback.
func TestAuthReload_DroppingUsersFileClosesRemoteClients(t *testing.T) {
	n := testenv.NewNet(t, "hra-", 147, "srv")
	src := withHashes(t, matrixUsers)
	users := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(users, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ip := n.Addr["srv"].String()
	var tb *testBroker
	var prod *client.Conn
	if err := n.In("srv", func() error {
		tb = mustStartBroker(t, func(c *appliance.Config) {
			c.Stomp.Listen = net.JoinHostPort(ip, "0")
			c.Auth.UsersFile = users
		})
		p, _, err := appliance.LoadAuth(*tb.B.Config()) // as heraldd does at start
		if err != nil {
			return err
		}
		tb.B.SetAuth(p)
		prod, err = dialAs(tb.Addr, "producer", "p") // write on /queue/orders.> only
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if _, err := prod.SendReceipt(ctxT(t), "/topic/events.a", []byte("x")); err != nil {
		t.Fatalf("producer before the reload: %v", err)
	}
	cfg := *tb.B.Config()
	cfg.Auth.UsersFile = ""
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatalf("reload: %v", err)
	}
	_, err := prod.SendReceipt(ctxT(t), "/queue/secret", []byte("written"))
	if err == nil {
		t.Fatalf("after a reload without a users file, a connection from %s (write on /queue/orders.> only) wrote /queue/secret", ip)
	}
	if !strings.Contains(err.Error(), "authentication revoked") {
		t.Fatalf("the remote connection after the reload: %v, want an ERROR saying authentication was revoked", err)
	}
	if q, ok := tb.B.Queue("secret"); ok && q.Messages > 0 {
		t.Fatalf("/queue/secret holds %d messages", q.Messages)
	}
}
