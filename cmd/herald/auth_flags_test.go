package main

import (
	"crypto/rand"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/internal/testbroker"
	"github.com/herald-mq/herald/internal/testcert"
)

// TestCLI_TLSAndLogin: herald send and receive with --login and
// HERALD_PASSCODE, --tls/--ca, and a client certificate (--cert, --key).
func TestCLI_TLSAndLogin(t *testing.T) {
	h, err := auth.HashPassword("secret", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f, err := auth.DecodeUsers([]byte(`
[users.bob]
password = "` + h + `"
read = ["/queue/bob"]
write = ["/queue/bob"]
create = ["/queue/bob"]
[users.alice]
read = ["/queue/alice"]
write = ["/queue/alice"]
create = ["/queue/alice"]
`))
	if err != nil {
		t.Fatal(err)
	}
	tb := testbroker.Start(t, nil)
	p, err := auth.NewPolicy(auth.Options{Users: f})
	if err != nil {
		t.Fatal(err)
	}
	tb.B.SetAuth(p)
	certs := testcert.New(t)
	tc, err := appliance.TLSConfig(appliance.StompConfig{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tb.B.ListenTLS("127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.String()
	aliceCert, aliceKey := certs.Client(t, "alice")

	t.Setenv("HERALD_PASSCODE", "secret")
	if code, _, errs := runCLI(t, "", "--server", addr, "--ca", certs.CAFile, "--login", "bob", "send", "--receipt", "/queue/bob", "over tls"); code != 0 {
		t.Fatalf("send over TLS with a password: exit %d: %s", code, errs)
	}
	if code, out, errs := runCLI(t, "", "--server", addr, "--tls", "--ca", certs.CAFile, "--login", "bob", "receive", "--count", "1", "/queue/bob"); code != 0 || out != "over tls\n" {
		t.Fatalf("receive over TLS: exit %d %q: %s", code, out, errs)
	}
	if code, _, errs := runCLI(t, "", "--server", addr, "--ca", certs.CAFile, "--cert", aliceCert, "--key", aliceKey, "send", "--receipt", "/queue/alice", "mtls"); code != 0 {
		t.Fatalf("send with a client certificate: exit %d: %s", code, errs)
	}
	if code, out, errs := runCLI(t, "", "--server", addr, "--ca", certs.CAFile, "--cert", aliceCert, "--key", aliceKey, "receive", "--count", "1", "/queue/alice"); code != 0 || out != "mtls\n" {
		t.Fatalf("receive with a client certificate: exit %d %q: %s", code, out, errs)
	}
	// Plain TCP with a password too.
	if code, _, errs := runCLI(t, "", "--server", tb.Addr, "--login", "bob", "send", "--receipt", "/queue/bob", "plain"); code != 0 {
		t.Fatalf("send over TCP with a password: exit %d: %s", code, errs)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--server", tb.Addr, "--login", "bob", "--passcode", "wrong", "send", "/queue/bob", "x"}, exitOther, "authentication failed"},
		{[]string{"--server", addr, "--ca", certs.CAFile, "--cert", aliceCert, "send", "/queue/alice", "x"}, exitUsage, "--cert and --key go together"},
		{[]string{"--server", addr, "--tls", "--login", "bob", "send", "/queue/bob", "x"}, exitUnavailable, "certificate"},
		{[]string{"--server", addr, "--ca", certs.CAFile, "--cert", aliceCert, "--key", aliceKey, "send", "--receipt", "/queue/bob", "x"}, exitOther, "permission denied: write on /queue/bob"},
	} {
		code, _, errs := runCLI(t, "", tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("herald %v: exit %d %q, want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}
