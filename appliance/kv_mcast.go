package appliance

import (
	"strconv"
	"sync"

	"github.com/herald-mq/herald/appliance/kvcore"
	"github.com/herald-mq/herald/appliance/stomp"
)

// KVSink is a TopicSink that also carries key-value buckets (a multicast
// channel's kv patterns): every committed change of a matching bucket, in
// revision order, as a message of wire topic "/kv/BUCKET" (one stream per
// bucket, so the bucket's consecutive revisions arrive in order).
type KVSink interface {
	TopicSink
	MatchesKVBucket(bucket string) bool
}

// Headers of a mirrored change besides those a watcher's MESSAGE has.
const (
	// KVLostRevisionHeader: a marker (no key, no body) saying that the changes of
	// the bucket up to this revision did not all go out: the mirror's
	// queue was full (kv.watch_buffer_bytes) or the channel refused one.
	// A receiver above it has nothing to do; one below re-reads.
	KVLostRevisionHeader = "kv-lost-revision"
)

// kvMirror queues committed changes for the KV sinks and publishes them
// from its own goroutine, so a channel's rate limit never holds the
// store's lock. The queue is bounded by kv.watch_buffer_bytes, as a
// watcher's connection is; what does not fit is not sent, and a marker
// with the highest revision lost follows once the queue has drained, so
// a receiver is never left with a silent gap (it re-reads the bucket over
// STOMP: herald kv watch --group).
type kvMirror struct {
	b    *Broker
	mu   sync.Mutex
	q    []kvMirrored
	size int64
	lost map[string]uint64 // bucket: highest revision not sent
	kick chan struct{}
	once sync.Once

	sent, dropped, markers uint64 // under mu
}

type kvMirrored struct {
	bucket  string
	rev     uint64
	headers stomp.Headers
	body    []byte
	size    int64 // what it weighs against kv.watch_buffer_bytes
}

func mirroredSize(hs stomp.Headers, body []byte) int64 {
	n := int64(len(body) + 64)
	for _, h := range hs {
		n += int64(len(h.Key) + len(h.Value) + 2)
	}
	return n
}

// kvSinks returns the sinks carrying bucket.
func (b *Broker) kvSinks(bucket string) []KVSink {
	var out []KVSink
	for _, s := range b.sinks {
		if ks, ok := s.(KVSink); ok && ks.MatchesKVBucket(bucket) {
			out = append(out, ks)
		}
	}
	return out
}

// mirror queues applied entries for the sinks (under kv.mu, right after
// Apply or ApplyTxn, so the queue is in revision order per bucket). With
// set, es was applied by ApplyTxn: each bucket's run of entries carries
// kv-transaction (its first revision) and its last kv-transaction-last,
// as a watcher of the whole bucket sees them.
func (kv *kvStore) mirror(b *Broker, es []kvcore.Entry, set bool) {
	if len(b.sinks) == 0 {
		return
	}
	for len(es) > 0 {
		n := 1
		for n < len(es) && es[n].Bucket == es[0].Bucket {
			n++
		}
		var txn uint64
		if set {
			txn = es[0].Revision
		}
		if len(b.kvSinks(es[0].Bucket)) > 0 {
			kv.mirrorRun(b, es[:n], txn)
		}
		es = es[n:]
	}
}

func (kv *kvStore) mirrorRun(b *Broker, es []kvcore.Entry, txn uint64) {
	m := &kv.mirrorQ
	m.once.Do(func() {
		m.b = b
		m.kick = make(chan struct{}, 1)
		m.lost = map[string]uint64{}
		b.wg.Add(1)
		go m.loop()
	})
	limit := b.cfg().KV.WatchBufferBytes
	m.mu.Lock()
	for i, e := range es {
		rev := strconv.FormatUint(e.Revision, 10)
		hs := stomp.Headers{
			{Key: "destination", Value: prefixKV + e.Bucket + "." + e.Key},
			{Key: "revision", Value: rev},
			{Key: "kv-operation", Value: e.Op.String()},
		}
		if e.ContentType != "" {
			hs = append(hs, stomp.Header{Key: "content-type", Value: e.ContentType})
		}
		if e.Expires != 0 {
			hs = append(hs, stomp.Header{Key: "kv-expires", Value: strconv.FormatInt(e.Expires, 10)})
		}
		if e.Expired {
			hs = append(hs, stomp.Header{Key: "kv-expired", Value: "true"})
		}
		if txn != 0 {
			hs = append(hs, stomp.Header{Key: "kv-transaction", Value: strconv.FormatUint(txn, 10)})
			if i == len(es)-1 {
				hs = append(hs, stomp.Header{Key: "kv-transaction-last", Value: "true"})
			}
		}
		it := kvMirrored{bucket: e.Bucket, rev: e.Revision, headers: hs, body: e.Value, size: mirroredSize(hs, e.Value)}
		if m.size+it.size > limit && len(m.q) > 0 {
			m.dropped++
			m.lost[e.Bucket] = max(m.lost[e.Bucket], e.Revision)
			continue
		}
		m.size += it.size
		m.q = append(m.q, it)
	}
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *kvMirror) loop() {
	defer m.b.wg.Done()
	for {
		select {
		case <-m.b.stop:
			return
		case <-m.kick:
		}
		for {
			m.mu.Lock()
			if len(m.q) == 0 {
				lost := m.lost
				m.lost = map[string]uint64{}
				m.mu.Unlock()
				for bucket, rev := range lost {
					m.publish(kvMirrored{bucket: bucket, rev: rev,
						headers: stomp.Headers{{Key: KVLostRevisionHeader, Value: strconv.FormatUint(rev, 10)}}}, true)
				}
				break
			}
			it := m.q[0]
			m.q[0] = kvMirrored{}
			m.q = m.q[1:]
			m.size -= it.size
			m.mu.Unlock()
			m.publish(it, false)
		}
	}
}

func (m *kvMirror) publish(it kvMirrored, marker bool) {
	for _, s := range m.b.kvSinks(it.bucket) {
		if err := s.Publish(prefixKV+it.bucket, it.headers, it.body); err != nil {
			m.b.log.Warn("key-value change not sent on multicast; receivers will re-read the bucket",
				"channel", s.Name(), "bucket", it.bucket, "revision", it.rev, "err", err)
			if !marker {
				m.mu.Lock()
				m.lost[it.bucket] = max(m.lost[it.bucket], it.rev)
				m.mu.Unlock()
			}
		}
	}
	m.mu.Lock()
	if marker {
		m.markers++
	} else {
		m.sent++
	}
	m.mu.Unlock()
}

// KVMirrorStats: changes sent to multicast channels, dropped because the
// queue was full, and lost-revision markers sent.
type KVMirrorStats struct{ Sent, Dropped, Markers uint64 }

func (b *Broker) KVMirrorStats() KVMirrorStats {
	m := &b.kv.mirrorQ
	m.mu.Lock()
	defer m.mu.Unlock()
	return KVMirrorStats{Sent: m.sent, Dropped: m.dropped, Markers: m.markers}
}
