package appliance

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The record of the admin's stream deletes (GET /v1/streams/{name}/delete):
// a delete that outlasts its request goes on (DeleteStream), and its end
// must be known after the stream is gone.

// MaxStreamDeleteRecords is of how many stream names the broker remembers
// the last delete: beyond it the delete that ended first is forgotten. A
// running delete is never forgotten (there is at most one per stream): the
// record holds more only while more deletes than that run at once.
const MaxStreamDeleteRecords = 64

// streamDelete is one delete of a stream: its progress, then its end.
type streamDelete struct {
	name    string
	started time.Time
	deleted atomic.Int64 // messages removed so far
	// Under deleteLog.mu: when it ended (zero while it runs), the error
	// that stopped it ("" when it removed the whole stream), and the
	// order of its end among the broker's deletes (0 while it runs).
	ended time.Time
	err   string
	seq   uint64
}

func (d *streamDelete) sofar() int { return int(d.deleted.Load()) }

// deleteLog is the last delete of each stream name since the broker
// started, of at most MaxStreamDeleteRecords names.
type deleteLog struct {
	mu     sync.Mutex
	byName map[string]*streamDelete
	ends   uint64 // deletes ended
}

// begin records d, running; it replaces the name's earlier delete.
func (l *deleteLog) begin(d *streamDelete) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byName == nil {
		l.byName = map[string]*streamDelete{}
	}
	l.byName[d.name] = d
	l.trimLocked()
}

// end records how d ended: n messages removed, err the error that stopped
// it (nil: the stream is gone).
func (l *deleteLog) end(d *streamDelete, at time.Time, n int, err error) {
	d.deleted.Store(int64(n))
	l.mu.Lock()
	defer l.mu.Unlock()
	d.ended = at
	l.ends++
	d.seq = l.ends
	if err != nil {
		d.err = err.Error()
	}
	l.trimLocked()
}

// trimLocked forgets the deletes that ended first until at most
// MaxStreamDeleteRecords are kept, or only running ones are left to forget.
func (l *deleteLog) trimLocked() {
	for len(l.byName) > MaxStreamDeleteRecords {
		var first *streamDelete
		for _, d := range l.byName {
			if d.seq > 0 && (first == nil || d.seq < first.seq) {
				first = d
			}
		}
		if first == nil {
			return
		}
		delete(l.byName, first.name)
	}
}

// StreamDeleteView is the last delete of a stream name: running, with how
// many messages it removed so far, or how it ended.
type StreamDeleteView struct {
	Stream  string `json:"stream"`
	Running bool   `json:"running"`
	Deleted int    `json:"deleted"` // messages removed (so far, while it runs)
	// Error is what stopped it early ("" when it removed the stream, or
	// while it runs): what it removed stays removed, the rest stays in
	// the stream.
	Error     string     `json:"error"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"` // null while it runs
}

// StreamDelete returns the last delete of stream name since the broker
// started; false when it knows none (none ran, or the record forgot it:
// it keeps MaxStreamDeleteRecords names).
func (b *Broker) StreamDelete(name string) (StreamDeleteView, bool) {
	name = strings.TrimPrefix(name, "/stream/")
	l := &b.streams.deletes
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.byName[name]
	if d == nil {
		return StreamDeleteView{}, false
	}
	v := StreamDeleteView{Stream: d.name, Running: d.seq == 0, Deleted: d.sofar(), Error: d.err, StartedAt: d.started}
	if !v.Running {
		t := d.ended
		v.EndedAt = &t
	}
	return v, true
}
