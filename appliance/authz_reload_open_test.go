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
	n, tb := remoteUsersBroker(t, "hra-", 147)
	ip := n.Addr["srv"].String()
	var prod *client.Conn
	if err := n.In("srv", func() (err error) {
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

// remoteUsersBroker starts a broker with the matrix users file (loaded as
// heraldd does at start) listening on its own network namespace's address
// (198.18.OCTET.1, namespace prefix prefix), so that a client dialing from
// that namespace is not a loopback peer. Dial inside n.In("srv", ...).
func remoteUsersBroker(t *testing.T, prefix string, octet byte) (*testenv.Net, *testBroker) {
	t.Helper()
	n := testenv.NewNet(t, prefix, octet, "srv")
	users := filepath.Join(t.TempDir(), "users.toml")
	if err := os.WriteFile(users, []byte(withHashes(t, matrixUsers)), 0o600); err != nil {
		t.Fatal(err)
	}
	var tb *testBroker
	if err := n.In("srv", func() error {
		tb = mustStartBroker(t, func(c *appliance.Config) {
			c.Stomp.Listen = net.JoinHostPort(n.Addr["srv"].String(), "0")
			c.Auth.UsersFile = users
		})
		p, _, err := appliance.LoadAuth(*tb.B.Config())
		if err != nil {
			return err
		}
		tb.B.SetAuth(p)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n, tb
}
