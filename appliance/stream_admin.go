package appliance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/herald-mq/herald/appliance/streamcore"
)

// Admin operations and views of streams (herald streams, herald stream
// show|cursors|delete|reset-cursor, the stream metrics).

// Errors of the stream admin operations.
var (
	ErrNoStream       = errors.New("appliance: no such stream")
	ErrStreamBusy     = errors.New("appliance: stream has subscribers")
	ErrNoCursor       = errors.New("appliance: no such cursor")
	ErrCursorActive   = errors.New("appliance: cursor has an active consumer")
	ErrCursorTarget   = errors.New("appliance: invalid cursor target")
	ErrStreamDeleting = errors.New("appliance: stream is being deleted")
)

// StreamRetentionView is a stream's retention in force (0: no such bound).
type StreamRetentionView struct {
	MaxAgeSeconds float64 `json:"max_age_seconds"`
	MaxBytes      int64   `json:"max_bytes"`
	MaxCount      int64   `json:"max_count"`
}

// StreamCursorView is one durable cursor of a stream.
type StreamCursorView struct {
	Name string `json:"name"`
	// Next is the first offset the cursor has not acknowledged.
	Next uint64 `json:"next_offset"`
	// Lag is how many messages the stream holds that the cursor has not
	// acknowledged: next_offset of the stream minus max(cursor, first).
	Lag    uint64 `json:"lag"`
	Active bool   `json:"active"` // a consumer holds it now
}

// StreamView is one stream for the admin API and metrics.
type StreamView struct {
	Name     string `json:"name"`
	Messages int64  `json:"messages"`
	Bytes    int64  `json:"bytes"`
	// FirstOffset is the first offset held; NextOffset the offset of the
	// next append. LastOffset is NextOffset-1, null when the stream is
	// empty.
	FirstOffset uint64     `json:"first_offset"`
	LastOffset  *uint64    `json:"last_offset"`
	NextOffset  uint64     `json:"next_offset"`
	FirstTime   *time.Time `json:"first_time"` // broker time of the first message held
	LastTime    *time.Time `json:"last_time"`
	Subscribers int        `json:"subscribers"`
	Appends     uint64     `json:"appends_total"`      // since the daemon started
	AppendBytes uint64     `json:"append_bytes_total"` // since the daemon started
	Trimmed     uint64     `json:"trimmed_total"`      // removed by retention since the daemon started
	// TailHits counts pages served to caught-up subscribers from the
	// in-memory tail instead of the journal (streams.tail_bytes).
	TailHits  uint64              `json:"tail_hits_total"`
	TailReads uint64              `json:"journal_reads_total"`
	Retention StreamRetentionView `json:"retention"`
	Cursors   []StreamCursorView  `json:"cursors"`
	TailBytes int64               `json:"tail_bytes"`
	TailFirst *uint64             `json:"tail_first_offset,omitempty"`
	Deleting  bool                `json:"deleting,omitempty"`
	// DeleteDeleted is how many messages the running delete removed so
	// far (omitted when none runs; its end: Broker.StreamDelete).
	DeleteDeleted int `json:"delete_deleted,omitempty"`
}

// view returns the stream's figures without times (no journal read).
func (st *stream) view() StreamView {
	c := st.b.cfg().Streams
	pol := c.Retention(st.name)
	v := StreamView{
		Name:        st.name,
		Appends:     st.appends.Load(),
		AppendBytes: st.appendBytes.Load(),
		Trimmed:     st.trimmedN.Load(),
		TailHits:    st.tailHits.Load(),
		TailReads:   st.journalReads.Load(),
		Retention:   StreamRetentionView{MaxAgeSeconds: float64(pol.MaxAge) / 1000, MaxBytes: pol.MaxBytes, MaxCount: pol.MaxCount},
		Cursors:     []StreamCursorView{},
	}
	st.mu.Lock()
	v.Messages, v.Bytes = st.core.Count(), st.core.Bytes()
	v.FirstOffset, v.NextOffset = st.core.First(), st.core.Next()
	v.Subscribers = st.core.Subscribers()
	v.Deleting = st.deleting
	if st.deleting && st.del != nil {
		v.DeleteDeleted = st.del.sofar()
	}
	for _, name := range st.core.CursorNames() {
		pos, _ := st.core.Cursor(name)
		v.Cursors = append(v.Cursors, StreamCursorView{Name: name, Next: pos, Lag: v.NextOffset - min(max(pos, v.FirstOffset), v.NextOffset), Active: st.core.CursorActive(name)})
	}
	v.TailBytes = st.tail.bytes
	if f, ok := st.tail.first(); ok {
		v.TailFirst = &f
	}
	st.mu.Unlock()
	if v.Messages > 0 && v.NextOffset > 0 {
		last := v.NextOffset - 1
		v.LastOffset = &last
	}
	sort.Slice(v.Cursors, func(i, j int) bool { return v.Cursors[i].Name < v.Cursors[j].Name })
	return v
}

// withTimes adds the first and last message times from the journal.
func (b *Broker) withTimes(ctx context.Context, v *StreamView) {
	if v.Messages == 0 || b.streams.j == nil {
		return
	}
	if es, err := b.streams.j.StreamEntries(ctx, v.Name, v.FirstOffset, 1); err == nil && len(es) == 1 {
		t := time.UnixMilli(es[0].TS).UTC()
		v.FirstTime = &t
	}
	if v.LastOffset != nil {
		if es, err := b.streams.j.StreamEntries(ctx, v.Name, *v.LastOffset, 1); err == nil && len(es) == 1 {
			t := time.UnixMilli(es[0].TS).UTC()
			v.LastTime = &t
		}
	}
}

// StreamViews lists the streams by name without reading the journal (for
// metrics: no times).
func (b *Broker) StreamViews() []StreamView {
	sts := b.streamList()
	out := make([]StreamView, 0, len(sts))
	for _, st := range sts {
		out = append(out, st.view())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Streams lists the streams by name with their first and last times.
func (b *Broker) Streams(ctx context.Context) []StreamView {
	out := b.StreamViews()
	for i := range out {
		b.withTimes(ctx, &out[i])
	}
	return out
}

// Stream returns one stream with its times.
func (b *Broker) Stream(ctx context.Context, name string) (StreamView, error) {
	st, err := b.mustStream(name)
	if err != nil {
		return StreamView{}, err
	}
	v := st.view()
	b.withTimes(ctx, &v)
	return v, nil
}

// StreamTrimmedTotal is how many messages retention removed since start.
func (b *Broker) StreamTrimmedTotal() uint64 {
	b.streams.mu.Lock()
	defer b.streams.mu.Unlock()
	return b.streams.trimmed
}

func (b *Broker) mustStream(name string) (*stream, error) {
	name = strings.TrimPrefix(name, "/stream/")
	b.streams.mu.Lock()
	st := b.streams.byName[name]
	b.streams.mu.Unlock()
	if st == nil {
		return nil, fmt.Errorf("%w %q", ErrNoStream, name)
	}
	return st, nil
}

// DeleteStream removes stream name, its messages and cursors, in journal
// steps of at most streams.retention_batch*16 messages (appends to other
// streams interleave). A stream with subscribers is not deleted
// (ErrStreamBusy); while it is being deleted, SENDs and SUBSCRIBEs to the
// name are refused with ErrStreamDeleting. It returns how many messages it
// removed.
//
// The delete runs on its own goroutine (removeStream), which the caller
// waits for: one that outlasts ctx goes on to its end, and DeleteStream
// returns the count removed so far with an error wrapping ErrStillRunning.
// Its progress shows in the stream's view (delete_deleted), and its end in
// the broker's record of deletes (StreamDelete) after the stream is gone.
// The broker's shutdown stops it between steps: what it removed stays
// removed, the rest stays in the stream.
func (b *Broker) DeleteStream(ctx context.Context, name string) (int, error) {
	st, err := b.mustStream(name)
	if err != nil {
		return 0, err
	}
	d := &streamDelete{name: st.name, started: b.now().UTC()}
	st.mu.Lock()
	if st.deleting {
		st.mu.Unlock()
		return 0, fmt.Errorf("%w: %s; wait for the running delete (GET /v1/streams/%s/delete)", ErrStreamDeleting, st.name, st.name)
	}
	if n := st.core.Subscribers(); n > 0 {
		st.mu.Unlock()
		return 0, fmt.Errorf("%w: %s has %d subscribers", ErrStreamBusy, st.name, n)
	}
	st.deleting, st.del = true, d
	st.notifyPubLocked() // the publisher ends
	st.tail.reset()
	st.mu.Unlock()
	b.streams.deletes.begin(d)
	done := make(chan struct{})
	var removed int
	var derr error
	if !b.goBackground(func() {
		defer close(done)
		removed, derr = b.removeStream(st, d)
		if derr != nil {
			b.log.Warn("stream delete stopped; what it removed stays removed, the rest stays in the stream", "stream", st.name, "messages", removed, "err", derr)
		}
		b.streams.deletes.end(d, b.now().UTC(), removed, derr)
	}) {
		// Shutting down: nothing was done (the core is as it was), and the
		// appends in flight may still complete into it.
		st.mu.Lock()
		st.deleting, st.del = false, nil
		st.pub, st.pubChecked = nil, false
		st.mu.Unlock()
		err := fmt.Errorf("delete stream %s: %w (nothing removed)", st.name, errBrokerClosed)
		b.streams.deletes.end(d, b.now().UTC(), 0, err)
		return 0, err
	}
	select {
	case <-done:
		return removed, derr
	case <-ctx.Done():
	}
	select {
	case <-done: // ended meanwhile: its own answer
		return removed, derr
	default:
	}
	n := d.sofar()
	return n, fmt.Errorf("delete stream %s: %w: %w (%d messages removed so far; the delete goes on: GET /v1/streams/%s/delete shows its progress and end)", st.name, ErrStillRunning, ctx.Err(), n, st.name)
}

// removeStream is a delete's work, whatever its caller does: it waits for
// what would make the stream's row again if it committed after the
// delete, removes the messages step by step (d counts them), and forgets
// the stream. A failed step, or the broker's shutdown between steps,
// stops it: the stream is reloaded from the journal with what is left,
// and clients may use it again.
func (b *Broker) removeStream(st *stream, d *streamDelete) (int, error) {
	st.inflight.Wait() // appends submitted before: their completions ran
	// And the cursor moves (ACKs of consumers gone): one committed after
	// the delete would make the stream's row again, with its cursor.
	if err := st.waitCursorOps(b.ctx, ""); err != nil {
		b.reloadStream(st)
		return 0, fmt.Errorf("delete stream %s: %w (nothing removed; retry)", st.name, err)
	}
	step := b.cfg().Streams.RetentionBatch * 16
	removed := 0
	for {
		// Between steps only: a step is waited for, so that the core is
		// never reloaded while a step it does not know of may still
		// commit.
		select {
		case <-b.stop:
			b.reloadStream(st)
			return removed, fmt.Errorf("delete stream %s: %w: the delete stops (%d messages removed; the rest stays in the stream: delete it again after the restart)", st.name, errBrokerClosed, removed)
		default:
		}
		op := Op{Kind: OpStreamDelete, Stream: &StreamOp{Name: st.name, Limit: step}}
		bt, err := b.submitWait(b.ctx, &Batch{Ops: []Op{op}})
		if err != nil {
			// The stream stays, possibly shorter: reload what is left.
			b.reloadStream(st)
			return removed, fmt.Errorf("delete stream %s: %w (%d messages removed; the rest stays in the stream: retry)", st.name, err, removed)
		}
		removed += bt.Ops[0].Affected
		d.deleted.Store(int64(removed))
		if bt.Ops[0].Affected < step {
			break
		}
	}
	b.streams.mu.Lock()
	if b.streams.byName[st.name] == st {
		delete(b.streams.byName, st.name)
	}
	b.streams.mu.Unlock()
	b.log.Info("stream deleted", "stream", st.name, "messages", removed)
	return removed, nil
}

// reloadStream resets a stream's core from the journal after a failed
// delete, and lets clients use it again.
func (b *Broker) reloadStream(st *stream) {
	states, err := b.streams.j.Streams(b.ctx)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.deleting, st.del = false, nil
	st.pub, st.pubChecked = nil, false // its publisher ended: the next append starts one
	if err != nil {
		return
	}
	for _, s := range states {
		if s.Name == st.name {
			c := b.cfg().Streams
			st.core = streamcore.New(streamcore.Config{PageMessages: c.PageMessages, PageBytes: c.PageBytes}, s.First, s.Next, s.Count, s.Bytes, s.Cursors)
		}
	}
}

// submitWait submits batch bt and waits for its commit.
func (b *Broker) submitWait(ctx context.Context, bt *Batch) (*Batch, error) {
	done := make(chan error, 1)
	bt.Done = func(_ *Batch, err error) { done <- err }
	b.j.Submit(bt)
	select {
	case err := <-done:
		return bt, err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the journal: %w (the operation may still complete)", ctx.Err())
	}
}

// ParseCursorTarget reads reset-cursor's target: "first", "last" (the
// last message held: the consumer reads it again), "next" (skip everything
// held) or an offset.
func ParseCursorTarget(v string, first, next uint64) (uint64, error) {
	switch v {
	case "first":
		return first, nil
	case "next", "end":
		return next, nil
	case "last":
		if next > first {
			return next - 1, nil
		}
		return next, nil
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(v, "offset="), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: want first, last, next or an offset", ErrCursorTarget, v)
	}
	return n, nil
}

// ResetCursor sets durable cursor cursor of stream name to target
// (ParseCursorTarget: back or forth); its next consumer resumes there. A
// cursor with an active consumer is not reset (ErrCursorActive). It
// returns the cursor's old and new positions.
func (b *Broker) ResetCursor(ctx context.Context, name, cursor, target string) (old, pos uint64, err error) {
	st, err := b.mustStream(name)
	if err != nil {
		return 0, 0, err
	}
	st.mu.Lock()
	old, ok := st.core.Cursor(cursor)
	active := st.core.CursorActive(cursor)
	first, next := st.core.First(), st.core.Next()
	st.mu.Unlock()
	if !ok {
		return 0, 0, fmt.Errorf("%w %q of stream %s; list them with: herald stream cursors %s", ErrNoCursor, cursor, st.name, st.name)
	}
	if active {
		return 0, 0, fmt.Errorf("%w: %s of stream %s; stop its consumer first (herald connections)", ErrCursorActive, cursor, st.name)
	}
	pos, err = ParseCursorTarget(target, first, next)
	if err != nil {
		return 0, 0, err
	}
	if pos > next {
		return 0, 0, fmt.Errorf("%w: offset %d is past the stream's next offset %d", ErrCursorTarget, pos, next)
	}
	// Hold the cursor while the move commits: a SUBSCRIBE with its name
	// waits for the commit's outcome by being refused (ErrCursorInUse).
	st.mu.Lock()
	if !st.core.HoldCursor(cursor) {
		st.mu.Unlock()
		return 0, 0, fmt.Errorf("%w: %s of stream %s; stop its consumer first (herald connections)", ErrCursorActive, cursor, st.name)
	}
	st.mu.Unlock()
	// A move of this cursor still on its way to the journal (the last ACK
	// of a consumer gone) would commit after the reset and undo it.
	if err := st.waitCursorOps(ctx, cursor); err != nil {
		st.mu.Lock()
		st.core.ReleaseCursor(cursor)
		st.mu.Unlock()
		return 0, 0, fmt.Errorf("reset cursor %s of stream %s: %w; retry", cursor, st.name, err)
	}
	st.mu.Lock()
	old, _ = st.core.Cursor(cursor) // where those moves left it
	st.mu.Unlock()
	op := Op{Kind: OpCursorSet, Stream: &StreamOp{Name: st.name, Cursor: cursor, Offset: pos}}
	// Waited for whatever the request's context does: the core learns
	// what the journal did.
	_, err = b.submitWait(b.ctx, &Batch{Ops: []Op{op}})
	st.mu.Lock()
	if err == nil {
		st.core.SetCursor(cursor, pos)
	}
	st.core.ReleaseCursor(cursor)
	st.mu.Unlock()
	if err != nil {
		return 0, 0, fmt.Errorf("reset cursor %s of stream %s: %w", cursor, st.name, err)
	}
	b.log.Info("stream cursor reset", "stream", st.name, "cursor", cursor, "from", old, "to", pos)
	return old, pos, nil
}
