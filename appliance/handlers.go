package appliance

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/herald-mq/herald/appliance/queuecore"
	"github.com/herald-mq/herald/appliance/stomp"
)

// transportHeaders are SEND headers that steer the broker and are not
// stored with the message.
var transportHeaders = map[string]bool{
	"destination": true, "receipt": true, "transaction": true, "content-length": true,
}

// handle processes one client frame; false ends the session.
func (s *session) handle(f *stomp.Frame) bool {
	if s.waitOutput() {
		// The session is ending (an ERROR is on its way, perhaps from
		// outside its reader: an auth reload, an admin close): no frame
		// read after that takes effect.
		return false
	}
	// An auth reload while a CONNECT or SUBSCRIBE is decided may have
	// looked at this session before the login or subscription it grants
	// was in place: then the session is checked against the new policy
	// here (SetAuth stores the policy before it looks at the sessions).
	p0 := s.b.authz.policy.Load()
	if !s.connected.Load() {
		if f.Command != stomp.CmdConnect && f.Command != stomp.CmdStomp {
			s.fail(f, "expected CONNECT", fmt.Sprintf("The first frame must be CONNECT or STOMP, got %s.", f.Command))
			return false
		}
		return s.onConnect(f) && s.samePolicy(p0)
	}
	if (f.Command == stomp.CmdSend || f.Command == stomp.CmdSubscribe) && (!s.authorize(f) || !s.tempRoom(f)) {
		return false
	}
	if tx := f.Get("transaction"); tx != "" {
		switch f.Command {
		case stomp.CmdSend, stomp.CmdAck, stomp.CmdNack:
			return s.buffer(tx, f)
		}
	}
	switch f.Command {
	case stomp.CmdSend:
		return s.onSend(f)
	case stomp.CmdSubscribe:
		return s.onSubscribe(f) && s.samePolicy(p0)
	case stomp.CmdUnsubscribe:
		return s.onUnsubscribe(f)
	case stomp.CmdAck, stomp.CmdNack:
		return s.onAck(f)
	case stomp.CmdBegin:
		return s.onBegin(f)
	case stomp.CmdCommit:
		return s.onCommit(f)
	case stomp.CmdAbort:
		return s.onAbort(f)
	case stomp.CmdDisconnect:
		// The RECEIPT promises that everything sent before is durable.
		s.drainJournal()
		if s.ackLost.Load() && f.Get("receipt") != "" {
			if s.ackUnknown.Load() {
				s.fail(f, notStored("acknowledgement", ErrOutcomeUnknown), "An ACK or NACK sent on this connection without a receipt met a journal I/O error at its commit: whether it was stored is unknown (the broker restarts to find out); its messages may be delivered again.")
				return false
			}
			s.fail(f, "acknowledgement not stored", "An ACK or NACK sent on this connection without a receipt could not be journaled; its messages will be delivered again.")
			return false
		}
		if r := f.Get("receipt"); r != "" {
			s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", r))
		}
		s.log.Debug("client disconnected")
		return false
	case stomp.CmdConnect, stomp.CmdStomp:
		s.fail(f, "already connected", "CONNECT may be sent only once per connection.")
		return false
	}
	s.fail(f, "unknown command "+strconv.Quote(f.Command), "Valid client frames: CONNECT STOMP SEND SUBSCRIBE UNSUBSCRIBE ACK NACK BEGIN COMMIT ABORT DISCONNECT.")
	return false
}

// required returns header key or fails the session naming it.
func (s *session) required(f *stomp.Frame, key string) (string, bool) {
	v, ok := f.Headers.Lookup(key)
	if !ok || v == "" {
		s.fail(f, "missing "+key+" header", fmt.Sprintf("%s frames need a %s header.", f.Command, key))
		return "", false
	}
	return v, true
}

// --- CONNECT ------------------------------------------------------------

func (s *session) onConnect(f *stomp.Frame) bool {
	version := stomp.V10
	if av, ok := f.Headers.Lookup("accept-version"); ok {
		version = ""
		for _, v := range strings.Split(av, ",") {
			v = strings.TrimSpace(v)
			if (v == stomp.V10 || v == stomp.V11 || v == stomp.V12) && v > version {
				version = v
			}
		}
		if version == "" {
			e := stomp.NewFrame(stomp.CmdError, "version", "1.0,1.1,1.2", "message", "unsupported protocol version", "content-type", "text/plain")
			e.Body = []byte("Supported protocol versions are 1.0 1.1 1.2")
			s.push(outItem{f: e, last: true})
			return false
		}
	}
	s.version = version
	s.r.SetVersion(version)
	if !s.authenticate(f) {
		return false
	}
	login := f.Get("login")
	s.info.Store(&connInfo{version: version, login: login})
	if hb := f.Get("heart-beat"); hb != "" && version != stomp.V10 {
		cx, cy, ok := parseHeartBeat(hb)
		if !ok {
			s.fail(f, "invalid heart-beat header", fmt.Sprintf("heart-beat must be two non-negative integers (milliseconds), like 10000,10000; got %q.", hb))
			return false
		}
		sx, sy := s.b.cfg().Stomp.HeartbeatSend.Duration, s.b.cfg().Stomp.HeartbeatReceive.Duration
		// A client's beats further apart than stomp.idle_timeout would let
		// it hold an idle connection past that bound (up to 2^31 ms).
		if idle := s.b.cfg().Stomp.IdleTimeout.Duration; idle > 0 && sy > 0 && cx > max(idle, sy) {
			s.fail(f, "heart-beat interval too long", fmt.Sprintf("The client offers heart-beats every %s, longer than this server keeps an idle connection (stomp.idle_timeout, %s). Offer at most %d in the heart-beat header's first value.", cx, idle, max(idle, sy).Milliseconds()))
			return false
		}
		if sx > 0 && cy > 0 {
			s.hbSend = max(sx, cy)
		}
		if cx > 0 && sy > 0 {
			s.hbRecv = max(cx, sy)
		}
	}
	c := stomp.NewFrame(stomp.CmdConnected,
		"version", version,
		"session", "herald-"+strconv.FormatUint(s.id, 10),
		"server", "herald/"+s.b.version)
	if version != stomp.V10 {
		c.Headers.Add("heart-beat", fmt.Sprintf("%d,%d", s.b.cfg().Stomp.HeartbeatSend.Milliseconds(), s.b.cfg().Stomp.HeartbeatReceive.Milliseconds()))
	}
	s.connected.Store(true)
	s.send(c)
	s.log.Debug("client connected", "version", version, "login", login, "hb_send", s.hbSend, "hb_recv", s.hbRecv)
	return true
}

func parseHeartBeat(v string) (time.Duration, time.Duration, bool) {
	a, b, ok := strings.Cut(v, ",")
	if !ok {
		return 0, 0, false
	}
	x, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 31)
	y, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 31)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return time.Duration(x) * time.Millisecond, time.Duration(y) * time.Millisecond, true
}

// --- SEND ---------------------------------------------------------------

func (s *session) onSend(f *stomp.Frame) bool {
	dest, ok := s.required(f, "destination")
	if !ok {
		return false
	}
	kind, name, err := s.dest(dest, false)
	if err != nil {
		s.fail(f, "invalid destination", err.Error())
		return false
	}
	s.msgsIn.Add(1)
	if kind == destStream {
		return s.onStreamSend(f, name)
	}
	if kind == destKV {
		return s.onKVSend(f, name)
	}
	if kind == destLock {
		s.fail(f, "invalid destination", fmt.Sprintf("A lock is taken with SUBSCRIBE to %s and given back with UNSUBSCRIBE; nothing is sent to it.", dest))
		return false
	}
	if kind == destTopic {
		h := userHeaders(f)
		s.rewriteReplyTo(h)
		if err := s.b.checkSinks(name, h, f.Body); err != nil {
			s.fail(f, "message not sent", err.Error())
			return false
		}
		s.b.publish(name, h, f.Body, s)
		s.receipt(f)
		return true
	}
	if s.b.tempGone(name) {
		s.b.stats.tempDropped.Add(1)
		s.log.Debug("reply to a temporary queue whose connection is gone: dropped", "queue", name)
		s.receipt(f, stomp.Header{Key: "dropped", Value: "temporary queue gone"})
		return true
	}
	m, err := s.newMessage(f, name)
	if err != nil {
		s.fail(f, "invalid header", err.Error())
		return false
	}
	q, err := s.b.openQueue(name)
	if err != nil {
		s.fail(f, "too many queues", err.Error())
		return false
	}
	if !s.admit(f, q, m) {
		return false
	}
	receipt := f.Get("receipt")
	// With no other frame buffered, the client most likely waits for this
	// RECEIPT: the journal may commit the SEND on this goroutine.
	wait := receipt != "" && !s.r.FrameBuffered()
	s.submit(&Batch{Ops: []Op{{Kind: OpEnqueue, Msg: m}}, Wait: wait, Done: func(b *Batch, err error) {
		if err != nil {
			q.enqueueFailed(m)
			s.log.Error(notStored("message", err), "queue", name, "err", err)
			s.fail(f, notStored("message", err), err.Error())
			s.endReads(time.Now())
			return
		}
		op := &b.Ops[0]
		if op.Duplicate {
			q.enqueueFailed(m)
			s.b.stats.dedupHits.Add(1)
			if receipt != "" {
				s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", receipt, "duplicate", "true", "message-id", strconv.FormatUint(op.DupOf, 10)))
			}
			return
		}
		q.committed(m, true)
		if receipt != "" {
			s.receiptDone(b, stomp.NewFrame(stomp.CmdReceipt, "receipt-id", receipt, "message-id", strconv.FormatUint(m.ID, 10)))
		}
	}})
	return true
}

// admit checks the disk floor and queue limits before a SEND is journaled;
// with policy block it waits (the socket is not read meanwhile: TCP
// backpressure) up to block_timeout. False: the session was failed.
func (s *session) admit(f *stomp.Frame, q *queue, m *Message) bool {
	if s.b.checkDisk(false) {
		s.fail(f, "disk full", fmt.Sprintf("Free space in the data directory %s, counting the pages herald.db can reuse, is below %d bytes (journal.min_free_bytes %d plus journal.wal_limit_bytes %d of checkpoint room); queue %s accepts no messages until space is freed (consumers and acks keep working; what they delete is reused). Nothing was stored.", s.b.cfg().DataDir, s.b.diskFloor(), s.b.cfg().Journal.MinFreeBytes, s.b.cfg().Journal.WALLimitBytes, q.name))
		return false
	}
	var deadline <-chan time.Time
	for {
		ok, limit, space := q.reserve(m.Size())
		if ok {
			return true
		}
		if q.cfg().FullPolicy == "reject" {
			// The RECEIPTs of SENDs already being committed go out before
			// this ERROR ends the connection.
			s.drainJournal()
			s.fail(f, "queue full", fmt.Sprintf("Queue %s is full (%s, full_policy reject). Nothing was stored; retry later or raise the limit.", q.name, limit))
			return false
		}
		if deadline == nil {
			q.blocked.Add(1)
			start := time.Now()
			defer func() { q.blockedNs.Add(uint64(time.Since(start))) }()
			deadline = time.After(q.cfg().BlockTimeout.Duration)
		}
		select {
		case <-space:
		case <-deadline:
			s.drainJournal()
			s.fail(f, "queue full", fmt.Sprintf("Queue %s stayed full (%s) for %s (queues.block_timeout). Nothing was stored; retry later.", q.name, limit, q.cfg().BlockTimeout.Duration))
			return false
		case <-s.b.stop:
			s.fail(f, "server shutting down", "")
			return false
		}
	}
}

// userHeaders returns the SEND headers to keep with the message.
// Repeated headers are dropped (the first wins); a frame holds few headers
// (stomp.max_headers bounds them), so a scan beats a map on this hot path.
func userHeaders(f *stomp.Frame) stomp.Headers {
	h := make(stomp.Headers, 0, len(f.Headers))
	for _, kv := range f.Headers {
		if transportHeaders[kv.Key] || brokerOwned(kv.Key) {
			continue
		}
		if _, dup := h.Lookup(kv.Key); dup {
			continue
		}
		h = append(h, kv)
	}
	return h
}

// brokerOwned reports whether key is a MESSAGE header the broker alone
// sets on some destination: per delivery (message-id, subscription, ack,
// redelivered, delivery-count), for dead letters (dlq-*), streams
// (x-stream-*), key-value changes (revision, kv-*), locks (lock-*) and
// topics (dropped-before, history, history-gap, last-value). A producer's
// would pass for the broker's word (a message dead-lettered, a key's
// revision, a gap), so SEND keeps none of them.
func brokerOwned(key string) bool {
	switch key {
	case "message-id", "subscription", "ack", "redelivered", "delivery-count", "revision",
		"dropped-before", hdrHistory, hdrHistoryGap, "last-value":
		return true
	}
	return strings.HasPrefix(key, "dlq-") || strings.HasPrefix(key, "x-stream-") ||
		strings.HasPrefix(key, "kv-") || strings.HasPrefix(key, "lock-")
}

var errHeader = errors.New("appliance: invalid header")

// maxDelayMs bounds delays and ack timeouts (10 years), so that adding one
// to the clock cannot wrap.
const maxDelayMs = 10 * 365 * 24 * int64(time.Hour/time.Millisecond)

// newMessage builds a queue message from a SEND, reading the headers that
// steer it: expires, AMQ_SCHEDULED_DELAY/delay, dedup-id (aliases),
// JMSXGroupID/group-id.
func (s *session) newMessage(f *stomp.Frame, queue string) (*Message, error) {
	m := &Message{Queue: queue, Headers: userHeaders(f), Body: f.Body}
	s.rewriteReplyTo(m.Headers)
	now := s.b.now()
	m.Enqueued = now.UnixMilli() // journaled: the MESSAGE's timestamp, kept across restarts
	if v := f.Get("expires"); v != "" && v != "0" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: expires %q: want milliseconds since the epoch", errHeader, v)
		}
		m.Expires = n
	}
	for _, k := range []string{"AMQ_SCHEDULED_DELAY", "delay"} {
		if v := f.Get(k); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > maxDelayMs {
				return nil, fmt.Errorf("%w: %s %q: want a delay in milliseconds, from 0 to %d (10 years)", errHeader, k, v, int64(maxDelayMs))
			}
			m.NotBefore = now.UnixMilli() + n
			break
		}
	}
	for _, k := range []string{"dedup-id", "_AMQ_DUPL_ID", "Nats-Msg-Id"} {
		if v := f.Get(k); v != "" {
			m.DedupID = v
			break
		}
	}
	for _, k := range []string{"JMSXGroupID", "group-id"} {
		if v := f.Get(k); v != "" {
			m.Group = v
			break
		}
	}
	return m, nil
}

// --- SUBSCRIBE / UNSUBSCRIBE --------------------------------------------

// maxSubscriptionID bounds a subscription id in bytes: a connection keeps
// each of its (at most stomp.max_subscriptions) ids for as long as the
// subscription lasts, and repeats it in every MESSAGE. Clients use short
// ids; STOMP 1.0's default, the destination, is a few hundred bytes at most.
const maxSubscriptionID = 1024

func (s *session) onSubscribe(f *stomp.Frame) bool {
	dest, ok := s.required(f, "destination")
	if !ok {
		return false
	}
	id := f.Get("id")
	if id == "" {
		if s.version != stomp.V10 {
			s.fail(f, "missing id header", "SUBSCRIBE needs an id header in STOMP 1.1 and 1.2.")
			return false
		}
		id = dest
	}
	if len(id) > maxSubscriptionID {
		s.fail(f, "invalid id", fmt.Sprintf("A subscription id is at most %d bytes; got %d. A connection's subscriptions are bounded in number (stomp.max_subscriptions) and their ids in length, so that what they hold is bounded in bytes.", maxSubscriptionID, len(id)))
		return false
	}
	if _, dup := s.subs[id]; dup {
		s.fail(f, "duplicate subscription id", fmt.Sprintf("This connection already has a subscription with id %q.", id))
		return false
	}
	if len(s.subs) >= s.b.cfg().Stomp.MaxSubscriptions {
		s.fail(f, "too many subscriptions", fmt.Sprintf("A connection may hold at most %d subscriptions (stomp.max_subscriptions).", s.b.cfg().Stomp.MaxSubscriptions))
		return false
	}
	kind, name, err := s.dest(dest, true)
	if err != nil {
		s.fail(f, "invalid destination", err.Error())
		return false
	}
	sub := &subscription{s: s, id: id, dest: dest, kind: kind, name: name}
	switch a := f.Get("ack"); a {
	case "", "auto":
		sub.ack = ackAuto
	case "client":
		sub.ack = ackClient
	case "client-individual":
		sub.ack = ackClientIndividual
	default:
		s.fail(f, "invalid ack mode", fmt.Sprintf("ack must be auto, client or client-individual; got %q.", a))
		return false
	}
	if kind == destStream {
		return s.subscribeStream(f, sub)
	}
	if kind == destKV {
		return s.onKVSubscribe(f, sub)
	}
	if kind == destLock {
		return s.onLockSubscribe(f, sub)
	}
	if kind == destTopic {
		if !s.parseHistory(f, sub) {
			return false
		}
		s.subsMu.Lock()
		s.subs[id] = sub
		s.subsMu.Unlock()
		s.nsubs.Add(1)
		s.b.topics.add(s.b, sub)
		s.receipt(f)
		return true
	}
	if sub.q, err = s.b.openQueue(name); err != nil {
		s.fail(f, "too many queues", err.Error())
		return false
	}
	// Its messages not yet acknowledged (auto: not yet written) weigh at
	// most stomp.max_output_bytes, whatever its prefetch: a consumer that
	// does not read (or ack) cannot have the queue page in and hold up to
	// prefetch-count messages of up to max_body_bytes each.
	con := &queuecore.Consumer{Ref: sub, Prefetch: sub.q.cfg().Prefetch, Mode: queuecore.AckMode(sub.ack), MaxBytes: s.b.cfg().Stomp.MaxOutputBytes}
	if sub.ack == ackAuto {
		con.Prefetch = s.b.cfg().Queues.AutoPrefetch
	}
	for _, k := range []string{"prefetch-count", "activemq.prefetchSize"} {
		if v := f.Get(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				s.fail(f, "invalid "+k, fmt.Sprintf("%s must be an integer from 1 to 65535; got %q.", k, v))
				return false
			}
			con.Prefetch = n
			break
		}
	}
	con.AckTimeout = sub.q.cfg().AckTimeout.Milliseconds()
	if v := f.Get("ack-timeout"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxDelayMs {
			s.fail(f, "invalid ack-timeout", fmt.Sprintf("ack-timeout is in milliseconds, from 0 to %d; got %q.", int64(maxDelayMs), v))
			return false
		}
		con.AckTimeout = n
	}
	sub.con = con
	s.subsMu.Lock()
	s.subs[id] = sub
	s.subsMu.Unlock()
	s.nsubs.Add(1)
	// The consumer exists before the RECEIPT says so (an operator's queue
	// delete after the RECEIPT finds it); messages may come before the
	// RECEIPT.
	for !sub.q.addConsumer(sub) {
		// Deleted meanwhile (herald queue delete): subscribe to the name's
		// new queue, or to this one again if the delete failed.
		sub.q = s.b.queueAfterDelete(name)
	}
	s.receipt(f)
	return true
}

func (s *session) onUnsubscribe(f *stomp.Frame) bool {
	id := f.Get("id")
	if id == "" && s.version == stomp.V10 {
		id = f.Get("destination")
	}
	if id == "" {
		s.fail(f, "missing id header", "UNSUBSCRIBE needs the id of the subscription.")
		return false
	}
	_, ok := s.subs[id]
	if !ok && s.version == stomp.V10 && f.Get("id") == "" {
		// STOMP 1.0 unsubscribes by destination: the subscriptions to it
		// made with an id of their own go too.
		var ids []string
		for k, x := range s.subs {
			if x.dest == id {
				ids = append(ids, k)
			}
		}
		if len(ids) > 0 {
			for _, k := range ids {
				s.unsubscribe(k)
			}
			s.receipt(f)
			return true
		}
	}
	if !ok {
		s.fail(f, "no such subscription", fmt.Sprintf("This connection has no subscription with id %q.", id))
		return false
	}
	s.unsubscribe(id)
	s.receipt(f)
	return true
}

// unsubscribe ends subscription id, which exists.
func (s *session) unsubscribe(id string) {
	sub := s.subs[id]
	s.subsMu.Lock()
	delete(s.subs, id)
	s.subsMu.Unlock()
	s.nsubs.Add(-1)
	s.endSubscription(sub)
}

func (s *session) endSubscription(sub *subscription) {
	if sub.kind == destStream {
		sub.st.unsubscribe(sub)
		return
	}
	if sub.kind == destKV {
		s.b.kv.unwatch(sub)
		return
	}
	if sub.kind == destLock {
		s.b.kv.locks.release(s.b, sub)
		return
	}
	if sub.kind == destTopic {
		s.b.topics.remove(sub)
		s.forgetDrops(sub)
		return
	}
	sub.q.removeConsumer(sub)
}

// --- ACK / NACK ---------------------------------------------------------

// resolveAck finds the subscription and token an ACK/NACK names, in the 1.2
// form (id = the MESSAGE's ack header) or the 1.0/1.1 form (message-id and
// subscription). Acks of topic messages are accepted and do nothing.
func (s *session) resolveAck(f *stomp.Frame) (sub *subscription, token string, byID, ok bool) {
	if id := f.Get("id"); id != "" && s.version == stomp.V12 {
		token = id
	} else if mid := f.Get("message-id"); mid != "" {
		token, byID = mid, true
	} else if id != "" {
		token = id
	} else {
		s.fail(f, "missing id header", fmt.Sprintf("%s needs the id header (STOMP 1.2: the MESSAGE's ack header) or message-id (1.0/1.1).", f.Command))
		return nil, "", false, false
	}
	if sid := f.Get("subscription"); sid != "" {
		sub = s.subs[sid]
	} else {
		// 1.2 form: the token names the message; find the subscription
		// holding it.
		mid := token
		if i := strings.IndexByte(token, '.'); i >= 0 && !byID {
			mid = token[:i]
		}
		n, err := strconv.ParseUint(mid, 10, 64)
		if err == nil {
			for _, cand := range s.subs {
				if cand.kind == destQueue && cand.q.holds(cand, n) {
					sub = cand
					break
				}
			}
		}
	}
	return sub, token, byID, true
}

func (s *session) onAck(f *stomp.Frame) bool {
	res, ok := s.ackResult(f)
	if !ok {
		return false
	}
	if res.stale || len(res.ops) == 0 {
		if res.done != nil {
			res.done(nil, nil)
		}
		s.receipt(f)
		return true
	}
	receipt := f.Get("receipt")
	s.submit(&Batch{Ops: res.ops, Done: func(b *Batch, err error) {
		res.done(b.Ops, err)
		if receipt != "" {
			if err != nil {
				s.fail(f, notStored("acknowledgement", err), err.Error())
				return
			}
			s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", receipt))
		} else if err != nil {
			s.ackFailed(err)
		}
	}})
	return true
}

// ackGroupable reports whether f may join a group of ACKs handled together
// (onAckGroup): an ACK outside a transaction, without a receipt.
func (s *session) ackGroupable(f *stomp.Frame) bool {
	if f.Command != stomp.CmdAck || !s.connected.Load() {
		return false
	}
	for _, h := range f.Headers {
		if h.Key == "transaction" || h.Key == "receipt" {
			return false
		}
	}
	return true
}

// maxAckGroup bounds how many ACK frames are handled as one group.
const maxAckGroup = 512

// onAckGroup handles the ACK frames read together (s.acks, in order) as
// onAck handles each, but with one core input per run of ACKs of the same
// queue subscription (its freed prefetch refilled once, with one claim
// batch) and one journal batch for all of them: the deletes of a burst of
// ACKs are one journal batch instead of one per frame. None of them has a
// receipt or a transaction (ackGroupable). False ends the session.
func (s *session) onAckGroup() bool {
	fs := s.acks
	defer func() {
		clear(fs)
		s.acks = fs[:0]
	}()
	if len(fs) == 1 {
		return s.handle(fs[0])
	}
	if s.waitOutput() {
		return false
	}
	var (
		ops   []Op
		parts []ackPart
		sub   *subscription
		toks  []queuecore.AckToken
	)
	add := func(res ackResult) {
		if res.stale || len(res.ops) == 0 {
			if res.done != nil {
				res.done(nil, nil)
			}
			return
		}
		parts = append(parts, ackPart{n: len(res.ops), done: res.done})
		ops = append(ops, res.ops...)
	}
	flushRun := func() {
		if len(toks) > 0 {
			add(sub.q.ackMany(sub, toks))
			toks = toks[:0]
		}
	}
	for _, f := range fs {
		sb, token, byID, ok := s.resolveAck(f)
		if !ok {
			flushRun()
			s.submitAckParts(ops, parts)
			return false
		}
		if sb != nil && sb.kind == destQueue && token != "" && token[0] != 'S' {
			if id, attempt, ok := parseToken(token, byID); ok {
				if sb != sub {
					flushRun()
					sub = sb
				}
				toks = append(toks, queuecore.AckToken{ID: id, Attempt: attempt})
				continue
			}
		}
		flushRun()
		res, ok := s.ackResolved(f, sb, token, byID)
		if !ok {
			s.submitAckParts(ops, parts)
			return false
		}
		add(res)
	}
	flushRun()
	s.submitAckParts(ops, parts)
	return true
}

// ackPart is one ackResult's share of a grouped journal batch.
type ackPart struct {
	n    int
	done func(ops []Op, err error)
}

// submitAckParts submits the journal work of grouped ACKs as one batch;
// each part's done gets its own ops.
func (s *session) submitAckParts(ops []Op, parts []ackPart) {
	if len(parts) == 0 {
		return
	}
	s.submit(&Batch{Ops: ops, Done: func(b *Batch, err error) {
		if err != nil {
			s.ackFailed(err)
		}
		at := 0
		for _, p := range parts {
			var mine []Op
			if b.Ops != nil {
				mine = b.Ops[at : at+p.n]
			}
			at += p.n
			p.done(mine, err)
		}
	}})
}

// ackResult applies an ACK or NACK in memory and returns its journal work.
// Stale or unknown tokens are ignored and counted, never an error: the
// message may have been handed to another consumer after an ack timeout.
func (s *session) ackResult(f *stomp.Frame) (ackResult, bool) {
	sub, token, byID, ok := s.resolveAck(f)
	if !ok {
		return ackResult{}, false
	}
	return s.ackResolved(f, sub, token, byID)
}

// ackResolved is ackResult once resolveAck has found sub and token.
func (s *session) ackResolved(f *stomp.Frame, sub *subscription, token string, byID bool) (ackResult, bool) {
	if res, ok := s.streamAck(token, f.Command == stomp.CmdNack); ok {
		return res, true
	}
	if sub == nil || sub.kind == destTopic || sub.kind == destKV || sub.kind == destLock {
		if sub == nil && !strings.HasPrefix(token, "t") {
			s.b.stats.staleAcks.Add(1)
			s.log.Debug("ack for no held message ignored", "token", token)
			// Count it on the queue that has the message (a former
			// holder acking after an ack timeout), if one of this
			// connection's queues has it.
			if id, _, ok := parseToken(token, byID); ok {
				for _, cand := range s.subs {
					if cand.kind == destQueue && cand.q.noteStale(id) {
						break
					}
				}
			}
		}
		return ackResult{stale: true}, true
	}
	if f.Command == stomp.CmdAck {
		return sub.q.ack(sub, token, byID), true
	}
	return sub.q.nack(sub, token, byID, f.Get("requeue") != "false", nackReason(f.Get("reason"))), true
}

// maxNackReason bounds the reason a NACK gives (nackReason).
const maxNackReason = 200

// nackReason is the reason header of a NACK that dead-letters, as the dead
// letter's dlq-reason gives it after "nack: ": control characters become
// spaces, and it is cut to maxNackReason bytes (at a rune's start). The
// broker's word stays first: a consumer explains its NACK, it does not
// pass it for another reason (max-deliveries, expired).
func nackReason(v string) string {
	v = strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, v))
	if len(v) > maxNackReason {
		n := maxNackReason
		for n > 0 && !utf8.RuneStart(v[n]) {
			n--
		}
		v = v[:n]
	}
	return v
}
