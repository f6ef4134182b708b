package admin

import (
	"context"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// Broker is what the admin API reads and operates on; *appliance.Broker
// implements it.
type Broker interface {
	Stats() appliance.StatsView
	Queues() []appliance.QueueView
	Queue(name string) (appliance.QueueView, bool)
	// TopicsPage returns the first limit topics by name and how many there
	// are.
	TopicsPage(limit int) ([]appliance.TopicView, int)
	Connections() []appliance.ConnView
	CloseConnection(id uint64, reason string) bool
	// Peek calls fn with the oldest n messages of queue, in flight or not,
	// one at a time, each with at most maxBody bytes of its body and the
	// whole body's length.
	Peek(ctx context.Context, queue string, n, maxBody int, fn func(m *appliance.Message, bodyBytes int) error) error
	// Purge deletes every message of queue not in flight.
	Purge(ctx context.Context, queue string) (int, error)
	// DeleteQueue purges and forgets queue; appliance.ErrQueueBusy if it has
	// consumers.
	DeleteQueue(ctx context.Context, queue string) (int, error)
	// Requeue moves up to max (0: all) messages of queue's DLQ back to it.
	Requeue(ctx context.Context, queue string, max int) (int, error)
	// JournalHealthy reports whether the last journal write committed, and
	// since when writes fail when it did not.
	JournalHealthy() (bool, time.Time)
	// PageInsHealthy is nil unless a queue's page-ins (journal reads)
	// have failed without a break for appliance.PageInFailBound; then it
	// names the queue and the journal's error.
	PageInsHealthy() error
}

var _ Broker = (*appliance.Broker)(nil)

// Journal is what the admin API needs of the journal. The daemon adapts
// *journal.Store to it (this package does not link SQLite, so the CLI does
// not either).
type Journal interface {
	// Status returns the journal's sizes and counters.
	Status() JournalStatus
	// Backup writes a consistent copy of the journal to dest, an absolute
	// path that must not exist, calling progress after every step.
	Backup(ctx context.Context, dest string, progress func(done, total int)) error
}

// ChannelStats lists the multicast channels; the daemon registers one with
// Server.SetChannels when multicast is configured. Channels must be cheap
// and safe to call from any goroutine (it is called at every scrape).
type ChannelStats interface {
	Channels() []ChannelView
}

// ChannelView is one multicast channel.
type ChannelView struct {
	Name        string   `json:"name"`
	Group       string   `json:"group"`        // address:port
	Interface   string   `json:"interface"`    // empty: the system's choice
	Profile     string   `json:"profile"`      // low-latency or dashboard
	Topics      []string `json:"topics"`       // patterns mapped to the channel
	KV          []string `json:"kv,omitempty"` // key-value buckets carried (kv)
	Session     string   `json:"session"`      // session id of this daemon run, hex
	Streams     int      `json:"streams"`      // topics seen on the channel
	Messages    uint64   `json:"messages_total"`
	Datagrams   uint64   `json:"datagrams_total"`
	Bytes       uint64   `json:"bytes_total"`
	Repairs     uint64   `json:"repairs_total"` // RDATA datagrams sent
	NAKs        uint64   `json:"naks_total"`    // NAKs received
	Losses      uint64   `json:"losses_total"`  // datagram sequences announced unrepairable (NCF gone or LOSS)
	RateLimited float64  `json:"rate_limited_seconds_total"`
	WindowBytes int64    `json:"window_bytes"`       // retransmit window in use
	RepairBytes uint64   `json:"repair_bytes_total"` // bytes of RDATA and repaired CATALOG sent
	NAKsDropped uint64   `json:"naks_dropped_total"` // NAKs refused: over a budget, replayed, malformed, another session
	// NAKSourceCount is how many NAK sources the sender tracks now (bounded,
	// least recently used evicted); NAKSources the busiest of them by repair
	// bytes, at most 8.
	NAKSourceCount int             `json:"nak_sources"`
	NAKSources     []NAKSourceView `json:"top_nak_sources"`
	// Fragments: messages larger than one datagram, sent as fragments (receivers count
	// reassembled, dropped and incomplete ones: herald listen --stats).
	FragmentedMessages uint64 `json:"fragmented_messages_total"`
	Fragments          uint64 `json:"fragments_total"` // fragment datagrams sent (originals)
	// Late join: HISTORY answers sent to receivers joining late, and requests not answered.
	HistoryAnswers uint64 `json:"history_answers_total"`
	HistoryRefused uint64 `json:"history_refused_total"`
	// StreamsEvicted counts streams the sender forgot before they went idle, to stay
	// within the channel's stream table (max_streams).
	StreamsEvicted uint64 `json:"streams_evicted_total"`
}

// NAKSourceView is one host that sent NAKs to a channel's sender (its IP
// address: the unit the repair budget is kept per).
type NAKSourceView struct {
	Source      string `json:"source"`
	NAKs        uint64 `json:"naks_total"`         // NAKs accepted
	NAKsDropped uint64 `json:"naks_dropped_total"` // NAKs refused (NAK rate, replay)
	Refused     uint64 `json:"refused_total"`      // sequences not answered: over the source's repair budget or the per-NAK limit
	Repairs     uint64 `json:"repairs_total"`      // repair datagrams sent for it
	RepairBytes uint64 `json:"repair_bytes_total"` // their bytes
}

// JournalStatus is the journal part of Status.
type JournalStatus struct {
	Path     string `json:"path"`
	DBBytes  int64  `json:"db_bytes"`
	WALBytes int64  `json:"wal_bytes"`
	// DBFreeBytes: of DBBytes, the pages of deleted messages, which new
	// ones reuse and an idle journal gives back to the disk; they count as
	// free for the disk floor.
	DBFreeBytes   int64  `json:"db_free_bytes"`
	Commits       uint64 `json:"commits_total"`
	Ops           uint64 `json:"ops_total"`
	FailedCommits uint64 `json:"failed_commits_total"`
	InlineCommits uint64 `json:"inline_commits_total"` // committed by a lone SEND's connection reader
	Checkpoints   uint64 `json:"checkpoints_total"`
	// WALBackstops: times the WAL reached wal_limit_bytes before the
	// background checkpoints copied it back, and the journal's writer did
	// (commits waited): writes faster than the checkpoints.
	WALBackstops      uint64     `json:"wal_backstops_total"`
	ReadErrors        uint64     `json:"read_errors_total"` // page-ins that failed to read the database (retried by the queue)
	LastCheckpoint    *time.Time `json:"last_checkpoint"`   // null before the first
	LastBatchOps      int        `json:"last_batch_ops"`
	LastCommitSeconds float64    `json:"last_commit_seconds"`
}

// Status is GET /v1/status.
type Status struct {
	Version       string              `json:"version"`
	PID           int                 `json:"pid"`
	StartedAt     time.Time           `json:"started_at"`
	UptimeSeconds float64             `json:"uptime_seconds"`
	Ready         bool                `json:"ready"`
	LogLevel      string              `json:"log_level"`
	DataDir       string              `json:"data_dir"`
	AdminSocket   string              `json:"admin_socket"`
	MetricsListen string              `json:"metrics_listen"` // bound address, empty when off
	Listeners     []string            `json:"listeners"`
	Connections   int                 `json:"connections"`
	Queues        int                 `json:"queues"`
	Messages      int                 `json:"messages"`
	MessageBytes  int64               `json:"message_bytes"`
	Journal       *JournalStatus      `json:"journal"` // null when the daemon runs without one
	Totals        appliance.StatsView `json:"totals"`
	// RestartNeeded lists the keys changed in the configuration file that
	// SIGHUP could not apply: they take effect at the next restart.
	RestartNeeded []string `json:"restart_needed"`
}

// QueueList is GET /v1/queues.
type QueueList struct {
	Queues []appliance.QueueView `json:"queues"`
}

// TopicList is GET /v1/topics.
type TopicList struct {
	Topics []appliance.TopicView `json:"topics"` // the first limit by name
	Total  int                   `json:"total"`  // how many topics there are
}

// ChannelList is GET /v1/channels.
type ChannelList struct {
	Channels []ChannelView `json:"channels"`
}

// ConnList is GET /v1/connections.
type ConnList struct {
	Connections []appliance.ConnView `json:"connections"`
}

// MessageView is one message of a peek.
type MessageView struct {
	ID            uint64            `json:"id"`
	Headers       map[string]string `json:"headers"` // first value of each header
	Body          string            `json:"body"`    // invalid UTF-8 replaced by U+FFFD
	BodyBase64    string            `json:"body_base64,omitempty"`
	BodyBytes     int               `json:"body_bytes"`
	BodyTruncated bool              `json:"body_truncated,omitempty"`
	Deliveries    int               `json:"deliveries"`
	EnqueuedAt    time.Time         `json:"enqueued_at"`
	NotBefore     *time.Time        `json:"not_before,omitempty"`
	ExpiresAt     *time.Time        `json:"expires_at,omitempty"`
	Group         string            `json:"group,omitempty"`
	DedupID       string            `json:"dedup_id,omitempty"`
}

// Peek is GET /v1/queues/{name}/messages.
type Peek struct {
	Queue    string        `json:"queue"`
	Messages []MessageView `json:"messages"`
}

// QueueOp is the answer of purge, delete and requeue.
type QueueOp struct {
	Queue    string `json:"queue"`
	DLQ      string `json:"dlq,omitempty"` // requeue: where the messages came from
	Purged   *int   `json:"purged,omitempty"`
	Deleted  *int   `json:"deleted,omitempty"`
	Requeued *int   `json:"requeued,omitempty"`
	// Running: the purge outlasted the request and goes on (202
	// Accepted); Purged is what it deleted so far. Its end shows in the
	// queue's view: purging false, then last_purge.
	Running bool `json:"running,omitempty"`
}

// ConnClosed is DELETE /v1/connections/{id}.
type ConnClosed struct {
	ID     uint64 `json:"id"`
	Closed bool   `json:"closed"`
	Reason string `json:"reason"`
}

// LogLevel is GET and PUT /v1/log-level.
type LogLevel struct {
	Level    string `json:"level"`
	Previous string `json:"previous,omitempty"` // PUT answer: the level before
}

// Ready is GET /v1/ready when ready.
type Ready struct {
	Ready bool `json:"ready"`
}

// BackupRequest is the body of POST /v1/backup.
type BackupRequest struct {
	Path string `json:"path"` // absolute, on the daemon's filesystem; must not exist
}

// BackupEvent is one line of the POST /v1/backup answer (NDJSON): "progress"
// lines, then one "result" or "error" line.
type BackupEvent struct {
	Type       string  `json:"type"` // progress, result, error
	PagesDone  int     `json:"pages_done,omitempty"`
	PagesTotal int     `json:"pages_total,omitempty"`
	Path       string  `json:"path,omitempty"`
	Bytes      int64   `json:"bytes,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"`
	Error      string  `json:"error,omitempty"`
	Hint       string  `json:"hint,omitempty"`
}

// ErrorBody is every error answer: {"error": "...", "hint": "..."}.
type ErrorBody struct {
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}
