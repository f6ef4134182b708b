package appliance

import (
	"fmt"
	"time"

	"github.com/herald-mq/herald/appliance/streamcore"
)

// StreamsConfig is the [streams] section: retention defaults, bounds and
// read paging of streams (/stream/NAME).
type StreamsConfig struct {
	// Retention defaults; 0 = no such bound. The oldest messages beyond
	// any bound are removed in the background.
	MaxAge   Duration `toml:"max_age" json:"max_age"`
	MaxBytes int64    `toml:"max_bytes" json:"max_bytes"`
	MaxCount int64    `toml:"max_count" json:"max_count"`
	// MaxStreams bounds how many streams clients may create.
	MaxStreams int `toml:"max_streams" json:"max_streams"`
	// MaxCursors bounds the durable cursors (x-stream-consumer names) of
	// one stream: a SUBSCRIBE naming a new one beyond it is refused.
	MaxCursors int `toml:"max_cursors" json:"max_cursors"`
	// PageBytes and PageMessages bound one read of a stream for one
	// subscriber (what a subscriber holds in memory before its MESSAGEs
	// are queued to its connection).
	PageBytes    int64 `toml:"page_bytes" json:"page_bytes"`
	PageMessages int   `toml:"page_messages" json:"page_messages"`
	// TailBytes bounds each stream's tail cache: its newest messages, kept
	// in memory (charged to the queues' half of memory.budget_bytes) so
	// that caught-up subscribers do not each read every append from the
	// journal. 0 turns it off.
	TailBytes int64 `toml:"tail_bytes" json:"tail_bytes"`
	// RetentionInterval is how often retention runs; RetentionBatch how
	// many messages one retention transaction removes at most.
	RetentionInterval Duration `toml:"retention_interval" json:"retention_interval"`
	RetentionBatch    int      `toml:"retention_batch" json:"retention_batch"`
	// Policies override the retention defaults for streams whose name
	// matches (* one dot segment, > the rest); the first match wins.
	Policies []StreamPolicy `toml:"policy" json:"policies"`
}

// StreamPolicy is [[streams.policy]]: retention of matching streams. A
// zero field inherits the [streams] default.
type StreamPolicy struct {
	Match    string   `toml:"match" json:"match"`
	MaxAge   Duration `toml:"max_age" json:"max_age,omitzero"`
	MaxBytes int64    `toml:"max_bytes" json:"max_bytes,omitempty"`
	MaxCount int64    `toml:"max_count" json:"max_count,omitempty"`
}

func defaultStreamsConfig() StreamsConfig {
	return StreamsConfig{
		MaxAge:            Duration{7 * 24 * time.Hour},
		MaxBytes:          1 << 30,
		MaxStreams:        1000,
		MaxCursors:        1000,
		PageBytes:         1 << 20,
		PageMessages:      512,
		TailBytes:         1 << 20,
		RetentionInterval: Duration{time.Second},
		RetentionBatch:    256,
	}
}

// Retention returns the retention of stream name: the defaults with the
// first matching policy applied.
func (c StreamsConfig) Retention(name string) streamcore.Policy {
	p := streamcore.Policy{MaxAge: c.MaxAge.Milliseconds(), MaxBytes: c.MaxBytes, MaxCount: c.MaxCount}
	for _, pol := range c.Policies {
		if !MatchTopic(pol.Match, name) {
			continue
		}
		if pol.MaxAge.Duration > 0 {
			p.MaxAge = pol.MaxAge.Milliseconds()
		}
		if pol.MaxBytes > 0 {
			p.MaxBytes = pol.MaxBytes
		}
		if pol.MaxCount > 0 {
			p.MaxCount = pol.MaxCount
		}
		break
	}
	return p
}

// validateStreams checks [streams] and [[streams.policy]].
func (c *Config) validateStreams() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	s := c.Streams
	if s.MaxAge.Duration < 0 {
		bad("streams.max_age: must be 0 (no age bound) or positive, got %s", s.MaxAge)
	}
	if s.MaxBytes < 0 || s.MaxCount < 0 {
		bad("streams.max_bytes, streams.max_count: must be 0 (no bound) or positive")
	}
	if s.MaxStreams <= 0 || s.MaxStreams > 1_000_000 {
		bad("streams.max_streams: want 1 to 1000000, got %d", s.MaxStreams)
	}
	if s.MaxCursors <= 0 || s.MaxCursors > 1_000_000 {
		bad("streams.max_cursors: want 1 to 1000000, got %d", s.MaxCursors)
	}
	if s.PageBytes < 4096 || s.PageBytes > 256<<20 {
		bad("streams.page_bytes: want 4096 to 268435456, got %d", s.PageBytes)
	}
	if s.TailBytes < 0 || s.TailBytes > 1<<30 {
		bad("streams.tail_bytes: want 0 (no tail cache) to 1073741824, got %d", s.TailBytes)
	}
	if s.PageMessages < 1 || s.PageMessages > 65536 {
		bad("streams.page_messages: want 1 to 65536, got %d", s.PageMessages)
	}
	if d := s.RetentionInterval.Duration; d < 10*time.Millisecond || d > time.Hour {
		bad("streams.retention_interval: want 10ms to 1h, got %s", s.RetentionInterval)
	}
	if s.RetentionBatch < 1 || s.RetentionBatch > 100000 {
		bad("streams.retention_batch: want 1 to 100000, got %d", s.RetentionBatch)
	}
	for i, p := range s.Policies {
		where := fmt.Sprintf("streams.policy[%d]", i)
		if p.Match == "" {
			bad("%s.match: must not be empty (example: \"stats.>\")", where)
		}
		if p.MaxAge.Duration < 0 || p.MaxBytes < 0 || p.MaxCount < 0 {
			bad("%s: max_age, max_bytes and max_count must be 0 (inherit) or positive", where)
		}
	}
	return errs
}
