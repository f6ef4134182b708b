package appliance_test

import (
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/stomp"
)

// policyOf compiles users file src ({pw:X} as in authBroker).
func policyOf(t *testing.T, src string) *auth.Policy {
	t.Helper()
	src = withHashes(t, src)
	f, err := auth.DecodeUsers([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p, err := auth.NewPolicy(auth.Options{Users: f})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func expectError(t *testing.T, errs <-chan *stomp.Frame, message string) {
	t.Helper()
	select {
	case f := <-errs:
		if f.Get("message") != message {
			t.Fatalf("ERROR %q, want %q", f.Get("message"), message)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no ERROR %q within 5s", message)
	}
}

// TestAuth_SetAuthRevokes: a new policy applies to the next frame, and a
// connection that may no longer read what it subscribed to, or whose user
// is gone, gets an ERROR naming it and is closed; the others go on.
func TestAuth_SetAuthRevokes(t *testing.T) {
	tb := authBroker(t, matrixUsers, nil)
	cons := mustDialAs(t, tb, "consumer")
	if _, err := cons.SubscribeReceipt(ctxT(t), "/topic/events.>", "auto"); err != nil {
		t.Fatal(err)
	}
	if _, err := mustDialAs(t, tb, "admin").SendReceipt(ctxT(t), "/queue/orders.eu", []byte("first")); err != nil {
		t.Fatal(err)
	}
	keeper := mustDialAs(t, tb, "consumer") // holds only what stays granted
	qsub, err := keeper.SubscribeReceipt(ctxT(t), "/queue/orders.eu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	prod := mustDialAs(t, tb, "producer")
	creator := mustDialAs(t, tb, "creator")

	// consumer loses /topic/events.>, producer is deleted, creator gains
	// /topic/new.>.
	tb.B.SetAuth(policyOf(t, `
[users.consumer]
password = "{pw:c}"
read = ["/queue/orders.>"]
[users.creator]
password = "{pw:n}"
read = ["/queue/new.>"]
write = ["/queue/new.>", "/topic/new.>"]
create = ["/queue/new.>"]
[users.admin]
password = "{pw:a}"
write = ["/queue/>"]
`))
	expectError(t, cons.Errors(), "permission denied: read on /topic/events.>")
	expectError(t, prod.Errors(), "authentication revoked")
	for _, c := range []interface{ Done() <-chan struct{} }{cons, prod} {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a revoked connection is still open")
		}
	}
	if _, err := creator.SendReceipt(ctxT(t), "/topic/new.x", []byte("now allowed")); err != nil {
		t.Fatalf("a grant added by the reload does not apply: %v", err)
	}
	admin := mustDialAs(t, tb, "admin")
	if _, err := admin.SendReceipt(ctxT(t), "/queue/orders.eu", []byte("still read")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, qsub); string(m.Body) != "first" {
		t.Fatalf("the kept subscription got %q", m.Body)
	}
	if m := recv(t, qsub); string(m.Body) != "still read" {
		t.Fatalf("the kept subscription got %q", m.Body)
	}
	if _, err := creator.SubscribeReceipt(ctxT(t), "/queue/orders.eu", "auto"); err == nil {
		t.Fatal("creator read orders.eu without a grant")
	}
}
