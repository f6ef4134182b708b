package appliance

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/herald-mq/herald/appliance/auth"
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
	// Streams: retained, ordered logs (stream.go, stream_config.go).
	Streams StreamsConfig `toml:"streams" json:"streams"`
	Admin   AdminConfig   `toml:"admin" json:"admin"`
	Log     LogConfig     `toml:"log" json:"log"`
	Memory  MemoryConfig  `toml:"memory" json:"memory"`
	// Multicast holds the channels topics are mapped to.
	Multicast MulticastConfig `toml:"multicast" json:"multicast"`
	// Auth: who may connect, and what each user may do (authz.go).
	Auth AuthConfig `toml:"auth" json:"auth"`
	// Web: STOMP over WebSocket and server-sent events for browsers (web.go).
	Web WebConfig `toml:"web" json:"web"`
	// KV: the key-value buckets of /kv/BUCKET.KEY (kv.go).
	KV KVConfig `toml:"kv" json:"kv"`
	// Bridges: links to a NATS JetStream cluster or other STOMP brokers
	// (bridge_config.go, package bridge).
	Bridges []BridgeConfig `toml:"bridge" json:"bridges"`
}

// WebConfig is the [web] section: the HTTP listener for browsers.
type WebConfig struct {
	// Listen is the HTTP address of /stomp (WebSocket) and /events (SSE);
	// empty: no web listener.
	Listen string `toml:"listen" json:"listen"`
	// TLS serves HTTPS with stomp.tls_cert and stomp.tls_key.
	TLS bool `toml:"tls" json:"tls"`
	// AllowedOrigins are the Origins ("https://dash.example:8443") other
	// than the listener's own whose pages may connect; "*" allows any.
	AllowedOrigins []string `toml:"allowed_origins" json:"allowed_origins"`
	// SSEBufferBytes bounds the messages waiting for one SSE client.
	SSEBufferBytes int64 `toml:"sse_buffer_bytes" json:"sse_buffer_bytes"`
	// SSEHeartbeat is how often an idle SSE stream gets a comment line.
	SSEHeartbeat Duration `toml:"sse_heartbeat" json:"sse_heartbeat"`
}

// AuthConfig is the [auth] section: the users file and the anonymous role.
type AuthConfig struct {
	// UsersFile holds users, groups, password hashes and permissions
	// (herald user ...). Empty: no users; only loopback clients are
	// accepted, with full access, unless AllowAnonymous.
	UsersFile string `toml:"users_file" json:"users_file"`
	// AllowAnonymous accepts connections without a login: with a users
	// file they get the Anonymous grants; without one, every client gets
	// full access from any address (a trusted network only).
	AllowAnonymous bool `toml:"allow_anonymous" json:"allow_anonymous"`
	// Anonymous are the permissions of connections without a login.
	Anonymous auth.Grants `toml:"anonymous" json:"anonymous"`
	// Command checks logins the users file cannot (no such user, or no
	// password there): the program and its arguments; the user name and
	// password go on its standard input, one per line. Exit 0 allows, 1
	// denies; standard output may name groups of the users file, one per
	// line (authcmd.go).
	Command []string `toml:"command" json:"command"`
	// CommandTimeout bounds one run of Command; CommandCache keeps positive
	// answers this long (0: none).
	CommandTimeout Duration `toml:"command_timeout" json:"command_timeout"`
	CommandCache   Duration `toml:"command_cache" json:"command_cache"`
	// MaxConnectionsPerUser bounds the connections one user (or all
	// anonymous clients together) holds at once, with a users file.
	MaxConnectionsPerUser int `toml:"max_connections_per_user" json:"max_connections_per_user"`
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
	MaxTransactions          int      `toml:"max_transactions" json:"max_transactions"`
	MaxOutputBytes           int64    `toml:"max_output_bytes" json:"max_output_bytes"`
	MaxTxBytes               int64    `toml:"max_transaction_bytes" json:"max_transaction_bytes"`
	MaxJournalPendingBytes   int64    `toml:"max_journal_pending_bytes" json:"max_journal_pending_bytes"`
	// TLS listener (authz.go): certificate and key files (PEM); with
	// TLSClientCA, client certificates are verified against it and their
	// identity (common name or a subject alternative name) logs in as the
	// user of that name.
	TLSListen   string `toml:"tls_listen" json:"tls_listen"`
	TLSCert     string `toml:"tls_cert" json:"tls_cert"`
	TLSKey      string `toml:"tls_key" json:"tls_key"`
	TLSClientCA string `toml:"tls_client_ca" json:"tls_client_ca"`
}

// JournalConf configures the SQLite journal.
type JournalConf struct {
	Sync          string   `toml:"sync" json:"sync"`
	Compress      bool     `toml:"compress" json:"compress"`
	WALLimitBytes int64    `toml:"wal_limit_bytes" json:"wal_limit_bytes"`
	Checkpoint    Duration `toml:"checkpoint_interval" json:"checkpoint_interval"`
	MinFreeBytes  int64    `toml:"min_free_bytes" json:"min_free_bytes"`
	MmapBytes     int64    `toml:"mmap_bytes" json:"mmap_bytes"`
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
	BacklogCacheBytes int64    `toml:"backlog_cache_bytes" json:"backlog_cache_bytes"`
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
	// History keeps recent messages of the topics each rule matches, for
	// subscribers asking with history:N (topic_history.go).
	History []TopicHistoryRule `toml:"history" json:"history"`
	// HistoryMaxBytes bounds the memory of all history together; the
	// oldest messages go first.
	HistoryMaxBytes int64 `toml:"history_max_bytes" json:"history_max_bytes"`
}

// AdminConfig configures the admin socket and metrics listener.
type AdminConfig struct {
	Socket        string `toml:"socket" json:"socket"`
	MetricsListen string `toml:"metrics_listen" json:"metrics_listen"`
}

// MemoryConfig is the memory budget across everything clients can fill.
type MemoryConfig struct {
	// BudgetBytes bounds the bytes clients can make the daemon hold, summed
	// over connections and queues (see memBudget); 0 = 40% of the memory
	// the daemon may use (DefaultMemoryBudget).
	BudgetBytes int64 `toml:"budget_bytes" json:"budget_bytes"`
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
	// Streams are stream name patterns carried on the channel: each
	// append as a message of topic "/stream/NAME" with x-stream-offset
	// (stream_mcast.go).
	Streams []string `toml:"streams" json:"streams,omitempty"`
	// KV are key-value bucket name patterns carried on the channel: each
	// committed change as a message of topic "/kv/BUCKET" with its
	// revision (kv_mcast.go).
	KV        []string `toml:"kv" json:"kv,omitempty"`
	Profile   string   `toml:"profile" json:"profile"`
	RateLimit int64    `toml:"rate_limit" json:"rate_limit"`
	Window    int      `toml:"window" json:"window"`
	Key       string   `toml:"key" json:"-"`
	KeyFile   string   `toml:"key_file" json:"key_file"`
	KeyID     int      `toml:"key_id" json:"key_id"`
	// Repair budgets and bounds (docs/multicast-protocol.md, section 3).
	RepairRate       int64    `toml:"repair_rate" json:"repair_rate"`
	SourceRepairRate int64    `toml:"source_repair_rate" json:"source_repair_rate"`
	NAKSources       int      `toml:"nak_sources" json:"nak_sources"`
	StreamIdle       Duration `toml:"stream_idle" json:"stream_idle"`
	MaxStreams       int      `toml:"max_streams" json:"max_streams"`
	// Sealing and key rotation (docs/multicast-protocol.md, section 6).
	Seal            bool   `toml:"seal" json:"seal"`
	PreviousKeyFile string `toml:"previous_key_file" json:"previous_key_file"`
	PreviousKeyID   int    `toml:"previous_key_id" json:"previous_key_id"`
	// LoneInline: how the sender sends a lone message (one published while
	// it is idle): "on" by the publishing goroutine itself, "off" through its
	// writer goroutine, "" as the profile says (on for low-latency, off for
	// dashboard). multicast.SenderConfig.LoneInline.
	LoneInline string `toml:"lone_inline" json:"lone_inline,omitempty"`
}

// Largest values Validate accepts for the frame limits of [stomp]. A reader
// buffer of max_header_line bytes is allocated per connection, and a body of
// up to max_body_bytes as soon as its content-length is read; a message is
// journaled in one SQLite row, which holds at most 1e9 bytes.
const (
	maxHeaderLine  = 1 << 20  // 1 MiB
	maxHeaderBytes = 16 << 20 // 16 MiB
	maxHeaders     = 10000
	maxBodyBytes   = 512 << 20 // 512 MiB
)

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
			MaxTransactions:          16,
			MaxOutputBytes:           64 << 20,
			MaxTxBytes:               64 << 20,
			MaxJournalPendingBytes:   1 << 20,
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
			BacklogCacheBytes: 256 << 20,
			ExpiredToDLQ:      true,
			DeadLetterQueue:   "DLQ.",
			MaxQueues:         10000,
		},
		Topics: TopicConfig{
			SubscriberBuffer:      8192,
			SubscriberBufferBytes: 64 << 20,
			SlowSubscriber:        "disconnect",
			LastValueMaxBytes:     64 << 20,
			HistoryMaxBytes:       64 << 20,
			IdleForget:            Duration{10 * time.Minute},
		},
		Streams: defaultStreamsConfig(),
		Log:     LogConfig{Level: "info", Format: "text"},
		Web:     WebConfig{SSEBufferBytes: 4 << 20, SSEHeartbeat: Duration{15 * time.Second}},
		Auth:    AuthConfig{CommandTimeout: Duration{5 * time.Second}, CommandCache: Duration{time.Minute}, MaxConnectionsPerUser: 1000},
		KV:      defaultKVConfig(),
	}
}

// LoadConfig reads a TOML file over the defaults. Unknown keys are errors
// naming the key and its line.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	f, err := os.Open(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	// One byte over the limit is enough for DecodeConfig to refuse it.
	src, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	if err := DecodeConfig(string(src), &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Bounds on the config text, checked before it is parsed (checkShape): the
// TOML parser's time and memory grow much faster than the text with nesting
// (an 8,000-deep inline table of 48 KB took 2.7 GB and 5 s; 12,000 dotted key
// segments, 16 s; 1 MiB of 31-deep inline tables, 640 MB). The shipped file is
// under 10 KB, nests 3 deep and holds a few hundred key levels.
const (
	maxConfigBytes     = 1 << 20 // 1 MiB
	maxConfigNesting   = 32
	maxConfigKeyLevels = 100_000
)

// DecodeConfig decodes TOML text into cfg strictly. Text over 1 MiB, nesting
// tables, arrays and dotted keys more than 32 deep, or holding more than
// 100,000 key levels (see checkShape), is refused before it is parsed.
func DecodeConfig(src string, cfg *Config) error {
	if len(src) > maxConfigBytes {
		return fmt.Errorf("config larger than %d bytes (1 MiB), the limit", maxConfigBytes)
	}
	if err := checkShape(src); err != nil {
		return err
	}
	md, err := toml.Decode(src, cfg)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return err
	}
	if und := md.Undecoded(); len(und) > 0 {
		pos := keyPositions(src)
		var msgs []string
		for i, k := range und {
			if i == 20 {
				msgs = append(msgs, fmt.Sprintf("and %d more", len(und)-i))
				break
			}
			where := ""
			if n := unknownKeyLine(pos, k); n > 0 {
				where = fmt.Sprintf(" at line %d", n)
			}
			msgs = append(msgs, fmt.Sprintf("unknown key %q%s", k.String(), where))
		}
		return fmt.Errorf("%s (every key is listed with its default in /etc/herald/herald.toml as installed, packaging/herald.toml in the source, and man heraldd)", strings.Join(msgs, "; "))
	}
	return nil
}

// checkShape refuses src when it nests deeper than maxConfigNesting or holds
// more than maxConfigKeyLevels key levels in all. It is a cheap pre-scan, not
// a TOML parser: it skips comments and strings (basic, literal, multi-line) as
// TOML does, and counts each open [ or { plus each dot of the key that leads
// into it, and the dots of the key being written (a.b.c = 1 is 3 deep). Dots
// of a value (1.5) count too; a config never comes near the limits.
//
// The parser's cost grows with every key times the square of its depth (it
// keeps each key's whole path, and a dotted key creates a table per prefix), so
// each key, table header and value closing at depth d adds d(d+1)/2 levels.
func checkShape(src string) error {
	line := 1
	level, dots, levels := 0, 0, 0
	var stack []int
	count := func(d int) { levels += d * (d + 1) / 2 }
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '\n':
			line++
			dots = 0
		case ',':
			dots = 0
		case '=':
			count(level + dots + 1)
		case '#':
			for i+1 < len(src) && src[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			i, line = auth.SkipTOMLString(src, i, line)
		case '[', '{':
			stack = append(stack, level)
			level += 1 + dots
			dots = 0
		case ']', '}':
			count(level + dots)
			if n := len(stack); n > 0 {
				level = stack[n-1]
				stack = stack[:n-1]
			}
			dots = 0
		case '.':
			dots++
		}
		if level+dots > maxConfigNesting {
			return fmt.Errorf("line %d: tables, arrays and dotted keys nested more than %d deep, the limit", line, maxConfigNesting)
		}
		if levels > maxConfigKeyLevels {
			return fmt.Errorf("line %d: more than %d key levels in all, the limit (a key or table at depth d counts d(d+1)/2): split the nesting or remove keys", line, maxConfigKeyLevels)
		}
	}
	return nil
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
	pos("stomp.max_transactions", c.Stomp.MaxTransactions)
	pos64("stomp.max_output_bytes", c.Stomp.MaxOutputBytes)
	pos64("stomp.max_transaction_bytes", c.Stomp.MaxTxBytes)
	pos64("stomp.max_journal_pending_bytes", c.Stomp.MaxJournalPendingBytes)
	errs = append(errs, c.validateWeb()...)
	if b := c.Memory.BudgetBytes; b != 0 && (b < 16<<20 || b > 1<<50) {
		bad("memory.budget_bytes: %d: want 0 (40%% of the memory available) or 16 MiB (16777216) to 1 PiB", b)
	}
	pos("queues.prefetch", c.Queues.Prefetch)
	pos("queues.auto_prefetch", c.Queues.AutoPrefetch)
	pos("queues.max_deliveries", c.Queues.MaxDeliveries)
	pos("queues.memory_window", c.Queues.MemoryWindow)
	pos64("queues.memory_window_bytes", c.Queues.MemoryWindowBytes)
	if b := c.Queues.BacklogCacheBytes; b < 0 {
		bad("queues.backlog_cache_bytes: %d: want 0 (no cache) or more", b)
	}
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
	// Frame limits bound what one connection may make the daemon allocate.
	atMost := func(name string, v, limit int, human string) {
		if v > limit {
			bad("%s: at most %d (%s), got %d", name, limit, human, v)
		}
	}
	atMost("stomp.max_header_line", c.Stomp.MaxHeaderLine, maxHeaderLine, "1 MiB")
	atMost("stomp.max_header_bytes", c.Stomp.MaxHeaderBytes, maxHeaderBytes, "16 MiB")
	atMost("stomp.max_headers", c.Stomp.MaxHeaders, maxHeaders, "headers per frame")
	atMost("stomp.max_body_bytes", c.Stomp.MaxBodyBytes, maxBodyBytes, "512 MiB")
	for _, d := range []struct {
		name string
		v    Duration
	}{
		{"stomp.connect_timeout", c.Stomp.ConnectTimeout},
		{"stomp.write_timeout", c.Stomp.WriteTimeout},
	} {
		if d.v.Duration <= 0 {
			bad("%s: must be positive (example: \"10s\"), got %s", d.name, d.v)
		}
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{
		{"stomp.heartbeat_send", c.Stomp.HeartbeatSend},
		{"stomp.heartbeat_receive", c.Stomp.HeartbeatReceive},
		{"journal.checkpoint_interval", c.Journal.Checkpoint},
		{"queues.redelivery_delay_min", c.Queues.RedeliveryMin},
		{"queues.redelivery_delay_max", c.Queues.RedeliveryMax},
		{"queues.ack_timeout", c.Queues.AckTimeout},
		{"queues.dedup_window", c.Queues.DedupWindow},
		{"queues.block_timeout", c.Queues.BlockTimeout},
	} {
		if d.v.Duration < 0 {
			bad("%s: must not be negative, got %s", d.name, d.v)
		}
	}
	if c.Journal.WALLimitBytes < 0 {
		bad("journal.wal_limit_bytes: must not be negative, got %d", c.Journal.WALLimitBytes)
	}
	if c.Journal.MmapBytes < 0 {
		bad("journal.mmap_bytes: must not be negative, got %d (0 turns the memory map off)", c.Journal.MmapBytes)
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
		for _, d := range []struct {
			name string
			v    Duration
		}{
			{"redelivery_delay_min", p.RedeliveryMin}, {"redelivery_delay_max", p.RedeliveryMax},
			{"ack_timeout", p.AckTimeout}, {"block_timeout", p.BlockTimeout},
		} {
			if d.v.Duration < 0 {
				bad("%s.%s: must not be negative, got %s", where, d.name, d.v)
			}
		}
	}
	errs = append(errs, c.validateAuth()...)
	errs = append(errs, c.validateHistory()...)
	errs = append(errs, c.validateStreams()...)
	errs = append(errs, c.validateKV()...)
	errs = append(errs, c.validateBridges()...)
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
		} else if ap, err := netip.ParseAddrPort(ch.Group); err != nil || !ap.Addr().Is4() || !ap.Addr().IsMulticast() || ap.Port() == 0 {
			bad("%s.group: %q: want an IPv4 multicast address and port (example: \"239.255.0.1:7400\")", where, ch.Group)
		}
		// The IP TTL is one byte; 0 takes the default, 1 (the LAN segment).
		if ch.TTL < 0 || ch.TTL > 255 {
			bad("%s.ttl: %d: want 0 to 255 (0: the default, 1)", where, ch.TTL)
		}
		// The key id is one byte of every datagram's header.
		if ch.KeyID < 0 || ch.KeyID > 255 {
			bad("%s.key_id: %d: want 0 to 255 (it is one byte on the wire)", where, ch.KeyID)
		}
		if ch.RateLimit < 0 {
			bad("%s.rate_limit: must be 0 (unlimited) or positive, got %d", where, ch.RateLimit)
		}
		if ch.Window < 0 {
			bad("%s.window: must be 0 (the default, 64 MiB) or positive, got %d", where, ch.Window)
		}
		if ch.RepairRate < 0 || ch.RepairRate > 1<<34 {
			bad("%s.repair_rate: %d: want 0 (the default, 32 MiB/s) to 17179869184 bytes per second", where, ch.RepairRate)
		}
		if ch.SourceRepairRate < 0 || ch.SourceRepairRate > 1<<34 {
			bad("%s.source_repair_rate: %d: want 0 (the default, a quarter of repair_rate) to 17179869184 bytes per second", where, ch.SourceRepairRate)
		} else if ch.RepairRate > 0 && ch.SourceRepairRate > ch.RepairRate {
			bad("%s.source_repair_rate: %d is above repair_rate %d: one host could take the whole repair budget", where, ch.SourceRepairRate, ch.RepairRate)
		}
		if ch.NAKSources < 0 || ch.NAKSources > 1<<20 {
			bad("%s.nak_sources: %d: want 0 (the default, 1024) to 1048576", where, ch.NAKSources)
		}
		if d := ch.StreamIdle.Duration; d != 0 && (d < time.Second || d > 30*24*time.Hour) {
			bad("%s.stream_idle: %s: want 0 (the default, 10m) or 1s to 720h", where, ch.StreamIdle)
		}
		if ch.MaxStreams < 0 || ch.MaxStreams > 10_000_000 {
			bad("%s.max_streams: %d: want 0 (the default, 100000) to 10000000", where, ch.MaxStreams)
		}
		if len(ch.Topics) == 0 && len(ch.Streams) == 0 && len(ch.KV) == 0 {
			bad("%s.topics: list at least one topic pattern (example: [\"metrics.>\"]), stream pattern (streams = [\"stats.>\"]) or key-value bucket (kv = [\"config\"])", where)
		}
		for _, p := range ch.KV {
			if p != "*" && p != ">" && checkBucketName(p) != nil {
				bad("%s.kv: %q: want key-value bucket names (1 to 64 letters, digits, - or _: BUCKET of /kv/BUCKET.KEY) or \"*\" for every bucket", where, p)
			}
		}
		for _, p := range ch.Streams {
			if p == "" {
				bad("%s.streams: an empty pattern; give stream name patterns (example: [\"stats.>\"])", where)
			}
		}
		switch ch.Profile {
		case "", "low-latency", "dashboard":
		default:
			bad("%s.profile: %q: want \"low-latency\" or \"dashboard\"", where, ch.Profile)
		}
		switch ch.LoneInline {
		case "", "on", "off":
		default:
			bad("%s.lone_inline: %q: want \"on\", \"off\" or \"\" (as the profile says: on for low-latency, off for dashboard)", where, ch.LoneInline)
		}
		if ch.Key != "" && ch.KeyFile != "" {
			bad("%s: set key or key_file, not both", where)
		}
		hasKey := ch.Key != "" || ch.KeyFile != ""
		if ch.Seal && !hasKey {
			bad("%s.seal: sealing needs the channel's key: set key_file (or key)", where)
		}
		if ch.PreviousKeyID < 0 || ch.PreviousKeyID > 255 {
			bad("%s.previous_key_id: %d: want 0 to 255 (it is one byte on the wire)", where, ch.PreviousKeyID)
		}
		if ch.PreviousKeyFile != "" {
			if !hasKey {
				bad("%s.previous_key_file: a previous key is for a rotation to a new key: set key_file too", where)
			} else if ch.PreviousKeyID == ch.KeyID {
				bad("%s.previous_key_id: %d is also key_id: give the new key another key_id", where, ch.PreviousKeyID)
			}
		}
	}
	return errors.Join(errs...)
}
