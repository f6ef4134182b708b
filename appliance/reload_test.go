package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Reload applies new frame limits to a connection that was open before it:
// its next oversized SEND gets an ERROR naming the setting.
func TestReload_FrameLimitsApplyToOpenConnections(t *testing.T) {
	tb := mustStartBroker(t, nil)
	r := dialRaw(t, tb)
	r.connect("1.2")
	cfg := *tb.B.Config()
	cfg.Stomp.MaxBodyBytes = 100
	ch, err := tb.B.Reload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Reloaded) != 1 || ch.Reloaded[0] != "stomp.max_body_bytes" {
		t.Errorf("changes: %+v, want stomp.max_body_bytes reloaded", ch)
	}
	r.write("SEND\ndestination:/queue/r\ncontent-length:500\n\n" + strings.Repeat("x", 500) + "\x00")
	f := r.frame()
	if f.Command != stomp.CmdError || !strings.Contains(f.Headers.Get("message"), "stomp.max_body_bytes") {
		t.Fatalf("SEND of 500 bytes after max_body_bytes=100: got %s %q, want an ERROR naming stomp.max_body_bytes", f.Command, f.Headers.Get("message"))
	}
}

// Raising a queue policy's max_messages lets a producer blocked on the full
// queue through at once (before block_timeout), on its open connection.
func TestReload_QueueLimitWakesBlockedProducer(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.Policies = []appliance.QueuePolicy{{Match: "lim", MaxMessages: 1, FullPolicy: "block", BlockTimeout: appliance.Duration{Duration: time.Minute}}}
	})
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), "/queue/lim", []byte("1")); err != nil {
		t.Fatal(err)
	}
	res, err := c.SendAsync("/queue/lim", []byte("2"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		t.Fatalf("second SEND to a full queue (max_messages 1, block): answered at once: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	cfg := *tb.B.Config()
	cfg.Queues.Policies = []appliance.QueuePolicy{{Match: "lim", MaxMessages: 5, FullPolicy: "block", BlockTimeout: appliance.Duration{Duration: time.Minute}}}
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.Err != nil {
			t.Fatalf("blocked SEND after raising max_messages: %v", r.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked SEND still waiting 10s after max_messages was raised to 5")
	}
	waitQueue(t, tb, "lim", "2 messages", func(v appliance.QueueView) bool { return v.Messages == 2 })
}

// An invalid config changes nothing; a restart-only key is reported and
// keeps its value.
func TestReload_InvalidRefusedRestartOnlyReported(t *testing.T) {
	tb := mustStartBroker(t, nil)
	before := tb.B.Config()
	bad := *before
	bad.Stomp.MaxBodyBytes = 10
	bad.Queues.FullPolicy = "sometimes"
	if _, err := tb.B.Reload(bad); err == nil || !strings.Contains(err.Error(), "queues.full_policy") {
		t.Fatalf("Reload of an invalid config: %v, want an error naming queues.full_policy", err)
	}
	if tb.B.Config() != before {
		t.Fatalf("an invalid config was applied (in part): max_body_bytes now %d", tb.B.Config().Stomp.MaxBodyBytes)
	}
	cfg := *before
	cfg.Journal.Sync = "full"
	cfg.Topics.IdleForget = appliance.Duration{Duration: time.Hour}
	cfg.Stomp.MaxSubscriptions = 7
	ch, err := tb.B.Reload(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ch.Restart, ","); got != "journal.sync,topics.idle_forget" {
		t.Errorf("restart-only changes: %q, want journal.sync,topics.idle_forget", got)
	}
	now := tb.B.Config()
	if now.Journal.Sync != before.Journal.Sync || now.Topics.IdleForget != before.Topics.IdleForget || now.Stomp.MaxSubscriptions != 7 {
		t.Errorf("after reload: sync %q idle_forget %s max_subscriptions %d, want %q %s 7", now.Journal.Sync, now.Topics.IdleForget, now.Stomp.MaxSubscriptions, before.Journal.Sync, before.Topics.IdleForget)
	}
}

// Turning topics.last_value off drops the stored last values: a new
// subscriber gets none.
func TestReload_LastValueOff(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Topics.LastValue = true })
	tb.B.PublishForTest("lv", []byte("v1"))
	cfg := *tb.B.Config()
	cfg.Topics.LastValue = false
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Topics.LastValue = true
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	c := tb.Dial(t)
	sub, err := c.SubscribeReceipt(ctxT(t), "/topic/lv", "auto")
	if err != nil {
		t.Fatal(err)
	}
	expectNone(t, sub, 300*time.Millisecond)
}
