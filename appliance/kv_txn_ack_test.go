package appliance_test

import (
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// kvGet reads one key's value through a kv-get SUBSCRIBE ("" and false when
// the key does not exist).
func kvGetAs(t *testing.T, tb *testBroker, login, pass, dest string) (string, bool) {
	t.Helper()
	c, err := dialAs(tb.Addr, login, pass)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := c.SubscribeReceipt(ctxT(t), dest, "auto", hdr("kv-get", "true"))
	if err != nil {
		t.Fatal(err)
	}
	val, found := "", false
	for {
		m := recv(t, g)
		if m.Get("kv-snapshot-complete") != "" {
			return val, found
		}
		val, found = string(m.Body), true
	}
}

// TestKVTxn_AckIsNotAWrite: an ACK with a destination header, buffered
// into a transaction that holds /kv/ SENDs, is refused; it used to become
// a key-value write at COMMIT, unchecked, so that a user who may write
// only /kv/mine.> overwrote /kv/secret.k.
func TestKVTxn_AckIsNotAWrite(t *testing.T) {
	tb := authBroker(t, `
[users.w]
password = "{pw:w}"
read = ["/kv/>"]
write = ["/kv/mine.>"]
create = ["/kv/mine.>"]

[users.admin]
password = "{pw:a}"
read = ["/kv/>"]
write = ["/kv/>"]
create = ["/kv/>"]
`, nil)
	admin, err := dialAs(tb.Addr, "admin", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SendReceipt(ctxT(t), "/kv/secret.k", []byte("orig")); err != nil {
		t.Fatal(err)
	}
	// The user may not write /kv/secret.k directly.
	w, err := dialAs(tb.Addr, "w", "w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.SendReceipt(ctxT(t), "/kv/secret.k", []byte("direct")); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("direct write to /kv/secret.k: %v, want permission denied", err)
	}
	w, err = dialAs(tb.Addr, "w", "w")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "t")); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&stomp.Frame{Command: stomp.CmdSend, Headers: stomp.Headers{{Key: "destination", Value: "/kv/mine.a"}, {Key: "transaction", Value: "t"}}, Body: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	ack := &stomp.Frame{Command: stomp.CmdAck, Headers: stomp.Headers{{Key: "id", Value: "x"}, {Key: "transaction", Value: "t"}, {Key: "destination", Value: "/kv/secret.k"}}, Body: []byte("pwned")}
	if err := w.Write(ack); err != nil {
		t.Fatal(err)
	}
	r, err := w.Request(ctxT(t), stomp.NewFrame(stomp.CmdCommit, "transaction", "t"))
	t.Logf("COMMIT: receipt %v, err %v", r, err)
	if v, _ := kvGetAs(t, tb, "admin", "a", "/kv/secret.k"); v != "orig" {
		t.Fatalf("/kv/secret.k is %q after user w's transaction (w has no write permission on it); want %q", v, "orig")
	}
}

// TestKVTxn_AckRefused: an ACK after a /kv/ SEND in one transaction gets
// an ERROR naming the mixed transaction; it used to be accepted and
// journaled as a put to bucket "" key "" at COMMIT, which failed the
// batch and reported the journal unhealthy.
func TestKVTxn_AckRefused(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	if err := c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", "t")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Request(ctxT(t), &stomp.Frame{Command: stomp.CmdSend, Headers: stomp.Headers{{Key: "destination", Value: "/kv/b.k"}, {Key: "transaction", Value: "t"}}, Body: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	_, ackErr := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdAck, "id", "some-ack", "transaction", "t"))
	_, commitErr := c.Request(ctxT(t), stomp.NewFrame(stomp.CmdCommit, "transaction", "t"))
	t.Logf("ACK: %v; COMMIT: %v", ackErr, commitErr)
	if ok, since := tb.B.JournalHealthy(); !ok {
		t.Fatalf("journal reported unhealthy (since %v) after a client's ACK in a key-value transaction; ACK err %v, COMMIT err %v", since, ackErr, commitErr)
	}
	if ackErr == nil || !strings.Contains(ackErr.Error(), "mixed transaction") {
		t.Fatalf("ACK in a key-value transaction: %v, want an ERROR naming the mixed transaction (COMMIT: %v)", ackErr, commitErr)
	}
}
