package appliance

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Duration is a time.Duration written in TOML as a string ("10s", "5m").
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (examples: \"500ms\", \"10s\", \"5m\")", string(b))
	}
	d.Duration = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Config is the whole daemon configuration, one TOML file. Every key has a
// default (DefaultConfig) and is documented in packaging/herald.toml.
type Config struct {
	DataDir string      `toml:"data_dir" json:"data_dir"`
	Stomp   StompConfig `toml:"stomp" json:"stomp"`
	Journal JournalConf `toml:"journal" json:"journal"`
	Queues  QueueConfig `toml:"queues" json:"queues"`
	Topics  TopicConfig `toml:"topics" json:"topics"`
	Admin   AdminConfig `toml:"admin" json:"admin"`
	Log     LogConfig   `toml:"log" json:"log"`
	// Multicast holds the channels topics are mapped to.
	Multicast MulticastConfig `toml:"multicast" json:"multicast"`
}

// StompConfig is the STOMP listener and its limits.
type StompConfig struct {
	Listen                   string   `toml:"listen" json:"listen"`
	MaxConnections           int      `toml:"max_connections" json:"max_connections"`
	MaxConnectionsPerAddress int      `toml:"max_connections_per_address" json:"max_connections_per_address"`
	MaxSubscriptions         int      `toml:"max_subscriptions" json:"max_subscriptions"`
	MaxHeaderBytes           int      `toml:"max_header_bytes" json:"max_header_bytes"`
	MaxHeaders               int      `toml:"max_headers" json:"max_headers"`
	MaxHeaderLine            int      `toml:"max_header_line" json:"max_header_line"`
	MaxBodyBytes             int      `toml:"max_body_bytes" json:"max_body_bytes"`
	HeartbeatSend            Duration `toml:"heartbeat_send" json:"heartbeat_send"`
	HeartbeatReceive         Duration `toml:"heartbeat_receive" json:"heartbeat_receive"`
	ConnectTimeout           Duration `toml:"connect_timeout" json:"connect_timeout"`
	FrameTimeout             Duration `toml:"frame_timeout" json:"frame_timeout"`
	IdleTimeout              Duration `toml:"idle_timeout" json:"idle_timeout"`
	WriteTimeout             Duration `toml:"write_timeout" json:"write_timeout"`
	MaxTxFrames              int      `toml:"max_transaction_frames" json:"max_transaction_frames"`
	MaxOutputBytes           int64    `toml:"max_output_bytes" json:"max_output_bytes"`
	MaxTxBytes               int64    `toml:"max_transaction_bytes" json:"max_transaction_bytes"`
}

// JournalConf configures the SQLite journal.
type JournalConf struct {
	Sync          string   `toml:"sync" json:"sync"`
	Compress      bool     `toml:"compress" json:"compress"`
	WALLimitBytes int64    `toml:"wal_limit_bytes" json:"wal_limit_bytes"`
	Checkpoint    Duration `toml:"checkpoint_interval" json:"checkpoint_interval"`
	MinFreeBytes  int64    `toml:"min_free_bytes" json:"min_free_bytes"`
}

// QueueConfig holds defaults for every queue.
type QueueConfig struct {
	Prefetch          int      `toml:"prefetch" json:"prefetch"`
	AutoPrefetch      int      `toml:"auto_prefetch" json:"auto_prefetch"`
	MaxDeliveries     int      `toml:"max_deliveries" json:"max_deliveries"`
	RedeliveryMin     Duration `toml:"redelivery_delay_min" json:"redelivery_delay_min"`
	RedeliveryMax     Duration `toml:"redelivery_delay_max" json:"redelivery_delay_max"`
	AckTimeout        Duration `toml:"ack_timeout" json:"ack_timeout"`
	DedupWindow       Duration `toml:"dedup_window" json:"dedup_window"`
	DedupMax          int      `toml:"dedup_max" json:"dedup_max"`
	MaxMessages       int      `toml:"max_messages" json:"max_messages"`
	MaxBytes          int64    `toml:"max_bytes" json:"max_bytes"`
	FullPolicy        string   `toml:"full_policy" json:"full_policy"`
	BlockTimeout      Duration `toml:"block_timeout" json:"block_timeout"`
	MemoryWindow      int      `toml:"memory_window" json:"memory_window"`
	MemoryWindowBytes int64    `toml:"memory_window_bytes" json:"memory_window_bytes"`
	ExpiredToDLQ      bool     `toml:"expired_to_dlq" json:"expired_to_dlq"`
	DeadLetterQueue   string   `toml:"dead_letter_prefix" json:"dead_letter_prefix"`
	MaxQueues         int      `toml:"max_queues" json:"max_queues"`
	// Policies override the defaults above for queues whose name matches;
	// the first match wins. Zero fields inherit.
	Policies []QueuePolicy `toml:"policy" json:"policies"`
}

// QueuePolicy is a per-queue override, [[queues.policy]] in the file.
type QueuePolicy struct {
	Match         string   `toml:"match" json:"match"` // queue name pattern: * one dot segment, > the rest
	Prefetch      int      `toml:"prefetch" json:"prefetch,omitempty"`
	MaxDeliveries int      `toml:"max_deliveries" json:"max_deliveries,omitempty"`
	RedeliveryMin Duration `toml:"redelivery_delay_min" json:"redelivery_delay_min,omitzero"`
	RedeliveryMax Duration `toml:"redelivery_delay_max" json:"redelivery_delay_max,omitzero"`
	AckTimeout    Duration `toml:"ack_timeout" json:"ack_timeout,omitzero"`
	MaxMessages   int      `toml:"max_messages" json:"max_messages,omitempty"`
	MaxBytes      int64    `toml:"max_bytes" json:"max_bytes,omitempty"`
	FullPolicy    string   `toml:"full_policy" json:"full_policy,omitempty"`
	BlockTimeout  Duration `toml:"block_timeout" json:"block_timeout,omitzero"`
}

// For returns the effective settings of queue name: the defaults with the
// first matching policy applied.
func (c QueueConfig) For(name string) QueueConfig {
	out := c
	out.Policies = nil
	for _, p := range c.Policies {
		if !MatchTopic(p.Match, name) {
			continue
		}
		if p.Prefetch > 0 {
			out.Prefetch = p.Prefetch
		}
		if p.MaxDeliveries > 0 {
			out.MaxDeliveries = p.MaxDeliveries
		}
		if p.RedeliveryMin.Duration > 0 {
			out.RedeliveryMin = p.RedeliveryMin
		}
		if p.RedeliveryMax.Duration > 0 {
			out.RedeliveryMax = p.RedeliveryMax
		}
		if p.AckTimeout.Duration > 0 {
			out.AckTimeout = p.AckTimeout
		}
		if p.MaxMessages > 0 {
			out.MaxMessages = p.MaxMessages
		}
		if p.MaxBytes > 0 {
			out.MaxBytes = p.MaxBytes
		}
		if p.FullPolicy != "" {
			out.FullPolicy = p.FullPolicy
		}
		if p.BlockTimeout.Duration > 0 {
			out.BlockTimeout = p.BlockTimeout
		}
		break
	}
	return out
}

// TopicConfig configures topic fan-out.
type TopicConfig struct {
	SubscriberBuffer      int    `toml:"subscriber_buffer" json:"subscriber_buffer"`
	SubscriberBufferBytes int64  `toml:"subscriber_buffer_bytes" json:"subscriber_buffer_bytes"`
	SlowSubscriber        string `toml:"slow_subscriber" json:"slow_subscriber"`
	// LastValue keeps the last message of every topic (in memory) and gives
	// it to a new subscriber first, marked last-value:true.
	LastValue bool `toml:"last_value" json:"last_value"`
	// LastValueMaxBytes bounds the memory of all last values together; the
	// least recently updated go first, and a larger value is not kept.
	LastValueMaxBytes int64 `toml:"last_value_max_bytes" json:"last_value_max_bytes"`
	// IdleForget: a topic with no subscriber, no last value and no message
	// for this long is forgotten (its counters start again from 0).
	IdleForget Duration `toml:"idle_forget" json:"idle_forget"`
}

// AdminConfig configures the admin socket and metrics listener.
type AdminConfig struct {
	Socket        string `toml:"socket" json:"socket"`
	MetricsListen string `toml:"metrics_listen" json:"metrics_listen"`
}

// LogConfig configures logging.
type LogConfig struct {
	Level  string `toml:"level" json:"level"`
	Format string `toml:"format" json:"format"`
}

// MulticastConfig lists multicast channels.
type MulticastConfig struct {
	Channels []ChannelConfig `toml:"channel" json:"channels"`
}

// ChannelConfig maps topics to one multicast group.
type ChannelConfig struct {
	Name      string   `toml:"name" json:"name"`
	Group     string   `toml:"group" json:"group"`
	Interface string   `toml:"interface" json:"interface"`
	TTL       int      `toml:"ttl" json:"ttl"`
	Topics    []string `toml:"topics" json:"topics"`
	Profile   string   `toml:"profile" json:"profile"`
	RateLimit int64    `toml:"rate_limit" json:"rate_limit"`
	Window    int      `toml:"window" json:"window"`
	Key       string   `toml:"key" json:"-"`
	KeyFile   string   `toml:"key_file" json:"key_file"`
	KeyID     int      `toml:"key_id" json:"key_id"`
}

// Defaults.
const (
	DefaultListen  = "127.0.0.1:61613"
	DefaultDataDir = "./herald-data"
)

// DefaultConfig returns the embedded defaults the daemon runs on without a file.
func DefaultConfig() Config {
	return Config{
		DataDir: DefaultDataDir,
		Stomp: StompConfig{
			Listen:                   DefaultListen,
			MaxConnections:           10000,
			MaxConnectionsPerAddress: 1000,
			MaxSubscriptions:         1024,
			MaxHeaderBytes:           64 << 10,
			MaxHeaders:               128,
			MaxHeaderLine:            16 << 10,
			MaxBodyBytes:             16 << 20,
			HeartbeatSend:            Duration{10 * time.Second},
			HeartbeatReceive:         Duration{10 * time.Second},
			ConnectTimeout:           Duration{10 * time.Second},
			FrameTimeout:             Duration{30 * time.Second},
			IdleTimeout:              Duration{10 * time.Minute},
			WriteTimeout:             Duration{30 * time.Second},
			MaxTxFrames:              10000,
			MaxOutputBytes:           64 << 20,
			MaxTxBytes:               64 << 20,
		},
		Journal: JournalConf{
			Sync:          "full",
			WALLimitBytes: 64 << 20,
			Checkpoint:    Duration{time.Second},
			MinFreeBytes:  64 << 20,
		},
		Queues: QueueConfig{
			Prefetch:          10,
			AutoPrefetch:      1000,
			MaxDeliveries:     10,
			RedeliveryMin:     Duration{time.Second},
			RedeliveryMax:     Duration{5 * time.Minute},
			DedupWindow:       Duration{5 * time.Minute},
			DedupMax:          1_000_000,
			FullPolicy:        "block",
			BlockTimeout:      Duration{30 * time.Second},
			MemoryWindow:      10000,
			MemoryWindowBytes: 32 << 20,
			ExpiredToDLQ:      true,
			DeadLetterQueue:   "DLQ.",
			MaxQueues:         10000,
		},
		Topics: TopicConfig{
			SubscriberBuffer:      8192,
			SubscriberBufferBytes: 64 << 20,
			SlowSubscriber:        "disconnect",
			LastValueMaxBytes:     64 << 20,
			IdleForget:            Duration{10 * time.Minute},
		},
		Log: LogConfig{Level: "info", Format: "text"},
	}
}

// LoadConfig reads a TOML file over the defaults. Unknown keys are errors
// naming the key and its line.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	src, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	if err := DecodeConfig(string(src), &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// DecodeConfig decodes TOML text into cfg strictly.
func DecodeConfig(src string, cfg *Config) error {
	md, err := toml.Decode(src, cfg)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return err
	}
	if und := md.Undecoded(); len(und) > 0 {
		lines := keyLines(src)
		var msgs []string
		for i, k := range und {
			if i == 20 {
				msgs = append(msgs, fmt.Sprintf("and %d more", len(und)-i))
				break
			}
			where := ""
			if n, ok := lines[k[len(k)-1]]; ok {
				where = fmt.Sprintf(" at line %d", n)
			}
			msgs = append(msgs, fmt.Sprintf("unknown key %q%s", k.String(), where))
		}
		return fmt.Errorf("%s (see packaging/herald.toml for every key)", strings.Join(msgs, "; "))
	}
	return nil
}

var keyLine = regexp.MustCompile(`^\s*"?([^"=\s]+)"?\s*=`)

// keyLines maps each key name to the first line that assigns it, in one
// pass (the error names the line of an unknown key).
func keyLines(src string) map[string]int {
	out := map[string]int{}
	for i, l := range strings.Split(src, "\n") {
		if m := keyLine.FindStringSubmatch(l); m != nil {
			if _, seen := out[m[1]]; !seen {
				out[m[1]] = i + 1
			}
		}
	}
	return out
}

// Validate reports every problem of cfg at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.DataDir == "" {
		bad("data_dir: must not be empty")
	}
	if c.Stomp.Listen == "" {
		bad("stomp.listen: must not be empty (example: \"127.0.0.1:61613\")")
	}
	pos := func(name string, v int) {
		if v <= 0 {
			bad("%s: must be positive, got %d", name, v)
		}
	}
	pos64 := func(name string, v int64) {
		if v <= 0 {
			bad("%s: must be positive, got %d", name, v)
		}
	}
	pos("stomp.max_connections", c.Stomp.MaxConnections)
	pos("stomp.max_connections_per_address", c.Stomp.MaxConnectionsPerAddress)
	pos("stomp.max_subscriptions", c.Stomp.MaxSubscriptions)
	pos("stomp.max_header_bytes", c.Stomp.MaxHeaderBytes)
	pos("stomp.max_headers", c.Stomp.MaxHeaders)
	pos("stomp.max_header_line", c.Stomp.MaxHeaderLine)
	pos("stomp.max_body_bytes", c.Stomp.MaxBodyBytes)
	pos("stomp.max_transaction_frames", c.Stomp.MaxTxFrames)
	pos64("stomp.max_output_bytes", c.Stomp.MaxOutputBytes)
	pos64("stomp.max_transaction_bytes", c.Stomp.MaxTxBytes)
	pos("queues.prefetch", c.Queues.Prefetch)
	pos("queues.auto_prefetch", c.Queues.AutoPrefetch)
	pos("queues.max_deliveries", c.Queues.MaxDeliveries)
	pos("queues.memory_window", c.Queues.MemoryWindow)
	pos64("queues.memory_window_bytes", c.Queues.MemoryWindowBytes)
	pos("queues.dedup_max", c.Queues.DedupMax)
	pos("queues.max_queues", c.Queues.MaxQueues)
	pos("topics.subscriber_buffer", c.Topics.SubscriberBuffer)
	pos64("topics.subscriber_buffer_bytes", c.Topics.SubscriberBufferBytes)
	if c.Stomp.FrameTimeout.Duration <= 0 {
		bad("stomp.frame_timeout: must be positive, got %s", c.Stomp.FrameTimeout)
	}
	if c.Stomp.IdleTimeout.Duration < 0 {
		bad("stomp.idle_timeout: must be \"0s\" (never) or positive, got %s", c.Stomp.IdleTimeout)
	}
	if c.Queues.RedeliveryMax.Duration < c.Queues.RedeliveryMin.Duration {
		bad("queues.redelivery_delay_max (%s) is below redelivery_delay_min (%s)", c.Queues.RedeliveryMax, c.Queues.RedeliveryMin)
	}
	if c.Queues.MaxMessages < 0 || c.Queues.MaxBytes < 0 {
		bad("queues.max_messages and max_bytes must be 0 (unlimited) or positive")
	}
	switch c.Queues.FullPolicy {
	case "block", "reject":
	default:
		bad("queues.full_policy: %q: want \"block\" or \"reject\"", c.Queues.FullPolicy)
	}
	switch c.Journal.Sync {
	case "full", "normal":
	default:
		bad("journal.sync: %q: want \"full\" or \"normal\"", c.Journal.Sync)
	}
	switch c.Topics.SlowSubscriber {
	case "disconnect", "drop-oldest":
	default:
		bad("topics.slow_subscriber: %q: want \"disconnect\" or \"drop-oldest\"", c.Topics.SlowSubscriber)
	}
	if c.Topics.LastValueMaxBytes <= 0 {
		bad("topics.last_value_max_bytes: must be positive, got %d", c.Topics.LastValueMaxBytes)
	}
	if c.Topics.IdleForget.Duration < time.Millisecond {
		bad("topics.idle_forget: must be at least 1ms, got %s", c.Topics.IdleForget)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level: %q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format: %q: want \"text\" or \"json\"", c.Log.Format)
	}
	if c.Queues.DeadLetterQueue == "" {
		bad("queues.dead_letter_prefix: must not be empty")
	}
	for i, p := range c.Queues.Policies {
		where := fmt.Sprintf("queues.policy[%d]", i)
		if p.Match == "" {
			bad("%s.match: must not be empty (example: \"orders.>\")", where)
		}
		switch p.FullPolicy {
		case "", "block", "reject":
		default:
			bad("%s.full_policy: %q: want \"block\" or \"reject\"", where, p.FullPolicy)
		}
		if p.MaxMessages < 0 || p.MaxBytes < 0 || p.Prefetch < 0 || p.MaxDeliveries < 0 {
			bad("%s: limits must be 0 (inherit) or positive", where)
		}
	}
	names := map[string]bool{}
	for i, ch := range c.Multicast.Channels {
		where := fmt.Sprintf("multicast.channel[%d]", i)
		if ch.Name == "" {
			bad("%s.name: must not be empty", where)
		} else if names[ch.Name] {
			bad("%s.name: %q used twice", where, ch.Name)
		}
		names[ch.Name] = true
		if ch.Group == "" {
			bad("%s.group: must not be empty (example: \"239.255.0.1:7400\")", where)
		}
		if len(ch.Topics) == 0 {
			bad("%s.topics: list at least one topic pattern (example: [\"metrics.>\"])", where)
		}
		switch ch.Profile {
		case "", "low-latency", "dashboard":
		default:
			bad("%s.profile: %q: want \"low-latency\" or \"dashboard\"", where, ch.Profile)
		}
		if ch.Key != "" && ch.KeyFile != "" {
			bad("%s: set key or key_file, not both", where)
		}
	}
	return errors.Join(errs...)
}
