package appliance_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testcert"
	"github.com/herald-mq/herald/internal/testenv"
)

const tlsUsers = `
[users.bob]
password = "{pw:b}"
write = ["/queue/bob"]
create = ["/queue/bob"]

[users.alice]
write = ["/queue/alice"]
create = ["/queue/alice"]

[users.svc]
write = ["/queue/svc"]
create = ["/queue/svc"]
`

// tlsBroker is a broker with users tlsUsers and a TLS listener whose client
// CA is certs' CA; it returns the TLS address.
func tlsBroker(t *testing.T, certs *testcert.Set) (*testBroker, string) {
	t.Helper()
	tb := authBroker(t, tlsUsers, nil)
	tc, err := appliance.TLSConfig(appliance.StompConfig{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := tb.B.ListenTLS("127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	return tb, addr.String()
}

func dialTLS(addr, login, pass string, tc *tls.Config) (*client.Conn, error) {
	return client.Dial(context.Background(), addr, client.Options{Login: login, Passcode: pass, TLS: tc, DialTimeout: 5 * time.Second})
}

// TestTLS_Identities: passwords over TLS, client certificates mapped to
// users by common name or subject alternative name, and what is refused.
func TestTLS_Identities(t *testing.T) {
	certs := testcert.New(t)
	tb, addr := tlsBroker(t, certs)
	aliceCert, aliceKey := certs.Client(t, "alice")
	svcCert, svcKey := certs.Client(t, "Service Account", "svc")
	strangerCert, strangerKey := certs.Client(t, "stranger")

	try := func(login, pass string, tc *tls.Config, dest string) error {
		t.Helper()
		c, err := dialTLS(addr, login, pass, tc)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.SendReceipt(ctxT(t), dest, []byte("x"))
		return err
	}
	noCert := certs.ClientTLS(t, "", "")
	if err := try("bob", "b", noCert, "/queue/bob"); err != nil {
		t.Fatalf("password over TLS: %v", err)
	}
	if err := try("", "", certs.ClientTLS(t, aliceCert, aliceKey), "/queue/alice"); err != nil {
		t.Fatalf("client certificate CN=alice: %v", err)
	}
	if err := try("", "", certs.ClientTLS(t, aliceCert, aliceKey), "/queue/bob"); err == nil || !strings.Contains(err.Error(), "permission denied: write on /queue/bob") {
		t.Fatalf("alice's certificate gave bob's permission: %v", err)
	}
	if err := try("", "", certs.ClientTLS(t, svcCert, svcKey), "/queue/svc"); err != nil {
		t.Fatalf("client certificate with SAN svc: %v", err)
	}
	if err := try("bob", "b", certs.ClientTLS(t, aliceCert, aliceKey), "/queue/bob"); err != nil {
		t.Fatalf("alice's certificate with bob's login and password: %v", err)
	}
	for name, tc := range map[string]*tls.Config{"no certificate": noCert, "a certificate of no user": certs.ClientTLS(t, strangerCert, strangerKey)} {
		if err := try("", "", tc, "/queue/alice"); err == nil || !strings.Contains(err.Error(), "authentication failed") {
			t.Errorf("%s and no login: %v, want authentication failed", name, err)
		}
	}
	if err := try("alice", "", noCert, "/queue/alice"); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("login alice (certificate only) without her certificate: %v", err)
	}
	// A certificate of another CA fails the handshake.
	other := testcert.New(t)
	oc, ok := other.Client(t, "alice")
	if err := try("", "", certs.ClientTLS(t, oc, ok), "/queue/alice"); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	// TLS 1.1 and below are refused.
	old := certs.ClientTLS(t, "", "")
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if err := try("bob", "b", old, "/queue/bob"); err == nil {
		t.Error("a TLS 1.1 client was accepted")
	}
	// Plain STOMP on the TLS port gets no CONNECTED.
	if c, err := client.Dial(context.Background(), addr, client.Options{Login: "bob", Passcode: "b", DialTimeout: 2 * time.Second}); err == nil {
		c.Close()
		t.Error("plain STOMP on the TLS port was answered")
	}
	if !strings.Contains(strings.Join(tb.B.Stats().Listeners, " "), addr) {
		t.Errorf("listeners %v do not include the TLS listener %s", tb.B.Stats().Listeners, addr)
	}
}

// TestTLS_OpenSSLClient: openssl s_client, a third-party TLS stack, connects
// with a client certificate and gets CONNECTED.
func TestTLS_OpenSSLClient(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		testenv.Missing(t, testenv.InteropEnv, "needs openssl (apt-get install openssl)")
	}
	certs := testcert.New(t)
	_, addr := tlsBroker(t, certs)
	cert, key := certs.Client(t, "alice")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-cert", cert, "-key", key}, "CONNECTED"},
		{nil, "message:authentication failed"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		args := append([]string{"s_client", "-connect", addr, "-CAfile", certs.CAFile, "-verify_return_error", "-quiet"}, tc.args...)
		cmd := exec.CommandContext(ctx, "openssl", args...)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stdin.Write([]byte("CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"))
		found := false
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), tc.want) {
				found = true
				break
			}
		}
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		cancel()
		if !found {
			t.Errorf("openssl s_client %v: no %q", tc.args, tc.want)
		}
	}
}

// The admin view of connections shows who logged in, how, and over what.
func TestTLS_ConnectionsView(t *testing.T) {
	certs := testcert.New(t)
	tb, addr := tlsBroker(t, certs)
	cert, key := certs.Client(t, "alice")
	a, err := dialTLS(addr, "", "", certs.ClientTLS(t, cert, key))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dialAs(tb.Addr, "bob", "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := map[string]appliance.ConnView{}
	for _, v := range tb.B.Connections() {
		got[v.User] = v
	}
	if v := got["alice"]; v.Auth != "certificate" || !strings.HasPrefix(v.TLS, "TLS 1.") {
		t.Errorf("alice's connection: %+v, want auth certificate over TLS", v)
	}
	if v := got["bob"]; v.Auth != "password" || v.TLS != "" {
		t.Errorf("bob's connection: %+v, want auth password over plain TCP", v)
	}
}

// A connection refused at accept (here: stomp.max_connections_per_address)
// that never starts its TLS handshake must not hold the accept loop: its
// ERROR is written under a deadline for reads too.
func TestTLS_SilentRefusedConnectionDoesNotBlockAccept(t *testing.T) {
	certs := testcert.New(t)
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Stomp.MaxConnectionsPerAddress = 1 })
	tc, err := appliance.TLSConfig(appliance.StompConfig{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tb.B.ListenTLS("127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.String()
	first, err := dialTLS(addr, "", "", certs.ClientTLS(t, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", addr) // refused: over the per-address limit; sends nothing
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	time.Sleep(100 * time.Millisecond) // let the accept loop take it
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dialTLS(addr, "", "", certs.ClientTLS(t, "", ""))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection accepted 10 s after a silent refused one: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SetTLS replaces the certificate and client CA for the next handshakes;
// a connection already open goes on.
func TestTLS_SetTLSReplacesCertificates(t *testing.T) {
	oldCerts := testcert.New(t)
	tb, addr := tlsBroker(t, oldCerts)
	oldAlice, oldKey := oldCerts.Client(t, "alice")
	open, err := dialTLS(addr, "", "", oldCerts.ClientTLS(t, oldAlice, oldKey))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	newCerts := testcert.New(t)
	tc, err := appliance.TLSConfig(appliance.StompConfig{TLSCert: newCerts.ServerCert, TLSKey: newCerts.ServerKey, TLSClientCA: newCerts.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	tb.B.SetTLS(tc)
	if c, err := dialTLS(addr, "", "", oldCerts.ClientTLS(t, oldAlice, oldKey)); err == nil {
		c.Close()
		t.Fatal("a client trusting only the old CA connected after SetTLS")
	}
	newAlice, newKey := newCerts.Client(t, "alice")
	c, err := dialTLS(addr, "", "", newCerts.ClientTLS(t, newAlice, newKey))
	if err != nil {
		t.Fatalf("the new certificate and client CA: %v", err)
	}
	c.Close()
	if _, err := open.SendReceipt(ctxT(t), "/queue/alice", []byte("still here")); err != nil {
		t.Fatalf("the connection opened before SetTLS: %v", err)
	}
}
