package appliance_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// TestAuth_ExternalCommand: auth.command allows, denies, times out and
// fails; its groups give permissions; positive answers are cached.
func TestAuth_ExternalCommand(t *testing.T) {
	script, err := filepath.Abs("testdata/authcmd.sh")
	if err != nil {
		t.Fatal(err)
	}
	tb := authBroker(t, `
[users.local]
password = "{pw:l}"
[groups.ops]
read = ["/topic/ops.>"]
`, func(c *appliance.Config) {
		c.Auth.Command = []string{script}
		c.Auth.CommandTimeout = appliance.Duration{Duration: 300 * time.Millisecond}
	})
	refused := func(login, pass string) {
		t.Helper()
		c, err := dialAs(tb.Addr, login, pass)
		var se *client.ServerError
		if !errors.As(err, &se) || se.Frame.Get("message") != "authentication failed" {
			if c != nil {
				c.Close()
			}
			t.Fatalf("%s/%s: %v, want authentication failed", login, pass, err)
		}
	}
	c, err := dialAs(tb.Addr, "carol", "good")
	if err != nil {
		t.Fatalf("the command allowed carol: %v", err)
	}
	if _, err := c.SubscribeReceipt(ctxT(t), "/topic/ops.x", "auto"); err != nil {
		t.Fatalf("carol's group ops from the command: %v", err)
	}
	if _, err := c.SubscribeReceipt(ctxT(t), "/topic/other", "auto"); err == nil {
		t.Fatal("carol read a topic no group of hers grants")
	}
	c.Close()
	if st := tb.B.AuthStats(); st.CommandRuns != 1 || st.CommandErrors != 0 {
		t.Fatalf("after one allowed login: %+v", st)
	}
	refused("carol", "bad")
	if st := tb.B.AuthStats(); st.CommandRuns != 2 || st.CommandErrors != 0 {
		t.Fatalf("a denial (exit 1) is not an error: %+v", st)
	}
	refused("slow", "x")
	refused("crash", "x")
	if st := tb.B.AuthStats(); st.CommandErrors != 2 {
		t.Fatalf("a timeout and a crash count as command errors: %+v", st)
	}
	// The users file still decides for its users with passwords.
	if c, err := dialAs(tb.Addr, "local", "l"); err != nil {
		t.Fatalf("local user: %v", err)
	} else {
		c.Close()
	}
	refused("local", "good")
	before := tb.B.AuthStats()
	c, err = dialAs(tb.Addr, "carol", "good")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if st := tb.B.AuthStats(); st.CommandRuns != before.CommandRuns || st.CommandCacheHits != before.CommandCacheHits+1 {
		t.Fatalf("a repeated good login ran the command again: %+v (before %+v)", st, before)
	}
}
