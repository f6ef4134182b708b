package appliance

import (
	"container/heap"
	"sort"
	"time"
)

// Views are read-only snapshots of the broker for the admin API and
// metrics. Their JSON is part of the admin contract (docs/admin-api.md).

// QueueView is one queue.
type QueueView struct {
	Name        string `json:"name"`
	Messages    int    `json:"messages"` // every committed message: ready + in flight + delayed + paged out
	Bytes       int64  `json:"bytes"`
	Ready       int    `json:"ready"` // Messages - InFlight - Delayed
	InFlight    int    `json:"in_flight"`
	Delayed     int    `json:"delayed"`
	Consumers   int    `json:"consumers"`
	InMemory    int    `json:"in_memory"`    // messages held in memory (the paged-in window and in flight)
	Cached      int    `json:"cached"`       // backlog messages also kept in memory (queues.backlog_cache_bytes)
	CachedBytes int64  `json:"cached_bytes"` // their weight in the memory budget
	CacheHits   uint64 `json:"cache_page_ins_total"`
	// PageInsFailingSince: the first failure of the run of failed
	// page-ins the queue is in (its journal reads fail), null when none;
	// PageInsFailingError: the last one's error.
	PageInsFailingSince *time.Time `json:"page_ins_failing_since"`
	PageInsFailingError string     `json:"page_ins_failing_error,omitempty"`
	OldestAgeSec        float64    `json:"oldest_age_seconds"` // of the oldest message in memory; 0 if empty
	// Purging: a purge is running (nothing is delivered until it ends);
	// PurgeDeleted: how many messages it deleted so far.
	Purging      bool `json:"purging"`
	PurgeDeleted int  `json:"purge_deleted"`
	// LastPurge: how the last purge that ended since heraldd started
	// went; null before one.
	LastPurge      *PurgeView `json:"last_purge"`
	DLQ            string     `json:"dlq"`
	DLQDepth       int        `json:"dlq_depth"`
	Enqueued       uint64     `json:"enqueued_total"`
	Delivered      uint64     `json:"delivered_total"`
	Redelivered    uint64     `json:"redelivered_total"`
	Acked          uint64     `json:"acked_total"`
	Expired        uint64     `json:"expired_total"`
	DeadLettered   uint64     `json:"dead_lettered_total"`
	StaleAcks      uint64     `json:"stale_acks_total"`
	AckTimeouts    uint64     `json:"ack_timeouts_total"`
	BlockedSends   uint64     `json:"blocked_sends_total"`
	BlockedSeconds float64    `json:"blocked_seconds_total"`
}

// PurgeView is the end of a queue's purge: how many messages of what
// size it deleted, and the error that stopped it early ("" when it
// deleted everything not in flight).
type PurgeView struct {
	Deleted int       `json:"deleted"`
	Bytes   int64     `json:"bytes"`
	Error   string    `json:"error,omitempty"`
	EndedAt time.Time `json:"ended_at"`
}

// TopicView is one topic that saw traffic or has subscribers.
type TopicView struct {
	Name        string `json:"name"`
	Subscribers int    `json:"subscribers"`
	In          uint64 `json:"in_total"`
	Out         uint64 `json:"out_total"`
	Dropped     uint64 `json:"dropped_total"`
}

// ConnView is one STOMP connection.
type ConnView struct {
	ID            uint64    `json:"id"`
	Peer          string    `json:"peer"`
	Login         string    `json:"login"`
	Version       string    `json:"version"`
	Connected     time.Time `json:"connected_at"`
	Subscriptions int       `json:"subscriptions"`
	FramesIn      uint64    `json:"frames_in"`
	FramesOut     uint64    `json:"frames_out"`
	BytesIn       uint64    `json:"bytes_in"`
	MessagesIn    uint64    `json:"messages_in"`
	MessagesOut   uint64    `json:"messages_out"`
	SlowDrops     uint64    `json:"slow_drops"`
	// Who the connection logged in as ("anonymous" without a login) and
	// how (password, certificate, command, anonymous, open: no users file), and
	// its TLS version ("" for plain TCP). Empty before CONNECT.
	User string `json:"user"`
	Auth string `json:"auth"`
	TLS  string `json:"tls"`
}

// StatsView holds broker-wide totals.
type StatsView struct {
	Connections      int      `json:"connections"`
	ConnectionsTotal uint64   `json:"connections_total"`
	Refused          uint64   `json:"connections_refused_total"`
	SlowDrops        uint64   `json:"slow_subscriber_drops_total"`
	StaleAcks        uint64   `json:"stale_acks_total"`
	DedupHits        uint64   `json:"dedup_hits_total"`
	DeadLettered     uint64   `json:"dead_lettered_total"`
	TopicIn          uint64   `json:"topic_messages_in_total"`
	TopicOut         uint64   `json:"topic_messages_out_total"`
	OutputWaits      uint64   `json:"output_backpressure_total"`
	JournalWaits     uint64   `json:"journal_backpressure_total"`      // readers held by stomp.max_journal_pending_bytes
	MemoryBudget     int64    `json:"memory_budget_bytes"`             // memory.budget_bytes in force
	MemoryUsed       int64    `json:"memory_used_bytes"`               // what clients hold of it
	MemoryWaits      uint64   `json:"memory_backpressure_total"`       // readers held while it was spent
	TopicsForgotten  uint64   `json:"topics_forgotten_total"`          // idle topics forgotten (topics.idle_forget)
	QueuesForgotten  uint64   `json:"queues_forgotten_total"`          // idle empty queues forgotten (topics.idle_forget)
	LastValueEvicted uint64   `json:"topic_last_values_evicted_total"` // over topics.last_value_max_bytes
	LastValueBytes   int64    `json:"topic_last_value_bytes"`          // weight of the last values kept
	HistoryBytes     int64    `json:"topic_history_bytes"`             // weight of the messages kept (topics.history)
	HistoryMessages  int      `json:"topic_history_messages"`          // messages kept in topic history
	HistoryDropped   uint64   `json:"topic_history_dropped_total"`     // left history for topics.history_max_bytes
	DiskLow          bool     `json:"disk_low"`
	Listeners        []string `json:"listeners"`
}

// Stats returns broker-wide totals.
func (b *Broker) Stats() StatsView {
	b.mu.Lock()
	n := len(b.sessions)
	var ls []string
	for _, l := range b.listeners {
		ls = append(ls, l.Addr().String())
	}
	b.mu.Unlock()
	b.topics.mu.Lock()
	lvBytes := b.topics.lvBytes
	b.topics.mu.Unlock()
	hs := b.historyStats()
	return StatsView{
		HistoryBytes:     hs.Bytes,
		HistoryMessages:  hs.Messages,
		HistoryDropped:   hs.Dropped,
		Connections:      n,
		ConnectionsTotal: b.stats.connections.Load(),
		Refused:          b.stats.refused.Load(),
		SlowDrops:        b.stats.slowDrops.Load(),
		StaleAcks:        b.stats.staleAcks.Load(),
		DedupHits:        b.stats.dedupHits.Load(),
		DeadLettered:     b.stats.deadLettered.Load(),
		TopicIn:          b.stats.topicIn.Load(),
		TopicOut:         b.stats.topicOut.Load(),
		OutputWaits:      b.stats.outputWaits.Load(),
		JournalWaits:     b.stats.journalWaits.Load(),
		MemoryBudget:     b.mem.limit,
		MemoryUsed:       b.mem.used.Load(),
		MemoryWaits:      b.mem.waits.Load(),
		TopicsForgotten:  b.topics.forgotten.Load(),
		QueuesForgotten:  b.queuesForgotten.Load(),
		LastValueEvicted: b.topics.lvEvicted.Load(),
		LastValueBytes:   lvBytes,
		DiskLow:          b.diskLow.Load(),
		Listeners:        ls,
	}
}

// Queues returns every queue, sorted by name.
func (b *Broker) Queues() []QueueView {
	b.mu.Lock()
	qs := make([]*queue, 0, len(b.queues))
	for _, q := range b.queues {
		qs = append(qs, q)
	}
	b.mu.Unlock()
	out := make([]QueueView, 0, len(qs))
	for _, q := range qs {
		out = append(out, q.view())
	}
	depth := map[string]int{}
	for _, v := range out {
		depth[v.Name] = v.Messages
	}
	for i := range out {
		out[i].DLQDepth = depth[out[i].DLQ]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Queue returns one queue's view.
func (b *Broker) Queue(name string) (QueueView, bool) {
	q := b.lookupQueue(name)
	if q == nil {
		return QueueView{}, false
	}
	v := q.view()
	if d := b.lookupQueue(v.DLQ); d != nil {
		v.DLQDepth = d.view().Messages
	}
	return v, true
}

func (q *queue) view() QueueView {
	q.mu.Lock()
	snap := q.core.Snapshot()
	failSince, failErr, failing := q.core.PageInFailing()
	var last *PurgeView
	if q.lastPurge != nil {
		p := *q.lastPurge
		last = &p
	}
	q.mu.Unlock()
	v := QueueView{
		Name:           q.name,
		Messages:       snap.Count,
		Bytes:          snap.Bytes,
		InFlight:       snap.InFlight,
		Delayed:        snap.Delayed,
		Consumers:      snap.Consumers,
		InMemory:       snap.InMemory,
		Cached:         snap.Cached,
		CachedBytes:    snap.CacheBytes,
		CacheHits:      snap.CacheHits,
		Enqueued:       snap.Enqueued,
		Delivered:      snap.Delivered,
		Redelivered:    snap.Redelivered,
		Acked:          snap.Acked,
		Expired:        snap.Expired,
		DeadLettered:   snap.DeadLettered,
		StaleAcks:      snap.StaleAcks,
		AckTimeouts:    snap.AckTimeouts,
		Purging:        snap.Purging,
		PurgeDeleted:   snap.PurgeDeleted,
		LastPurge:      last,
		BlockedSends:   q.blocked.Load(),
		BlockedSeconds: time.Duration(q.blockedNs.Load()).Seconds(),
	}
	if !q.isDLQ {
		v.DLQ = q.deadLetterQueue()
	}
	v.Ready = max(v.Messages-v.InFlight-v.Delayed, 0)
	if failing {
		at := time.UnixMilli(failSince).UTC()
		v.PageInsFailingSince, v.PageInsFailingError = &at, failErr
	}
	if snap.Oldest > 0 {
		v.OldestAgeSec = q.b.now().Sub(time.UnixMilli(snap.Oldest)).Seconds()
	}
	return v
}

// Topics returns every topic with traffic or subscribers, sorted by name.
// Wildcard subscriptions are listed under their pattern.
func (b *Broker) Topics() []TopicView {
	views := map[string]*TopicView{}
	get := func(name string) *TopicView {
		v := views[name]
		if v == nil {
			v = &TopicView{Name: name}
			views[name] = v
		}
		return v
	}
	b.topics.rangeExact(func(name string, subs []*subscription) bool {
		get(name).Subscribers += len(subs)
		return true
	})
	for _, s := range b.topics.wildSubs() {
		get(s.name).Subscribers++
	}
	b.topics.stats.Range(func(k, v any) bool {
		st := v.(*topicStats)
		tv := get(k.(string))
		tv.In, tv.Out, tv.Dropped = st.in.Load(), st.out.Load(), st.dropped.Load()
		return true
	})
	out := make([]TopicView, 0, len(views))
	for _, v := range views {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TopicsPage returns the first limit topics by name of those Topics lists,
// and how many there are, without building the whole list.
func (b *Broker) TopicsPage(limit int) ([]TopicView, int) {
	first := &nameHeap{}
	total := 0
	consider := func(name string) {
		total++
		switch {
		case limit <= 0:
		case first.Len() < limit:
			heap.Push(first, name)
		case name < (*first)[0]:
			(*first)[0] = name
			heap.Fix(first, 0)
		}
	}
	b.topics.stats.Range(func(k, _ any) bool {
		consider(k.(string))
		return true
	})
	known := func(name string) bool {
		_, ok := b.topics.stats.Load(name)
		return ok
	}
	b.topics.rangeExact(func(name string, _ []*subscription) bool {
		if !known(name) {
			consider(name)
		}
		return true
	})
	patterns := map[string]int{}
	for _, s := range b.topics.wildSubs() {
		patterns[s.name]++
	}
	for name := range patterns {
		if len(b.topics.exactSubs(name)) == 0 && !known(name) {
			consider(name)
		}
	}
	out := make([]TopicView, first.Len())
	for i := len(out) - 1; i >= 0; i-- {
		name := heap.Pop(first).(string)
		v := TopicView{Name: name, Subscribers: len(b.topics.exactSubs(name)) + patterns[name]}
		if st, ok := b.topics.stats.Load(name); ok {
			st := st.(*topicStats)
			v.In, v.Out, v.Dropped = st.in.Load(), st.out.Load(), st.dropped.Load()
		}
		out[i] = v
	}
	return out, total
}

// nameHeap is a max-heap of names: the limit smallest seen so far.
type nameHeap []string

func (h nameHeap) Len() int           { return len(h) }
func (h nameHeap) Less(i, j int) bool { return h[i] > h[j] }
func (h nameHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nameHeap) Push(x any)        { *h = append(*h, x.(string)) }
func (h *nameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Connections returns every STOMP connection, by id.
func (b *Broker) Connections() []ConnView {
	b.mu.Lock()
	ss := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		ss = append(ss, s)
	}
	b.mu.Unlock()
	out := make([]ConnView, 0, len(ss))
	for _, s := range ss {
		if s.isEnding() {
			continue
		}
		var info connInfo // zero before CONNECT
		if ci := s.info.Load(); ci != nil {
			info = *ci
		}
		out = append(out, ConnView{
			ID:            s.id,
			Peer:          s.peer,
			Login:         info.login,
			Version:       info.version,
			Connected:     s.started,
			Subscriptions: int(s.nsubs.Load()),
			FramesIn:      s.framesIn.Load(),
			FramesOut:     s.framesOut.Load(),
			BytesIn:       s.bytesIn.Load(),
			MessagesIn:    s.msgsIn.Load(),
			MessagesOut:   s.msgsOut.Load(),
			SlowDrops:     s.slowDrops.Load(),
		})
		out[len(out)-1].User, out[len(out)-1].Auth, out[len(out)-1].TLS = s.authView()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// CloseConnection ends connection id with an ERROR saying why; false if
// there is no such connection.
func (b *Broker) CloseConnection(id uint64, reason string) bool {
	b.mu.Lock()
	s := b.sessions[id]
	b.mu.Unlock()
	if s == nil || s.isEnding() {
		return false // gone, or already on its way out
	}
	s.log.Info("connection closed by the operator", "reason", reason)
	s.shutdown(reason)
	return true
}
