package appliance_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// TestAuthReload_KeepsTempQueueSubscribers: a reload that changes nothing for a user must not close its connection
// because it reads its own temporary queue: temporary queues need no grant
// (README: "A temporary queue and its dead letters are its owner
// connection's alone, with or without users"), yet SetAuth re-checks the
// subscription as read on /queue/#tmp.SESSION.NAME.
func TestAuthReload_KeepsTempQueueSubscribers(t *testing.T) {
	tb := authBroker(t, matrixUsers, nil)
	owner := mustDialAs(t, tb, "consumer") // no grant on /queue/#tmp.>
	if _, err := owner.SubscribeReceipt(ctxT(t), "/temp-queue/replies", "auto"); err != nil {
		t.Fatalf("owner subscribes to its temporary queue: %v", err)
	}
	// The same users file again (what a SIGHUP with nothing changed does).
	tb.B.SetAuth(policyOf(t, matrixUsers))
	select {
	case f := <-owner.Errors():
		t.Fatalf("reload with unchanged permissions closed a temporary-queue reader: ERROR %q", f.Get("message"))
	case <-owner.Done():
		t.Fatal("reload with unchanged permissions closed a temporary-queue reader")
	case <-time.After(500 * time.Millisecond):
	}
}

// The failed-login throttle delays only the ERROR of a wrong guess; a right
// guess from the same throttled address is answered at once. A guesser
// therefore needs no answer to a wrong guess: silence past the argon2id
// check time means "wrong", and it can run its guesses on parallel
// connections each cut after a fraction of the throttle's delay. The
// TestTempQueue_NamesBounded: every /temp-queue/NAME a connection names
// (a reply-to of any SEND, even to a topic) is remembered until the
// connection ends, so one connection may name at most queues.max_queues;
// past that, an ERROR naming the setting. Nothing bounded them before: one
// connection with write on one topic made the broker hold an entry per
// distinct name, outside the memory budget.
func TestTempQueue_NamesBounded(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Queues.MaxQueues = 50 })
	c := tb.Dial(t)
	long := strings.Repeat("x", 200)
	for i := range 50 {
		if _, err := c.SendReceipt(ctxT(t), "/topic/nobody", nil, stomp.Header{Key: "reply-to", Value: fmt.Sprintf("/temp-queue/%s.%d", long, i)}); err != nil {
			t.Fatalf("temporary-queue name %d of 50: %v", i+1, err)
		}
	}
	if got := tb.B.TempClaims(); got != 50 {
		t.Fatalf("the broker remembers %d temporary-queue names, want 50", got)
	}
	// The same names again are free; a 51st is refused.
	if _, err := c.SendReceipt(ctxT(t), "/topic/nobody", nil, stomp.Header{Key: "reply-to", Value: "/temp-queue/" + long + ".7"}); err != nil {
		t.Fatalf("a name already made: %v", err)
	}
	_, err := c.SendReceipt(ctxT(t), "/topic/nobody", nil, stomp.Header{Key: "reply-to", Value: "/temp-queue/" + long + ".50"})
	if err == nil || !strings.Contains(err.Error(), "queues.max_queues") {
		t.Fatalf("a 51st temporary-queue name on one connection: %v, want an ERROR naming queues.max_queues", err)
	}
	// Names already made are used again freely, on a new connection too
	// (once c's 50 are forgotten: all connections' names together are
	// bounded by queues.max_queues as well, TestTempQueue_NameBytesBounded).
	waitFor(t, 5*time.Second, "the names of the connection closed by its ERROR are forgotten", func() bool { return tb.B.TempClaims() == 0 })
	c2 := tb.Dial(t)
	for i := range 60 {
		if _, err := c2.SendReceipt(ctxT(t), "/topic/nobody", nil, stomp.Header{Key: "reply-to", Value: fmt.Sprintf("/temp-queue/r%d", i%10)}); err != nil {
			t.Fatalf("reusing 10 names: %v", err)
		}
	}
}

// A reload that drops auth.users_file (Reload does not run CheckExposure)
// puts the "open" policy in force: new non-loopback clients are refused,
// since without a users file only loopback clients are accepted, but
// Policy.Valid answers true for every open connection and Allowed true for
// everything, so a remote client that had logged in with narrow grants
