package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

func TestConfig_Decode(t *testing.T) {
	cfg := appliance.DefaultConfig()
	src := `
data_dir = "/tmp/x"
[stomp]
listen = "0.0.0.0:61613"
heartbeat_send = "5s"
[queues]
ack_timeout = "30s"
[[queues.policy]]
match = "orders.>"
max_messages = 100
full_policy = "reject"
[[multicast.channel]]
name = "dash"
group = "239.255.0.1:7400"
topics = ["metrics.>"]
`
	if err := appliance.DecodeConfig(src, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "/tmp/x" || cfg.Stomp.HeartbeatSend.Duration != 5*time.Second || cfg.Queues.AckTimeout.Duration != 30*time.Second {
		t.Fatalf("decoded %+v", cfg)
	}
	if cfg.Stomp.MaxConnections != 10000 {
		t.Fatalf("defaults lost: max_connections %d", cfg.Stomp.MaxConnections)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	q := cfg.Queues.For("orders.eu")
	if q.MaxMessages != 100 || q.FullPolicy != "reject" || q.AckTimeout.Duration != 30*time.Second {
		t.Fatalf("policy not applied: %+v", q)
	}
	if q := cfg.Queues.For("other"); q.MaxMessages != 0 || q.FullPolicy != "block" {
		t.Fatalf("policy applied to a queue it does not match: %+v", q)
	}
}

func TestConfig_Errors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"unknown key", "[stomp]\nlisten = \"x:1\"\nlisten_port = 5\n", `unknown key "stomp.listen_port" at line 3`},
		{"unknown table", "[nope]\na = 1\n", `unknown key "nope`},
		{"bad duration", "[stomp]\nheartbeat_send = \"soon\"\n", "invalid duration"},
		{"syntax", "[stomp\n", "expected"},
		{"type", "[stomp]\nmax_connections = \"many\"\n", "max_connections"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := appliance.DefaultConfig()
			err := appliance.DecodeConfig(tc.src, &cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("validate reports every problem", func(t *testing.T) {
		cfg := appliance.DefaultConfig()
		cfg.Stomp.MaxConnections = 0
		cfg.Journal.Sync = "sometimes"
		cfg.Queues.FullPolicy = "drop"
		cfg.Multicast.Channels = []appliance.ChannelConfig{{Name: "a"}}
		err := cfg.Validate()
		for _, want := range []string{"stomp.max_connections", "journal.sync", "queues.full_policy", "multicast.channel[0].group", "multicast.channel[0].topics"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("validate: %v, want it to name %s", err, want)
			}
		}
	})
}

func TestQueue_PolicyLimits(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Queues.Policies = []appliance.QueuePolicy{{Match: "small.*", MaxMessages: 1, FullPolicy: "reject"}}
	})
	p := tb.Dial(t)
	sendN(t, p, "/queue/small.a", 1, "x")
	if _, err := p.SendReceipt(ctxT(t), "/queue/small.a", []byte("y")); err == nil || !strings.Contains(err.Error(), "queue full") {
		t.Fatalf("got %v, want queue full", err)
	}
	p2 := tb.Dial(t)
	sendN(t, p2, "/queue/big", 5, "x") // not matched: unlimited
}

func TestQueue_Expired(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	past := time.Now().Add(-time.Second).UnixMilli()
	future := time.Now().Add(time.Hour).UnixMilli()
	p.SendReceipt(ctxT(t), "/queue/ttl", []byte("stale"), hdr("expires", itoa(past)))
	p.SendReceipt(ctxT(t), "/queue/ttl", []byte("fresh"), hdr("expires", itoa(future)))
	c := tb.Dial(t)
	sub, _ := c.Subscribe("/queue/ttl", "auto")
	if m := recv(t, sub); string(m.Body) != "fresh" {
		t.Fatalf("got %q, want fresh (stale expired)", m.Body)
	}
	d, _ := c.Subscribe("/queue/DLQ.ttl", "auto")
	if m := recv(t, d); string(m.Body) != "stale" || m.Get("dlq-reason") != "expired" {
		t.Fatalf("DLQ got %q %v", m.Body, m.Headers)
	}
}

func itoa(n int64) string { return strconvFormat(n) }
