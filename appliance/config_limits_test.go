package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// validChannel is a multicast channel Validate accepts.
func validChannel() appliance.ChannelConfig {
	return appliance.ChannelConfig{Name: "c", Group: "239.255.0.1:7400", Topics: []string{"metrics.>"}}
}

// TestConfig_ValidateBounds: each value that used to pass Validate and then
// broke the daemon (every client refused, a huge allocation per connection, a
// key id sent modulo 256, a TTL refused only at start) is reported, naming its
// key, and as the only problem; the bounds themselves are accepted.
func TestConfig_ValidateBounds(t *testing.T) {
	ch := func(mut func(*appliance.ChannelConfig)) func(*appliance.Config) {
		return func(c *appliance.Config) {
			cc := validChannel()
			mut(&cc)
			c.Multicast.Channels = []appliance.ChannelConfig{cc}
		}
	}
	d := func(s string) appliance.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return appliance.Duration{Duration: v}
	}
	rejected := []struct {
		name string
		mut  func(*appliance.Config)
		want string
	}{
		{"connect_timeout 0s", func(c *appliance.Config) { c.Stomp.ConnectTimeout = d("0s") }, "stomp.connect_timeout: must be positive"},
		{"connect_timeout negative", func(c *appliance.Config) { c.Stomp.ConnectTimeout = d("-1s") }, "stomp.connect_timeout: must be positive"},
		{"write_timeout 0s", func(c *appliance.Config) { c.Stomp.WriteTimeout = d("0s") }, "stomp.write_timeout: must be positive"},
		{"heartbeat_send negative", func(c *appliance.Config) { c.Stomp.HeartbeatSend = d("-1s") }, "stomp.heartbeat_send: must not be negative"},
		{"heartbeat_receive negative", func(c *appliance.Config) { c.Stomp.HeartbeatReceive = d("-1ms") }, "stomp.heartbeat_receive: must not be negative"},
		{"max_header_line 1 GiB", func(c *appliance.Config) { c.Stomp.MaxHeaderLine = 1 << 30 }, "stomp.max_header_line: at most 1048576"},
		{"max_header_line 1 MiB + 1", func(c *appliance.Config) { c.Stomp.MaxHeaderLine = 1<<20 + 1 }, "stomp.max_header_line: at most 1048576"},
		{"max_header_bytes 16 MiB + 1", func(c *appliance.Config) { c.Stomp.MaxHeaderBytes = 16<<20 + 1 }, "stomp.max_header_bytes: at most 16777216"},
		{"max_headers 10001", func(c *appliance.Config) { c.Stomp.MaxHeaders = 10001 }, "stomp.max_headers: at most 10000"},
		{"max_body_bytes 512 MiB + 1", func(c *appliance.Config) { c.Stomp.MaxBodyBytes = 512<<20 + 1 }, "stomp.max_body_bytes: at most 536870912"},
		{"checkpoint_interval negative", func(c *appliance.Config) { c.Journal.Checkpoint = d("-1s") }, "journal.checkpoint_interval: must not be negative"},
		{"wal_limit_bytes negative", func(c *appliance.Config) { c.Journal.WALLimitBytes = -1 }, "journal.wal_limit_bytes: must not be negative"},
		{"mmap_bytes negative", func(c *appliance.Config) { c.Journal.MmapBytes = -1 }, "journal.mmap_bytes: must not be negative"},
		{"ack_timeout negative", func(c *appliance.Config) { c.Queues.AckTimeout = d("-1s") }, "queues.ack_timeout: must not be negative"},
		{"block_timeout negative", func(c *appliance.Config) { c.Queues.BlockTimeout = d("-1s") }, "queues.block_timeout: must not be negative"},
		{"dedup_window negative", func(c *appliance.Config) { c.Queues.DedupWindow = d("-1s") }, "queues.dedup_window: must not be negative"},
		{"redelivery_delay_min negative", func(c *appliance.Config) { c.Queues.RedeliveryMin = d("-1s") }, "queues.redelivery_delay_min: must not be negative"},
		{"policy ack_timeout negative", func(c *appliance.Config) {
			c.Queues.Policies = []appliance.QueuePolicy{{Match: "a.>", AckTimeout: d("-1s")}}
		}, "queues.policy[0].ack_timeout: must not be negative"},
		{"key_id 300", ch(func(c *appliance.ChannelConfig) { c.KeyID = 300 }), "multicast.channel[0].key_id: 300: want 0 to 255"},
		{"key_id 256", ch(func(c *appliance.ChannelConfig) { c.KeyID = 256 }), "multicast.channel[0].key_id: 256: want 0 to 255"},
		{"key_id -1", ch(func(c *appliance.ChannelConfig) { c.KeyID = -1 }), "multicast.channel[0].key_id: -1: want 0 to 255"},
		{"ttl 1000", ch(func(c *appliance.ChannelConfig) { c.TTL = 1000 }), "multicast.channel[0].ttl: 1000: want 0 to 255"},
		{"lone_inline yes", ch(func(c *appliance.ChannelConfig) { c.LoneInline = "yes" }), `multicast.channel[0].lone_inline: "yes": want "on", "off" or ""`},
		{"ttl 256", ch(func(c *appliance.ChannelConfig) { c.TTL = 256 }), "multicast.channel[0].ttl: 256: want 0 to 255"},
		{"ttl -1", ch(func(c *appliance.ChannelConfig) { c.TTL = -1 }), "multicast.channel[0].ttl: -1: want 0 to 255"},
		{"rate_limit negative", ch(func(c *appliance.ChannelConfig) { c.RateLimit = -1 }), "multicast.channel[0].rate_limit: must be 0 (unlimited) or positive"},
		{"window negative", ch(func(c *appliance.ChannelConfig) { c.Window = -1 }), "multicast.channel[0].window: must be 0"},
		{"group not multicast", ch(func(c *appliance.ChannelConfig) { c.Group = "10.0.0.1:7400" }), `multicast.channel[0].group: "10.0.0.1:7400": want an IPv4 multicast address and port`},
		{"group without port", ch(func(c *appliance.ChannelConfig) { c.Group = "239.255.0.1" }), `multicast.channel[0].group: "239.255.0.1": want an IPv4 multicast address and port`},
		{"group port 0", ch(func(c *appliance.ChannelConfig) { c.Group = "239.255.0.1:0" }), `multicast.channel[0].group: "239.255.0.1:0": want an IPv4 multicast address and port`},
		{"kv a pattern of keys", ch(func(c *appliance.ChannelConfig) { c.KV = []string{"config.>"} }), `multicast.channel[0].kv: "config.>": want key-value bucket names`},
		{"kv empty", ch(func(c *appliance.ChannelConfig) { c.KV = []string{""} }), `multicast.channel[0].kv: "": want key-value bucket names`},
		{"nothing carried", ch(func(c *appliance.ChannelConfig) { c.Topics, c.Streams, c.KV = nil, nil, nil }), `multicast.channel[0].topics: list at least one topic pattern`},
	}
	for _, tc := range rejected {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			cfg := appliance.DefaultConfig()
			tc.mut(&cfg)
			err := cfg.Validate()
			if err == nil {
				t.Fatalf("got no error, want one containing %q", tc.want)
			}
			if got := strings.Split(err.Error(), "\n"); len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("got %q, want exactly one problem, containing %q", got, tc.want)
			}
		})
	}
	accepted := []struct {
		name string
		mut  func(*appliance.Config)
	}{
		{"the bounds of the frame limits", func(c *appliance.Config) {
			c.Stomp.MaxHeaderLine, c.Stomp.MaxHeaderBytes, c.Stomp.MaxHeaders, c.Stomp.MaxBodyBytes = 1<<20, 16<<20, 10000, 512<<20
		}},
		{"heart-beats off", func(c *appliance.Config) { c.Stomp.HeartbeatSend, c.Stomp.HeartbeatReceive = d("0s"), d("0s") }},
		{"timeouts of 1ms", func(c *appliance.Config) { c.Stomp.ConnectTimeout, c.Stomp.WriteTimeout = d("1ms"), d("1ms") }},
		{"ttl 0 and key_id 0", ch(func(c *appliance.ChannelConfig) { c.TTL, c.KeyID = 0, 0 })},
		{"ttl 255 and key_id 255", ch(func(c *appliance.ChannelConfig) { c.TTL, c.KeyID = 255, 255 })},
		{"kv only, bucket names and *", ch(func(c *appliance.ChannelConfig) { c.Topics, c.KV = nil, []string{"config", "site-1_a", "*"} })},
	}
	for _, tc := range accepted {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			cfg := appliance.DefaultConfig()
			tc.mut(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatalf("got %v, want no error", err)
			}
		})
	}
}
