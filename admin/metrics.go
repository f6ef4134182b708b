package admin

import (
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is Herald's Prometheus registry (private: nothing is registered
// globally). Broker, journal and channel figures are read from their views
// at scrape time; only the journal's commit histograms are recorded as they
// happen (ObserveCommit).
type Metrics struct {
	reg           *prometheus.Registry
	commitSeconds prometheus.Histogram
	batchOps      prometheus.Histogram
	srv           atomic.Pointer[Server]
}

// NewMetrics returns the registry with the build info, Go runtime and
// process collectors and the commit histograms. It is ready for
// ObserveCommit at once; the views are attached when the Server is created.
func NewMetrics(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_journal_commit_duration_seconds",
		Help:    "Time to commit one journal transaction (group commit), fsync included.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	m.batchOps = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_journal_batch_operations",
		Help:    "Operations committed per journal transaction.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096},
	})
	m.reg.MustRegister(m.commitSeconds, m.batchOps,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "herald_build_info",
			Help:        "Always 1; labels name the build.",
			ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
		&viewCollector{m: m},
	)
	return m
}

// ObserveCommit records one journal commit; pass it to
// journal.Store.SetCommitHook.
func (m *Metrics) ObserveCommit(ops int, d time.Duration) {
	m.commitSeconds.Observe(d.Seconds())
	m.batchOps.Observe(float64(ops))
}

// Registry returns the registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves /metrics and /healthz, and nothing else.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		s := m.srv.Load()
		if s == nil {
			http.Error(w, "starting\n", http.StatusServiceUnavailable)
			return
		}
		if err := s.isReady(); err != nil {
			http.Error(w, "not ready: "+err.Error()+"\n", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	return mux
}

func (m *Metrics) attach(s *Server) { m.srv.Store(s) }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	// Queue figures, labelled by queue.
	dQueueMessages  = desc("herald_queue_messages", "Messages in the queue: ready, in flight, delayed and paged out.", "queue")
	dQueueBytes     = desc("herald_queue_bytes", "Bytes of the queue's messages.", "queue")
	dQueueReady     = desc("herald_queue_ready_messages", "Messages ready for delivery.", "queue")
	dQueueInFlight  = desc("herald_queue_in_flight_messages", "Messages delivered and not yet acknowledged.", "queue")
	dQueueDelayed   = desc("herald_queue_delayed_messages", "Messages not deliverable yet (delay, redelivery back-off).", "queue")
	dQueueConsumers = desc("herald_queue_consumers", "Subscriptions consuming the queue.", "queue")
	dQueueOldest    = desc("herald_queue_oldest_message_age_seconds", "Age of the oldest message in memory; 0 when empty.", "queue")
	dQueueCached    = desc("herald_queue_backlog_cache_bytes", "Weight of the queue's backlog kept in memory past its window (queues.backlog_cache_bytes).", "queue")
	dQueueCacheHits = desc("herald_queue_backlog_cache_page_ins_total", "Page-ins answered from the backlog cache instead of the journal.", "queue")
	dQueueDLQ       = desc("herald_queue_dlq_messages", "Messages in the queue's dead-letter queue.", "queue")
	dQueueEnq       = desc("herald_queue_enqueued_total", "Messages committed to the queue.", "queue")
	dQueueDeliv     = desc("herald_queue_deliveries_total", "Deliveries to consumers, redeliveries included.", "queue")
	dQueueRedeliv   = desc("herald_queue_redeliveries_total", "Redeliveries (after NACK, disconnect or ack timeout).", "queue")
	dQueueAcked     = desc("herald_queue_acked_total", "Messages acknowledged.", "queue")
	dQueueExpired   = desc("herald_queue_expired_total", "Messages that expired.", "queue")
	dQueueDead      = desc("herald_queue_dead_lettered_total", "Messages moved to the dead-letter queue.", "queue")
	dQueueStale     = desc("herald_queue_stale_acks_total", "ACKs and NACKs of a stale delivery attempt, ignored.", "queue")
	dQueueAckTO     = desc("herald_queue_ack_timeouts_total", "Deliveries whose ack timeout expired.", "queue")
	dQueueBlocked   = desc("herald_queue_blocked_sends_total", "SENDs that waited because the queue was full.", "queue")
	dQueueBlockedS  = desc("herald_queue_blocked_producer_seconds_total", "Time producers spent blocked on the full queue.", "queue")
	// Topic figures, labelled by topic (or wildcard pattern).
	dTopicSubs    = desc("herald_topic_subscribers", "STOMP subscribers of the topic.", "topic")
	dTopicIn      = desc("herald_topic_messages_in_total", "Messages published to the topic.", "topic")
	dTopicOut     = desc("herald_topic_messages_out_total", "Messages fanned out to subscribers of the topic.", "topic")
	dTopicDropped = desc("herald_topic_slow_subscriber_drops_total", "Messages dropped for slow subscribers of the topic.", "topic")
	// Broker totals.
	dConns        = desc("herald_connections", "Open STOMP connections.")
	dConnsTotal   = desc("herald_connections_total", "STOMP connections accepted.")
	dRefused      = desc("herald_connections_refused_total", "STOMP connections refused.")
	dSlowDrops    = desc("herald_slow_subscriber_drops_total", "Topic messages dropped for slow subscribers, all topics.")
	dOutputWaits  = desc("herald_output_backpressure_total", "Times a connection was not read because its unwritten frames exceeded stomp.max_output_bytes.")
	dQueuesForgot = desc("herald_queues_forgotten_total", "Empty queues forgotten after topics.idle_forget without use.")
	dMemWaits     = desc("herald_memory_backpressure_total", "Times a connection was not read because the memory budget (memory.budget_bytes) was spent.")
	dMemBudget    = desc("herald_memory_budget_bytes", "The memory budget in force (memory.budget_bytes).")
	dMemUsed      = desc("herald_memory_used_bytes", "Bytes clients hold of the memory budget: frames to write, bodies being read, transactions, queue messages in memory, last values.")
	dJournalWaits = desc("herald_journal_backpressure_total", "Times a connection was not read because its writes waiting for the journal exceeded stomp.max_journal_pending_bytes.")
	dStaleAcks    = desc("herald_stale_acks_total", "Stale ACKs and NACKs ignored, all queues.")
	dDedupHits    = desc("herald_dedup_hits_total", "SENDs recognised as duplicates by their dedup id.")
	dDeadLettered = desc("herald_dead_lettered_total", "Messages dead-lettered, all queues.")
	dTopicInAll   = desc("herald_topic_messages_in_all_total", "Messages published to topics, all topics.")
	dTopicOutAll  = desc("herald_topic_messages_out_all_total", "Messages fanned out to topic subscribers, all topics.")
	dTopicsForgot = desc("herald_topics_forgotten_total", "Idle topics forgotten (topics.idle_forget).")
	dLVEvicted    = desc("herald_topic_last_values_evicted_total", "Topic last values dropped for topics.last_value_max_bytes.")
	dLVBytes      = desc("herald_topic_last_value_bytes", "Weight of the topic last values kept.")
	dHistBytes    = desc("herald_topic_history_bytes", "Weight of the topic messages kept by topics.history rules.")
	dHistMsgs     = desc("herald_topic_history_messages", "Topic messages kept by topics.history rules.")
	dHistDropped  = desc("herald_topic_history_dropped_total", "Topic history messages dropped for topics.history_max_bytes.")
	dDiskLow      = desc("herald_disk_low", "1 when free disk space is below journal.min_free_bytes (queues refuse SENDs).")
	dStart        = desc("herald_start_time_seconds", "Start time of the daemon, seconds since the epoch.")
	// Journal.
	dJDB         = desc("herald_journal_db_bytes", "Size of the journal database file.")
	dJWAL        = desc("herald_journal_wal_bytes", "Size of the journal's write-ahead log.")
	dJDBFree     = desc("herald_journal_db_free_bytes", "Bytes of the journal database file free for reuse: pages of deleted messages, filled before the file grows, given back to the disk when the journal is idle.")
	dJCommits    = desc("herald_journal_commits_total", "Journal transactions committed.")
	dJOps        = desc("herald_journal_operations_total", "Journal operations committed.")
	dJFailed     = desc("herald_journal_failed_commits_total", "Journal transactions that failed.")
	dJInline     = desc("herald_journal_inline_commits_total", "Journal transactions committed by the connection that waited for them (a lone SEND), not the writer.")
	dJCkpt       = desc("herald_journal_checkpoints_total", "WAL checkpoints run.")
	dJBackstop   = desc("herald_journal_wal_backstops_total", "Times the WAL reached wal_limit_bytes and the writer copied it back itself, commits waiting (writes faster than the checkpoints).")
	dJReadErrs   = desc("herald_journal_read_errors_total", "Page-ins that failed to read a queue's messages from the journal (I/O error, corruption); the queue retries them.")
	dJLastCkpt   = desc("herald_journal_last_checkpoint_timestamp_seconds", "Time of the last checkpoint; 0 before the first.")
	dJLastCommit = desc("herald_journal_last_commit_duration_seconds", "Duration of the last journal commit.")
	// Multicast channels, labelled by channel.
	dChMsgs        = desc("herald_channel_messages_total", "Messages sent on the multicast channel.", "channel")
	dChDgrams      = desc("herald_channel_datagrams_total", "Datagrams sent on the channel, repairs included.", "channel")
	dChBytes       = desc("herald_channel_bytes_total", "Bytes sent on the channel.", "channel")
	dChRepairs     = desc("herald_channel_repairs_total", "Repair datagrams (RDATA) sent.", "channel")
	dChNAKs        = desc("herald_channel_naks_total", "NAKs received.", "channel")
	dChLosses      = desc("herald_channel_losses_total", "Datagram sequences the sender announced it cannot repair (NCF gone or LOSS).", "channel")
	dChRepairBytes = desc("herald_channel_repair_bytes_total", "Bytes of repairs (RDATA, repaired CATALOG) sent.", "channel")
	dChNAKsDropped = desc("herald_channel_naks_dropped_total", "NAKs refused: over a source's NAK rate, replayed, malformed or for another session.", "channel")
	dChSources     = desc("herald_channel_nak_sources", "NAK sources (IP addresses) the sender tracks now.", "channel")
	dChSrcNAKs     = desc("herald_channel_source_naks_total", "NAKs accepted from one source (the busiest few by repair bytes).", "channel", "source")
	dChSrcRepBytes = desc("herald_channel_source_repair_bytes_total", "Repair bytes sent for one NAK source (the busiest few).", "channel", "source")
	dChSrcRefused  = desc("herald_channel_source_refused_total", "Sequences one source asked for and was refused (over its repair budget or the per-NAK limit).", "channel", "source")
	dChRate        = desc("herald_channel_rate_limited_seconds_total", "Time the channel's sender waited on its rate limit.", "channel")
	dChWindow      = desc("herald_channel_window_bytes", "Bytes held in the channel's retransmit window.", "channel")
	dChStreams     = desc("herald_channel_streams", "Topics (streams) seen on the channel.", "channel")
	dChFragmented  = desc("herald_channel_fragmented_messages_total", "Messages larger than one datagram, sent as fragments.", "channel")
	dChFragments   = desc("herald_channel_fragments_total", "Fragment datagrams sent (originals, not repairs).", "channel")
	dChHistory     = desc("herald_channel_history_answers_total", "Late-join HISTORY answers sent.", "channel")
	dChHistRefused = desc("herald_channel_history_refused_total", "Late-join history requests not answered (too soon from a source, or over its repair budget).", "channel")
	dChEvicted     = desc("herald_channel_streams_evicted_total", "Streams the sender forgot before they went idle, to stay within max_streams.", "channel")
)

// viewCollector reads the broker's, journal's and channels' views at scrape
// time: no bookkeeping of its own.
type viewCollector struct{ m *Metrics }

func (c *viewCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		dQueueMessages, dQueueBytes, dQueueReady, dQueueInFlight, dQueueDelayed, dQueueConsumers, dQueueOldest, dQueueDLQ, dQueueCached, dQueueCacheHits,
		dQueueEnq, dQueueDeliv, dQueueRedeliv, dQueueAcked, dQueueExpired, dQueueDead, dQueueStale, dQueueAckTO, dQueueBlocked, dQueueBlockedS,
		dTopicSubs, dTopicIn, dTopicOut, dTopicDropped,
		dConns, dConnsTotal, dRefused, dSlowDrops, dOutputWaits, dJournalWaits, dMemWaits, dMemBudget, dMemUsed, dStaleAcks, dDedupHits, dDeadLettered, dTopicInAll, dTopicOutAll, dTopicsForgot, dQueuesForgot, dLVEvicted, dLVBytes, dHistBytes, dHistMsgs, dHistDropped, dDiskLow, dStart,
		dJDB, dJDBFree, dJWAL, dJCommits, dJOps, dJFailed, dJInline, dJCkpt, dJBackstop, dJReadErrs, dJLastCkpt, dJLastCommit,
		dChMsgs, dChDgrams, dChBytes, dChRepairs, dChNAKs, dChLosses, dChRate, dChWindow, dChStreams,
		dChRepairBytes, dChNAKsDropped, dChSources, dChSrcNAKs, dChSrcRepBytes, dChSrcRefused,
		dChFragmented, dChFragments, dChHistory, dChHistRefused,
	} {
		ch <- d
	}
}

func (c *viewCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.srv.Load()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	b := s.o.Broker
	for _, q := range b.Queues() {
		n := q.Name
		gauge(dQueueMessages, float64(q.Messages), n)
		gauge(dQueueBytes, float64(q.Bytes), n)
		gauge(dQueueReady, float64(q.Ready), n)
		gauge(dQueueInFlight, float64(q.InFlight), n)
		gauge(dQueueDelayed, float64(q.Delayed), n)
		gauge(dQueueConsumers, float64(q.Consumers), n)
		gauge(dQueueOldest, q.OldestAgeSec, n)
		gauge(dQueueCached, float64(q.CachedBytes), n)
		counter(dQueueCacheHits, float64(q.CacheHits), n)
		gauge(dQueueDLQ, float64(q.DLQDepth), n)
		counter(dQueueEnq, float64(q.Enqueued), n)
		counter(dQueueDeliv, float64(q.Delivered), n)
		counter(dQueueRedeliv, float64(q.Redelivered), n)
		counter(dQueueAcked, float64(q.Acked), n)
		counter(dQueueExpired, float64(q.Expired), n)
		counter(dQueueDead, float64(q.DeadLettered), n)
		counter(dQueueStale, float64(q.StaleAcks), n)
		counter(dQueueAckTO, float64(q.AckTimeouts), n)
		counter(dQueueBlocked, float64(q.BlockedSends), n)
		counter(dQueueBlockedS, q.BlockedSeconds, n)
	}
	ts, _ := b.TopicsPage(MaxTopics) // bounded: a scrape of every topic name could be huge
	for _, t := range ts {
		gauge(dTopicSubs, float64(t.Subscribers), t.Name)
		counter(dTopicIn, float64(t.In), t.Name)
		counter(dTopicOut, float64(t.Out), t.Name)
		counter(dTopicDropped, float64(t.Dropped), t.Name)
	}
	st := b.Stats()
	gauge(dConns, float64(st.Connections))
	counter(dConnsTotal, float64(st.ConnectionsTotal))
	counter(dRefused, float64(st.Refused))
	counter(dSlowDrops, float64(st.SlowDrops))
	counter(dOutputWaits, float64(st.OutputWaits))
	counter(dJournalWaits, float64(st.JournalWaits))
	counter(dMemWaits, float64(st.MemoryWaits))
	gauge(dMemBudget, float64(st.MemoryBudget))
	gauge(dMemUsed, float64(st.MemoryUsed))
	counter(dStaleAcks, float64(st.StaleAcks))
	counter(dDedupHits, float64(st.DedupHits))
	counter(dDeadLettered, float64(st.DeadLettered))
	counter(dTopicInAll, float64(st.TopicIn))
	counter(dTopicOutAll, float64(st.TopicOut))
	counter(dTopicsForgot, float64(st.TopicsForgotten))
	counter(dQueuesForgot, float64(st.QueuesForgotten))
	counter(dLVEvicted, float64(st.LastValueEvicted))
	gauge(dLVBytes, float64(st.LastValueBytes))
	gauge(dHistBytes, float64(st.HistoryBytes))
	gauge(dHistMsgs, float64(st.HistoryMessages))
	counter(dHistDropped, float64(st.HistoryDropped))
	low := 0.0
	if st.DiskLow {
		low = 1
	}
	gauge(dDiskLow, low)
	gauge(dStart, float64(s.o.Started.UnixNano())/1e9)
	if s.o.Journal != nil {
		js := s.o.Journal.Status()
		gauge(dJDB, float64(js.DBBytes))
		gauge(dJWAL, float64(js.WALBytes))
		gauge(dJDBFree, float64(js.DBFreeBytes))
		counter(dJCommits, float64(js.Commits))
		counter(dJOps, float64(js.Ops))
		counter(dJFailed, float64(js.FailedCommits))
		counter(dJInline, float64(js.InlineCommits))
		counter(dJCkpt, float64(js.Checkpoints))
		counter(dJBackstop, float64(js.WALBackstops))
		counter(dJReadErrs, float64(js.ReadErrors))
		last := 0.0
		if js.LastCheckpoint != nil {
			last = float64(js.LastCheckpoint.UnixNano()) / 1e9
		}
		gauge(dJLastCkpt, last)
		gauge(dJLastCommit, js.LastCommitSeconds)
	}
	for _, v := range s.channelViews() {
		n := v.Name
		counter(dChMsgs, float64(v.Messages), n)
		counter(dChDgrams, float64(v.Datagrams), n)
		counter(dChBytes, float64(v.Bytes), n)
		counter(dChRepairs, float64(v.Repairs), n)
		counter(dChNAKs, float64(v.NAKs), n)
		counter(dChLosses, float64(v.Losses), n)
		counter(dChRate, v.RateLimited, n)
		gauge(dChWindow, float64(v.WindowBytes), n)
		gauge(dChStreams, float64(v.Streams), n)
		counter(dChRepairBytes, float64(v.RepairBytes), n)
		counter(dChNAKsDropped, float64(v.NAKsDropped), n)
		gauge(dChSources, float64(v.NAKSourceCount), n)
		counter(dChFragmented, float64(v.FragmentedMessages), n)
		counter(dChFragments, float64(v.Fragments), n)
		counter(dChHistory, float64(v.HistoryAnswers), n)
		counter(dChHistRefused, float64(v.HistoryRefused), n)
		counter(dChEvicted, float64(v.StreamsEvicted), n)
		for _, src := range v.NAKSources {
			counter(dChSrcNAKs, float64(src.NAKs), n, src.Source)
			counter(dChSrcRepBytes, float64(src.RepairBytes), n, src.Source)
			counter(dChSrcRefused, float64(src.Refused), n, src.Source)
		}
	}
}
