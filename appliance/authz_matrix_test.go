package appliance_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

const matrixUsers = `
[users.producer]
password = "{pw:p}"
write = ["/queue/orders.>", "/topic/events.>"]

[users.consumer]
password = "{pw:c}"
read = ["/queue/orders.>", "/topic/events.>"]

[users.creator]
password = "{pw:n}"
read = ["/queue/new.>"]
write = ["/queue/new.>"]
create = ["/queue/new.>"]

[users.admin]
password = "{pw:a}"
groups = ["all"]

[users.responder]
password = "{pw:r}"
write = ["/queue/#tmp.>"]

[groups.all]
read = ["/queue/>", "/topic/>"]
write = ["/queue/>", "/topic/>"]
create = ["/queue/>"]
`

var matrixPasswords = map[string]string{"producer": "p", "consumer": "c", "creator": "n", "admin": "a", "responder": "r", "": ""}

// TestAuth_PermissionMatrix: users x destinations x frames over real
// connections. want is "" (allowed: a RECEIPT) or the missing permission
// the ERROR must name. NEW is replaced by a queue name no one used yet.
func TestAuth_PermissionMatrix(t *testing.T) {
	tb := authBroker(t, matrixUsers, func(c *appliance.Config) {
		c.Auth.AllowAnonymous = true
		c.Auth.Anonymous = auth.Grants{Read: []string{"/topic/public.>"}}
	})
	admin := mustDialAs(t, tb, "admin")
	for _, q := range []string{"/queue/orders.eu", "/queue/secret", "/queue/DLQ.orders.eu"} {
		if _, err := admin.SendReceipt(ctxT(t), q, []byte("seed")); err != nil {
			t.Fatalf("admin creates %s: %v", q, err)
		}
	}
	var fresh atomic.Int64
	cases := []struct{ user, frame, dest, want string }{
		{"producer", "SEND", "/queue/orders.eu", ""},
		{"producer", "SUBSCRIBE", "/queue/orders.eu", "read"},
		{"producer", "SEND", "/queue/secret", "write"},
		{"producer", "SEND", "/topic/events.a", ""},
		{"producer", "SUBSCRIBE", "/topic/events.>", "read"},
		{"producer", "SEND", "/queue/orders.NEW", "create"},
		{"producer", "SEND", "/queue/new.NEW", "write"},
		{"consumer", "SEND", "/queue/orders.eu", "write"},
		{"consumer", "SUBSCRIBE", "/queue/orders.eu", ""},
		{"consumer", "SUBSCRIBE", "/topic/events.>", ""},
		{"consumer", "SUBSCRIBE", "/topic/events.*", ""},
		{"consumer", "SUBSCRIBE", "/topic/>", "read"},
		{"consumer", "SUBSCRIBE", "/queue/DLQ.orders.eu", "read"},
		{"consumer", "SUBSCRIBE", "/queue/orders.NEW", "create"},
		{"consumer", "SUBSCRIBE", "/queue/secret", "read"},
		{"creator", "SEND", "/queue/new.NEW", ""},
		{"creator", "SUBSCRIBE", "/queue/new.NEW", ""},
		{"creator", "SEND", "/queue/orders.eu", "write"},
		{"creator", "SEND", "/topic/new.x", "write"},
		{"admin", "SEND", "/queue/secret", ""},
		{"admin", "SUBSCRIBE", "/queue/DLQ.orders.eu", ""},
		{"admin", "SUBSCRIBE", "/topic/>", ""},
		{"admin", "SEND", "/queue/anything.NEW", ""},
		{"admin", "SEND", "/topic/any", ""},
		{"", "SUBSCRIBE", "/topic/public.x", ""},
		{"", "SUBSCRIBE", "/topic/public.>", ""},
		{"", "SEND", "/topic/public.x", "write"},
		{"", "SUBSCRIBE", "/queue/orders.eu", "read"},
		{"", "SUBSCRIBE", "/topic/events.a", "read"},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-9s %-10s %-22s %s\n", "USER", "FRAME", "DESTINATION", "RESULT")
	deniedBefore := tb.B.AuthStats().Denied
	denied := map[string]uint64{}
	for _, tc := range cases {
		dest := strings.ReplaceAll(tc.dest, "NEW", fmt.Sprintf("q%d", fresh.Add(1)))
		c := mustDialAs(t, tb, tc.user)
		var err error
		if tc.frame == "SEND" {
			_, err = c.SendReceipt(ctxT(t), dest, []byte("x"))
		} else {
			_, err = c.SubscribeReceipt(ctxT(t), dest, "auto")
		}
		got := "allowed"
		var se *client.ServerError
		switch {
		case err == nil:
		case errors.As(err, &se):
			got = se.Frame.Get("message")
		default:
			t.Fatalf("%s %s %s: %v", tc.user, tc.frame, dest, err)
		}
		want := "allowed"
		if tc.want != "" {
			want = "permission denied: " + tc.want + " on " + dest
			name := tc.user
			if name == "" {
				name = "anonymous"
			}
			denied[name]++
			if se != nil && !strings.Contains(string(se.Frame.Body), dest) {
				t.Errorf("ERROR body does not name the destination: %q", se.Frame.Body)
			}
		}
		if got != want {
			t.Errorf("%s %s %s: got %q, want %q", tc.user, tc.frame, dest, got, want)
		}
		u := tc.user
		if u == "" {
			u = "(anon)"
		}
		fmt.Fprintf(&table, "%-9s %-10s %-22s %s\n", u, tc.frame, dest, got)
		c.Close()
	}
	t.Logf("permission matrix:\n%s", table.String())
	after := tb.B.AuthStats().Denied
	for u, n := range denied {
		if after[u]-deniedBefore[u] != n {
			t.Errorf("denials counted for %s: %d, want %d", u, after[u]-deniedBefore[u], n)
		}
	}
}

func mustDialAs(t *testing.T, tb *testBroker, user string) *client.Conn {
	t.Helper()
	c, err := dialAs(tb.Addr, user, matrixPasswords[user])
	if err != nil {
		t.Fatalf("login %q: %v", user, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A SEND in a transaction is checked when it arrives, not at COMMIT.
func TestAuth_TransactionSendChecked(t *testing.T) {
	tb := authBroker(t, matrixUsers, nil)
	c := mustDialAs(t, tb, "producer")
	if _, err := c.Request(ctxT(t), stomp.NewFrame("BEGIN", "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	_, err := c.Request(ctxT(t), stomp.NewFrame("SEND", "destination", "/queue/secret", "transaction", "t1"))
	var se *client.ServerError
	if !errors.As(err, &se) || se.Frame.Get("message") != "permission denied: write on /queue/secret" {
		t.Fatalf("SEND in a transaction to a queue without write: %v", err)
	}
	if v, _ := tb.B.Queue("secret"); v.Messages != 0 {
		t.Fatalf("secret holds %d messages", v.Messages)
	}
}

// Temporary queues are their owner's alone, with no grant needed, and so
// are their dead letters, even for a user allowed to read every queue.
func TestAuth_TempQueuesAreTheOwners(t *testing.T) {
	tb := authBroker(t, matrixUsers, nil)
	owner := mustDialAs(t, tb, "consumer") // no grant on /queue/#tmp...
	if _, err := owner.SubscribeReceipt(ctxT(t), "/temp-queue/replies", "client-individual"); err != nil {
		t.Fatalf("owner subscribes to its temporary queue: %v", err)
	}
	tmp := ""
	for _, q := range tb.B.Queues() {
		if strings.HasPrefix(q.Name, "#tmp.") {
			tmp = q.Name
		}
	}
	if tmp == "" {
		t.Fatal("no temporary queue exists")
	}
	for _, dest := range []string{"/queue/" + tmp, "/queue/DLQ." + tmp} {
		c := mustDialAs(t, tb, "admin")
		_, err := c.SubscribeReceipt(ctxT(t), dest, "auto")
		if err == nil {
			t.Fatalf("admin (read on /queue/>) subscribed to %s, another connection's", dest)
		}
	}
	if _, err := owner.SubscribeReceipt(ctxT(t), "/queue/DLQ."+tmp, "auto"); err != nil {
		t.Fatalf("the owner may read its temporary queue's dead letters: %v", err)
	}
	// Replies need write on /queue/#tmp.>; once the owner is gone they are
	// dropped with a RECEIPT saying so, not refused for want of create.
	resp := mustDialAs(t, tb, "responder")
	if _, err := resp.SendReceipt(ctxT(t), "/queue/"+tmp, []byte("reply")); err != nil {
		t.Fatalf("responder with write on /queue/#tmp.>: %v", err)
	}
	if _, err := mustDialAs(t, tb, "producer").SendReceipt(ctxT(t), "/queue/"+tmp, []byte("reply")); err == nil || !strings.Contains(err.Error(), "permission denied: write on /queue/#tmp.") {
		t.Fatalf("producer without write on /queue/#tmp.> replied: %v", err)
	}
	owner.Close()
	waitGone := time.Now().Add(5 * time.Second)
	for {
		if _, ok := tb.B.Queue(tmp); !ok {
			break
		}
		if time.Now().After(waitGone) {
			t.Fatalf("temporary queue %s outlived its owner", tmp)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r, err := resp.SendReceipt(ctxT(t), "/queue/"+tmp, []byte("late"))
	if err != nil || r.Get("dropped") == "" {
		t.Fatalf("late reply: %v %v, want a RECEIPT with dropped", r, err)
	}
}

// Without users too, the dead letters of a temporary queue are its owner's:
// before, any connection could read replies through /queue/DLQ.#tmp.*.
func TestAuth_TempQueueDLQNotReadableByOthers(t *testing.T) {
	tb := mustStartBroker(t, nil)
	owner := tb.Dial(t)
	if _, err := owner.SubscribeReceipt(ctxT(t), "/temp-queue/replies", "auto"); err != nil {
		t.Fatal(err)
	}
	tmp := ""
	for _, q := range tb.B.Queues() {
		if strings.HasPrefix(q.Name, "#tmp.") {
			tmp = q.Name
		}
	}
	other := tb.Dial(t)
	_, err := other.SubscribeReceipt(ctxT(t), "/queue/DLQ."+tmp, "auto")
	var se *client.ServerError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Frame.Get("message"), "permission denied: read on /queue/DLQ.#tmp.") {
		t.Fatalf("another connection subscribing to the dead letters of %s: %v", tmp, err)
	}
}
