package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
)

// natsConnect opens a connection to the bridge's NATS servers. nats.go
// reconnects on its own once connected; publishes while disconnected fail
// at once (no reconnect buffer), which the core treats as a link failure.
func natsConnect(w *worker, extra ...nats.Option) (*nats.Conn, error) {
	c := w.cfg()
	opts := []nats.Option{
		nats.Name("herald-bridge-" + c.ApplianceID + "-" + c.Name + "-" + w.dir),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(c.ReconnectMin.Duration),
		nats.ReconnectJitter(c.ReconnectMin.Duration, c.ReconnectMin.Duration),
		nats.ReconnectBufSize(-1),
		nats.Timeout(5 * time.Second),
		nats.NoCallbacksAfterClientClose(),
		// A link cut silently (no RST) is noticed after two pings
		// unanswered, then nats.go reconnects.
		nats.PingInterval(max(time.Second, c.AckTimeout.Duration)),
		nats.MaxPingsOutstanding(2),
	}
	opts = append(opts, extra...)
	switch {
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	case c.CredsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if w.tls != nil {
		opts = append(opts, nats.Secure(w.tls.Clone()))
	}
	nc, err := nats.Connect(strings.Join(c.URLs, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", strings.Join(c.URLs, ","), err)
	}
	return nc, nil
}

// ensureStream checks the stream exists, creating it when allowed.
func ensureStream(ctx context.Context, w *worker, js jetstream.JetStream) error {
	c := w.cfg()
	_, err := js.Stream(ctx, c.Stream)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s: %w", c.Stream, err)
	}
	if !c.CreateStream {
		return fmt.Errorf("stream %s does not exist: create it, or set create_stream = true in [[bridge]] %s", c.Stream, c.Name)
	}
	subjects := c.StreamSubjects
	if len(subjects) == 0 {
		for _, m := range c.Map {
			subjects = append(subjects, m.Remote)
		}
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: c.Stream, Subjects: subjects, Replicas: c.Replicas,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("create stream %s on %v: %w", c.Stream, subjects, err)
	}
	return nil
}

// natsSubjectOK reports whether s can be published to: not empty, no
// white space, no empty token (a leading or trailing dot, or two in a
// row), no wildcard token.
func natsSubjectOK(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	for _, t := range strings.Split(s, ".") {
		if t == "" || t == "*" || t == ">" {
			return false
		}
	}
	return true
}

// perMessage reports whether err, from a publish refused before it was
// sent, is the message's own (its subject, its headers, its size) rather
// than the link's.
func perMessage(err error) bool {
	return errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadHeaderMsg)
}

// JetStream's answers to a publish that refuse the message itself: larger
// than the stream's max_msg_size (JSStreamMessageExceedsMaximumErr), or
// headers over 64 KiB (JSStreamHeaderExceedsMaximumErr).
const (
	errCodeMsgTooBig    jetstream.ErrorCode = 10054
	errCodeHeaderTooBig jetstream.ErrorCode = 10097
)

// refusedForGood reports whether err, a publish's failure, refuses the
// message itself, so that sending it again fails again whatever the link
// does: refused before it was sent (perMessage), or by the stream for its
// size. Timeouts, "no responders" (a leader election), a lost connection,
// a refused order condition and any other answer are not: they are
// retried, and the message is never dead-lettered for them.
func refusedForGood(err error) bool {
	if perMessage(err) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == errCodeMsgTooBig || api.ErrorCode == errCodeHeaderTooBig)
}

// skipIn: the headers of a NATS message that do not go into its local
// SEND: dedup ids (the bridge sets its own), those of the STOMP frame, and
// those JetStream acts on.
func skipIn(k string) bool {
	switch k {
	case "Nats-Msg-Id", "dedup-id", "_AMQ_DUPL_ID", "content-length", "destination", "receipt":
		return true
	}
	return natsControl(k)
}

// natsControl reports whether k is a header JetStream acts on when a
// message is published (conditions, batches, rollups, TTLs): one that came
// in with a message must not go out again with it (a relayed message
// would carry its first publish's Nats-Expected-Last-Sequence).
func natsControl(k string) bool {
	for _, p := range []string{"Nats-Expected-", "Nats-Batch-", "Nats-Rollup", "Nats-TTL", "Nats-Incr", "Nats-Schedule"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// JetStream's answers to a publish whose Nats-Expected-Last-Sequence is
// not the stream's last sequence (JSStreamWrongLastSequenceErrF,
// JSStreamWrongLastSequenceConstantErr).
const (
	errCodeWrongLastSeq      jetstream.ErrorCode = 10071
	errCodeWrongLastSeqConst jetstream.ErrorCode = 10164
)

// jsOut publishes to JetStream (direction out).
type jsOut struct {
	w  *worker
	nc *nats.Conn
	js jetstream.JetStream
	// lastSeq is the stream's last sequence, read at each connection: the
	// core's base for predicting sequences (Nats-Expected-Last-Sequence)
	lastSeq uint64
	open    bool // the stream takes more than the maps: others may write (one at a time)
	warned  bool // open, logged once
}

func (j *jsOut) ok() bool { return j.nc != nil && j.nc.IsConnected() }

func (j *jsOut) close() {
	if j.nc != nil {
		j.nc.Close()
		j.nc = nil
	}
}

func (j *jsOut) connect(ctx context.Context) error {
	if j.nc == nil || j.nc.IsClosed() {
		nc, err := natsConnect(j.w)
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(j.w.cfg().AckTimeout.Duration), jetstream.WithPublishAsyncMaxPending(j.w.cfg().MaxInFlight*2))
		if err != nil {
			nc.Close()
			return err
		}
		j.nc, j.js = nc, js
	}
	if err := ensureStream(ctx, j.w, j.js); err != nil {
		return err
	}
	st, err := j.js.Stream(ctx, j.w.cfg().Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", j.w.cfg().Stream, err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", j.w.cfg().Stream, err)
	}
	j.lastSeq = si.State.LastSeq
	j.open = false
	if wider := uncovered(si.Config.Subjects, j.w.maps); len(wider) > 0 {
		// Others may write into the stream: a predicted sequence could
		// be taken by their message, and a condition would then prove
		// nothing. One at a time keeps the order.
		j.open = true
		if j.w.cfg().MaxInFlight > 1 && !j.warned {
			j.warned = true
			j.w.b.log.Warn("the out direction's stream takes subjects beyond its maps, where other publishers may write: sending one message at a time to keep the order (not max_in_flight at once); give the out direction a stream of its own (subjects = its maps' remote subjects) to send with a window",
				"stream", j.w.cfg().Stream, "also", wider, "max_in_flight", j.w.cfg().MaxInFlight)
		}
	}
	return nil
}

// uncovered returns the stream subjects (patterns) not within any map's
// remote pattern: where other publishers may write into the stream.
func uncovered(subjects []string, maps []appliance.BridgeMap) []string {
	var out []string
	for _, s := range subjects {
		covered := false
		for _, m := range maps {
			if subjectCovers(m.Remote, s) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, s)
		}
	}
	return out
}

// subjectCovers reports whether every subject matching pattern s matches
// pattern p (NATS wildcards: * one token, > the rest).
func subjectCovers(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, x := range pt {
		if x == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		switch {
		case st[i] == ">":
			return false
		case x == "*":
		case x != st[i] || st[i] == "*":
			return false
		}
	}
	return len(pt) == len(st)
}

func (j *jsOut) publish(key, gen, afterSeq uint64, h handle) error {
	if j.js == nil {
		return errors.New("not connected to NATS")
	}
	m := nats.NewMsg(h.dest)
	m.Data = h.body
	m.Header = natsHeaders(h.headers)
	// No retries inside nats.go: its retry of a "no responders" answer
	// (a stream leader election) would store this message after the ones
	// sent behind it. A failure fails the link; the core sends it and
	// every later one again, in order.
	//
	// Order with a window: a message sent while the one before it is
	// unconfirmed carries Nats-Expected-Last-Sequence with the sequence
	// that one is predicted to have (the core's; exact while this bridge
	// is the stream's only writer), so the stream stores it only right
	// after it. During a leader change, a publish answered "no
	// responders" by the old leader can no longer be overtaken by the next
	// one reaching the new leader: the next one is refused (wrong last
	// sequence) and sent again in order. The stream checks duplicates
	// (Nats-Msg-Id) before the condition, so a resend of a message already
	// stored is still answered "duplicate".
	//
	// Not Nats-Expected-Last-Msg-Id, which would also hold with other
	// writers: a clustered stream checks it when it applies the message,
	// and nats-server 2.15.2 then stops answering every publish to the
	// stream (found writing TestBridgeOutDetectsAnotherWriter; a single
	// refused publish is enough).
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(h.id), jetstream.WithExpectStream(j.w.cfg().Stream), jetstream.WithRetryAttempts(0)}
	if afterSeq != 0 {
		opts = append(opts, jetstream.WithExpectLastSequence(afterSeq))
	}
	f, err := j.js.PublishMsgAsync(m, opts...)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", h.dest, err)
	}
	w := j.w
	go func() {
		select {
		case a := <-f.Ok():
			w.report(result{key: key, gen: gen, seq: a.Sequence})
		case err := <-f.Err():
			var api *jetstream.APIError
			refused := errors.As(err, &api) && (api.ErrorCode == errCodeWrongLastSeq || api.ErrorCode == errCodeWrongLastSeqConst)
			w.report(result{key: key, gen: gen, refused: refused, forGood: refusedForGood(err), err: fmt.Errorf("publish to %s: %w", h.dest, err)})
		}
	}()
	return nil
}

// check reads, in a goroutine, the stream's messages from..to and answers
// on out whether any is not this appliance's (another writer's): its
// Nats-Msg-Id does not start with APPLIANCE_ID ":". A failed read, a
// missing message or a range over 1000 answer true (the safe side: one
// at a time).
func (j *jsOut) check(ctx context.Context, from, to uint64, out chan<- bool) {
	js, name, prefix := j.js, j.w.cfg().Stream, j.w.cfg().ApplianceID+":"
	timeout := max(5*time.Second, j.w.cfg().AckTimeout.Duration)
	go func() {
		foreign := true
		defer func() {
			select {
			case out <- foreign:
			case <-ctx.Done():
			}
		}()
		if js == nil || to < from || to-from >= 1000 {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		st, err := js.Stream(cctx, name)
		if err != nil {
			return
		}
		for seq := from; seq <= to; seq++ {
			m, err := st.GetMsg(cctx, seq)
			if err != nil || !strings.HasPrefix(m.Header.Get(nats.MsgIdHdr), prefix) {
				return
			}
		}
		foreign = false
	}()
}

// jsIn consumes a durable JetStream consumer (direction in).
//
// Order. Messages in transit when the connection broke stay pending at the
// server, which goes on delivering newer ones to the next pull and
// redelivers the lost ones only after the ack wait: out of order. The
// worker's Sequencer (inorder_core.go) puts them back in stream order: at
// each consume session's start it learns the consumer's ack floor and the
// stream's first sequence; each message brings its consumer (delivery)
// sequence and delivery count, from which it proves a message's
// predecessor; it holds back what arrives before a missing message, and
// asks the stream (probe) which message of the consumer's subjects follows
// the last one passed on.
type jsIn struct {
	w      *worker
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
	cc     jetstream.ConsumeContext
	lost   atomic.Bool // set by nats.go when the connection dropped
	base   uint64      // the connection's reconnect count when pulling started
}

// broken reports whether the connection dropped since pulling started: a
// message delivered after a reconnection belongs to a session the
// sequencer was not told about, so it is not taken (it stays pending and
// comes again in the next session).
func (j *jsIn) broken() bool {
	return j.lost.Load() || (j.nc != nil && j.nc.Stats().Reconnects != j.base)
}

func (j *jsIn) ackWait() time.Duration { return max(time.Second, 3*j.w.cfg().AckTimeout.Duration) }

// pullHeartbeat is the idle heartbeat the bridge asks of its pull requests
// (ack_timeout, within 1 s..5 s); each request expires after four of them.
// A request lives only at the consumer's leader: when the leader is killed
// the bridge's requests die with it, its connection (to another node)
// stays up, and nothing tells it. nats.go pulls again once two heartbeats
// are missed. With its defaults (a 30 s request, a heartbeat every 15 s)
// the bridge brought nothing in for 30 s after a consumer leader was
// killed while messages flowed (TestBridgeInConsumerLeaderKilled).
func (j *jsIn) pullHeartbeat() time.Duration {
	return min(max(time.Second, j.w.cfg().AckTimeout.Duration), 5*time.Second)
}

func (j *jsIn) ok() bool {
	if j.nc == nil || j.cc == nil || j.broken() {
		return false
	}
	select {
	case <-j.cc.Closed():
		return false
	default:
	}
	return true
}

func (j *jsIn) close() {
	if j.cc != nil {
		j.cc.Stop()
		j.cc = nil
	}
	if j.nc != nil {
		j.nc.Close()
		j.nc = nil
	}
}

func (j *jsIn) connect(ctx context.Context) error {
	w := j.w
	c := w.cfg()
	if j.cc != nil && j.broken() {
		j.cc.Stop()
		j.cc = nil
	}
	if j.nc == nil || j.nc.IsClosed() {
		nc, err := natsConnect(w, nats.DisconnectErrHandler(func(*nats.Conn, error) { j.lost.Store(true) }))
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return err
		}
		j.nc, j.js = nc, js
	}
	if err := ensureStream(ctx, w, j.js); err != nil {
		return err
	}
	if j.ok() {
		return nil
	}
	var filters []string
	for _, m := range w.maps {
		filters = append(filters, m.Remote)
	}
	cons, err := j.js.CreateOrUpdateConsumer(ctx, c.Stream, jetstream.ConsumerConfig{
		Durable:        c.Durable,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		MaxAckPending:  c.MaxInFlight,
		AckWait:        j.ackWait(),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("consumer %s on stream %s: %w", c.Durable, c.Stream, err)
	}
	j.cons = cons
	st, err := j.js.Stream(ctx, c.Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", c.Stream, err)
	}
	j.stream = st
	// The session's start for the sequencer, read before the first pull.
	ci, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer %s on stream %s: %w", c.Durable, c.Stream, err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", c.Stream, err)
	}
	w.execSeq(ctx, w.seq.Start(ci.AckFloor.Stream, si.State.FirstSeq, time.Now().UnixNano()))
	in := w.remoteIn
	idPrefix := inIDPrefix(c.Name, c.Stream, si.Created)
	nc := j.nc
	base := nc.Stats().Reconnects
	j.base = base
	j.lost.Store(false)
	hb := j.pullHeartbeat()
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		if nc.Stats().Reconnects != base {
			j.lost.Store(true)
			return // not acknowledged: it comes again in the next session
		}
		md, err := msg.Metadata()
		if err != nil {
			return
		}
		m, rest, ok := matchRemote(w.maps, msg.Subject())
		if !ok {
			msg.Term()
			return
		}
		hdrs := stompHeaders(msg.Headers(), skipIn)
		im := inMsg{
			seq:     md.Sequence.Stream,
			dseq:    md.Sequence.Consumer,
			first:   md.NumDelivered == 1,
			id:      idPrefix + strconv.FormatUint(md.Sequence.Stream, 10),
			dest:    mapName(m.Local, rest),
			headers: hdrs,
			body:    msg.Data(),
			ack:     msg.Ack,
		}
		select {
		case in <- im:
		case <-w.runCtx.Done():
			// Stopped (Close): left unacknowledged, it comes again.
		}
	}, jetstream.PullMaxMessages(c.MaxInFlight), jetstream.PullHeartbeat(hb), jetstream.PullExpiry(4*hb),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				w.heartbeatMissed(hb)
				return
			}
			w.consumeError(err)
		}))
	if err != nil {
		return fmt.Errorf("consume %s on stream %s: %w", c.Durable, c.Stream, err)
	}
	j.cc = cc
	return nil
}

// heldWarnAfter is how long the in-order sequencer may hold messages back,
// waiting for the same missing one, before the bridge says so (at most once
// per heartbeatLogEvery): the probes and redeliveries that end a wait take
// seconds (RegapAfter), so a minute is a stall.
const heldWarnAfter = time.Minute

// logHeldBack logs at Warn a wait of the in-order sequencer longer than
// heldWarnAfter: messages held back, nothing passed on, which neither
// missed heartbeats nor pull errors show (the consumer delivered what it
// may; it waits for acknowledgements of messages held here).
func (w *worker) logHeldBack(now int64) {
	waited, after, held := w.seq.Waiting(now)
	if time.Duration(waited) < heldWarnAfter {
		return
	}
	if n, ok := w.heldLog.note(time.Unix(0, now), heartbeatLogEvery); ok {
		w.b.log.Warn("bridge: the in direction holds messages back, waiting for the stream's message after a sequence that has not come; nothing is passed on meanwhile (herald bridges shows held_back; a restart of the bridge's heraldd reads the stream again)",
			"direction", w.dir, "stream", w.cfg().Stream, "after_sequence", after, "held", held, "waited", time.Duration(waited).Round(time.Second), "suppressed", n-1)
	}
}

// heartbeatLogEvery: a bridge logs missed pull heartbeats at most once
// this often.
const heartbeatLogEvery = 30 * time.Second

// heartbeatMissed counts a pull that missed two idle heartbeats of hb
// (nats.go's ErrNoHeartbeat, which nats.go answers by pulling again), and
// logs it at Warn at most once per heartbeatLogEvery, with the count since
// the last line. Called on nats.go's goroutine. Before, it was logged at
// Debug only: a consumer leader killed, and the bridge bringing nothing
// in until nats.go pulled again, showed nothing to an operator.
func (w *worker) heartbeatMissed(hb time.Duration) {
	w.heartbeatsMissed.Add(1)
	n, ok := w.heartbeatLog.note(time.Now(), heartbeatLogEvery)
	if !ok {
		return
	}
	c := w.cfg()
	w.b.log.Warn("bridge: JetStream pull heartbeats missed: the consumer's leader may be gone (killed, cut off) or the server stalled; pulling again (herald_bridge_heartbeats_missed_total counts them)",
		"direction", w.dir, "stream", c.Stream, "consumer", c.Durable, "missed", n, "heartbeat", hb)
}

// consumeError logs an error nats.go reports while it pulls (other than
// missed heartbeats): the consumer deleted or a bad request (which end the
// pull: the bridge sees it closed and connects again, making the consumer
// again), a leader change, the server's refusals of a pull. At Warn, at
// most once per heartbeatLogEvery, with the count since the last line:
// before, at Debug only, an operator saw a bridge bring nothing in and no
// reason. Called on nats.go's goroutine.
func (w *worker) consumeError(err error) {
	n, ok := w.consumeErrLog.note(time.Now(), heartbeatLogEvery)
	if !ok {
		return
	}
	c := w.cfg()
	w.b.log.Warn("bridge: JetStream pull failed; pulling again, or connecting again and making the consumer anew if it was deleted",
		"direction", w.dir, "stream", c.Stream, "consumer", c.Durable, "err", err, "errors", n)
}

// rateLog lets a log line through at most once per interval and counts
// the events in between; safe for concurrent use.
type rateLog struct {
	mu     sync.Mutex
	last   time.Time
	events int
}

// note counts an event at now. ok: log it now, n being the events since the
// last line logged, this one included; else it is counted for the next.
func (r *rateLog) note(now time.Time, every time.Duration) (n int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events++
	if !r.last.IsZero() && now.Sub(r.last) < every {
		return 0, false
	}
	n, r.last, r.events = r.events, now, 0
	return n, true
}

// inIDPrefix is the start of the dedup id of a message of the stream
// (direction in): js:BRIDGE:STREAM:CREATED:, then the stream sequence;
// CREATED is the stream's creation time (Unix nanoseconds, base 36), which
// its replicas share. The stream's name and sequence alone name a message
// only within one stream's life in one cluster: two bridges bringing into
// one queue from two clusters whose streams share a name (the documented
// HERALD), or a stream deleted and created again, gave another message an
// id the local queue's dedup window still held, and it was refused there
// as a copy, and acknowledged at its source: lost.
func inIDPrefix(bridge, stream string, created time.Time) string {
	var c int64
	if !created.IsZero() {
		c = created.UnixNano()
	}
	return "js:" + bridge + ":" + stream + ":" + strconv.FormatInt(c, 36) + ":"
}

// lag is the consumer's messages not yet delivered plus not yet acked.
func (j *jsIn) lag(ctx context.Context) (int64, bool) {
	if j.cons == nil || j.nc == nil || !j.nc.IsConnected() {
		return 0, false
	}
	ci, err := j.cons.Info(ctx)
	if err != nil {
		return 0, false
	}
	return int64(ci.NumPending) + int64(ci.NumAckPending), true
}

// probeAnswer is the stream's answer to a sequencer's probe.
type probeAnswer struct {
	after, first, streamFirst uint64
	ackFloor                  uint64 // the consumer's, read before the stream
	found                     bool
	err                       error
}

// probe finds, in a goroutine, the consumer's ack floor, then the
// consumer's first message after stream sequence after (the smallest over
// the maps' subjects) and the stream's first sequence; the answer comes on
// out. The ack floor is read first: a message found in the stream after
// it was read, at or below it, was acknowledged, not removed.
func (j *jsIn) probe(ctx context.Context, after uint64, out chan<- probeAnswer) {
	st, cons := j.stream, j.cons
	var filters []string
	for _, m := range j.w.maps {
		filters = append(filters, m.Remote)
	}
	timeout := max(5*time.Second, j.w.cfg().AckTimeout.Duration)
	go func() {
		a := probeAnswer{after: after}
		defer func() {
			select {
			case out <- a:
			case <-ctx.Done():
			}
		}()
		if st == nil || cons == nil {
			a.err = errors.New("no stream")
			return
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ci, err := cons.Info(pctx)
		if err != nil {
			a.err = err
			return
		}
		a.ackFloor = ci.AckFloor.Stream
		si, err := st.Info(pctx)
		if err != nil {
			a.err = err
			return
		}
		a.streamFirst = si.State.FirstSeq
		for _, f := range filters {
			m, err := st.GetMsg(pctx, after+1, jetstream.WithGetMsgSubject(f))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				a.err = err
				return
			}
			if !a.found || m.Sequence < a.first {
				a.first, a.found = m.Sequence, true
			}
		}
	}()
}
