package appliance_test

import (
	"context"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp/client"
)

// TestAuth_ThrottleSlowsGuessing: after failed logins from an address,
// every login from it, right or wrong, is decided no sooner than the
// throttle's delay after the one before, on parallel connections too. The
// delay held back only the ERROR of a failure: a guesser that took "no
// answer within the argon2id time" for a wrong guess, on parallel
// connections, found the password in 421 ms with the next failure delayed
// 1.6 s.
func TestAuth_ThrottleSlowsGuessing(t *testing.T) {
	tb := authBroker(t, "[users.alice]\npassword = \"{pw:right}\"\n", nil)
	tb.B.SetLoginThrottle(100*time.Millisecond, 1600*time.Millisecond)
	for range 4 { // 100+200+400+800 ms
		if c, err := dialAs(tb.Addr, "alice", "wrong"); err == nil {
			c.Close()
			t.Fatal("wrong password accepted")
		}
	}
	// The fifth failure puts the next decision 1.6 s after it. The guesses
	// start as soon as it is decided, not once its ERROR (held back those
	// 1.6 s) arrives: by then the next slot would be free, and the first
	// guess decided at once, as the throttle allows.
	go func() {
		if c, err := dialAs(tb.Addr, "alice", "wrong"); err == nil {
			c.Close()
		}
	}()
	waitFor(t, 5*time.Second, "the fifth failure decided", func() bool { return tb.B.AuthStats().Failures >= 5 })
	// Ten guesses on parallel connections, each given up after 400 ms
	// without an answer: none is decided in that time.
	guesses := []string{"a", "b", "c", "d", "e", "f", "g", "h", "right", "i"}
	found := make(chan string, len(guesses))
	for _, pw := range guesses {
		go func() {
			c, err := client.Dial(context.Background(), tb.Addr, client.Options{Login: "alice", Passcode: pw, DialTimeout: 400 * time.Millisecond, AcceptVersion: "1.2"})
			if err == nil {
				c.Close()
				found <- pw
				return
			}
			found <- ""
		}()
	}
	for range guesses {
		if pw := <-found; pw != "" {
			t.Fatalf("from a throttled address (logins one per 1.6 s), a guess on one of %d parallel connections found the password %q within 400 ms", len(guesses), pw)
		}
	}
}
