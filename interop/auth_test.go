package interop_test

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/internal/testcert"
)

// stomp.py against users, permissions and TLS: a real third-party client.

type pyAuthResult struct {
	Connected map[string]string `json:"connected"`
	Errors    []struct {
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	} `json:"errors"`
	Receipts  []string `json:"receipts"`
	Exception string   `json:"exception"`
}

func runPyAuth(t *testing.T, addr, login, pass, ca, cert, key, action, dest string) pyAuthResult {
	t.Helper()
	py := stompPython(t)
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	var res pyAuthResult
	runJSON(t, 30*time.Second, &res, py, "-u", testdata(t, "stomppy_auth.py"), addr, dash(login), dash(pass), dash(ca), dash(cert), dash(key), action, dest)
	return res
}

func TestStompPy_AuthAndTLS(t *testing.T) {
	stompPython(t)
	h, err := auth.HashPassword("pw", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f, err := auth.DecodeUsers([]byte("[users.bob]\npassword = \"" + h + "\"\nwrite = [\"/queue/bob\"]\ncreate = [\"/queue/bob\"]\n[users.alice]\nread = [\"/topic/alice.>\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	tb := startBroker(t, nil)
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
	tlsAddr := ln.String()
	aliceCert, aliceKey := certs.Client(t, "alice")

	ok := func(name string, r pyAuthResult) {
		t.Helper()
		if r.Connected == nil || len(r.Errors) != 0 || len(r.Receipts) != 1 {
			t.Errorf("%s: %+v, want CONNECTED and a RECEIPT", name, r)
		}
	}
	refused := func(name string, r pyAuthResult, message string) {
		t.Helper()
		if len(r.Errors) == 0 || r.Errors[0].Headers["message"] != message {
			t.Errorf("%s: %+v, want an ERROR %q", name, r, message)
		}
	}
	ok("TCP, password", runPyAuth(t, tb.Addr, "bob", "pw", "", "", "", "send", "/queue/bob"))
	refused("TCP, wrong password", runPyAuth(t, tb.Addr, "bob", "nope", "", "", "", "none", ""), "authentication failed")
	refused("TCP, no permission", runPyAuth(t, tb.Addr, "bob", "pw", "", "", "", "send", "/queue/other"), "permission denied: write on /queue/other")
	ok("TLS, password", runPyAuth(t, tlsAddr, "bob", "pw", certs.CAFile, "", "", "send", "/queue/bob"))
	ok("TLS, client certificate", runPyAuth(t, tlsAddr, "", "", certs.CAFile, aliceCert, aliceKey, "subscribe", "/topic/alice.>"))
	refused("TLS, client certificate, no permission", runPyAuth(t, tlsAddr, "", "", certs.CAFile, aliceCert, aliceKey, "send", "/queue/bob"), "permission denied: write on /queue/bob")
	refused("TLS, no certificate, no login", runPyAuth(t, tlsAddr, "", "", certs.CAFile, "", "", "none", ""), "authentication failed")
	if v, _ := tb.B.Queue("bob"); v.Messages != 2 {
		t.Errorf("queue bob holds %d messages, want the 2 bob sent", v.Messages)
	}
	if st := tb.B.AuthStats(); st.Denied["bob"] != 1 || st.Denied["alice"] != 1 || st.Failures != 2 {
		t.Errorf("auth stats %+v: want 1 denial each for bob and alice, 2 failures", st)
	}
}

// TestStompPy_TLSConnectsReliably: stomp.py connects over TLS every time.
// With TLS 1.3 session tickets, about 7% of its connections lost their
// CONNECT (the server's connect timeout) or failed with SSLEOFError on a
// busy machine: its receiver thread reads while the main thread writes.
func TestStompPy_TLSConnectsReliably(t *testing.T) {
	stompPython(t)
	tb := startBroker(t, nil)
	certs := testcert.New(t)
	tc, err := appliance.TLSConfig(appliance.StompConfig{TLSCert: certs.ServerCert, TLSKey: certs.ServerKey, TLSClientCA: certs.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tb.B.ListenTLS("127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		r := runPyAuth(t, ln.String(), "", "", certs.CAFile, "", "", "none", "")
		if r.Connected == nil || len(r.Errors) != 0 {
			t.Fatalf("connection %d over TLS: %+v", i, r)
		}
	}
}
