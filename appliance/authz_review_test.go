package appliance_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Four logins that auth.command is slow to answer (a directory server
// timing out) must not hold up a users-file user's login: they used to
// hold all four argon2id slots (maxHashChecks) while the command ran.
func TestAuthCommand_SlowDoesNotBlockFileLogins(t *testing.T) {
	tb := commandBroker(t, "sleep 3\nexit 1", func(c *appliance.Config) {
		c.Auth.CommandTimeout = appliance.Duration{Duration: 10 * time.Second}
	})
	// Warm up: one login of local alone.
	start := time.Now()
	c, err := dialAs(tb.Addr, "local", "l")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	alone := time.Since(start)

	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := dialAs(tb.Addr, "ldap-user", "x"); err == nil {
				c.Close()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the four commands are running
	start = time.Now()
	c, err = dialAs(tb.Addr, "local", "l")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	wg.Wait()
	t.Logf("login of users-file user local: %s alone, %s while 4 auth.command logins run", alone, took)
	if took > time.Second {
		t.Fatalf("a users-file login took %s while four slow auth.command logins ran (%s alone): they hold every argon2id slot", took, alone)
	}
}

// A SEND in a transaction is checked when it arrives; a reload that then
// revokes write on its destination must stop the COMMIT from writing it
// (the policy is in force for every later frame, COMMIT included).
func TestAuthReload_CommitAuthorizesBufferedSendsAgain(t *testing.T) {
	tb := authBroker(t, matrixUsers, nil)
	if _, err := mustDialAs(t, tb, "admin").SendReceipt(ctxT(t), "/queue/orders.eu", []byte("made by admin")); err != nil {
		t.Fatal(err)
	}
	c := mustDialAs(t, tb, "producer")
	if _, err := c.Request(ctxT(t), stomp.NewFrame("BEGIN", "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Request(ctxT(t), stomp.NewFrame("SEND", "destination", "/queue/orders.eu", "transaction", "t1")); err != nil {
		t.Fatal(err)
	}
	// producer keeps its login, loses write on /queue/orders.>.
	tb.B.SetAuth(policyOf(t, `
[users.producer]
password = "{pw:p}"
write = ["/topic/events.>"]
`))
	// Control, on another connection: a direct SEND is refused now.
	if _, err := mustDialAs(t, tb, "producer").SendReceipt(ctxT(t), "/queue/orders.eu", []byte("direct")); err == nil {
		t.Fatal("control: a direct SEND after the revocation was allowed")
	}
	_, err := c.Request(ctxT(t), stomp.NewFrame("COMMIT", "transaction", "t1"))
	if v, _ := tb.B.Queue("orders.eu"); v.Messages != 1 {
		t.Fatalf("COMMIT after write on /queue/orders.> was revoked (err %v): orders.eu holds %d messages, 1 before the COMMIT", err, v.Messages)
	}
}

// The overview event is what the stream's user may read: a multicast
// channel carrying one pattern the user may read and one it may not is
// listed with the readable one only (it was listed with both).
func TestSSE_OverviewChannelOnlyReadablePatterns(t *testing.T) {
	tb := authBroker(t, `
[users.alice]
password = "{pw:a}"
read = ["/topic/public.>"]
`, func(c *appliance.Config) {
		c.Multicast.Channels = []appliance.ChannelConfig{{
			Name: "mixed", Group: "239.1.2.3:7000",
			Topics: []string{"public.>", "payroll.salaries.>"},
		}}
	})
	addr := startWeb(t, tb, nil)
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth("alice", "a")
	resp, s := openSSE(t, addr, "topic=public.x&overview=1s", r.Header, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	ev := s.nextEvent(t)
	if ev.event != "overview" {
		t.Fatalf("first event %+v, want overview", ev)
	}
	var o struct {
		Channels []struct {
			Name   string   `json:"name"`
			Topics []string `json:"topics"`
		} `json:"channels"`
	}
	if err := json.Unmarshal([]byte(ev.data), &o); err != nil {
		t.Fatal(err)
	}
	for _, c := range o.Channels {
		if slices.Contains(c.Topics, "payroll.salaries.>") {
			t.Fatalf("overview for alice (read /topic/public.> only) lists channel %q with topics %v: payroll.salaries.> is not hers to see (event data: %s)", c.Name, c.Topics, ev.data)
		}
	}
}

// commandBroker starts a broker whose users file holds one password user,
// local (password l), and whose auth.command is a shell script of body
// (asked for every other login); mutate may change the rest.
func commandBroker(t *testing.T, body string, mutate func(*appliance.Config)) *testBroker {
	t.Helper()
	script := filepath.Join(t.TempDir(), "command.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return authBroker(t, `
[users.local]
password = "{pw:l}"
`, func(c *appliance.Config) {
		c.Auth.Command = []string{script}
		if mutate != nil {
			mutate(c)
		}
	})
}
