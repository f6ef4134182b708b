package appliance

import (
	"fmt"
	"github.com/herald-mq/herald/appliance/auth"
	"strconv"

	"github.com/herald-mq/herald/appliance/stomp"
)

// txWeight is what a buffered frame weighs against
// stomp.max_transaction_bytes: its encoded size plus the memory its parsed
// headers take, so that many tiny headers count as much as they cost.
func txWeight(f *stomp.Frame) int64 {
	return frameSize(f) + 64 + 32*int64(len(f.Headers))
}

// transaction buffers the SEND, ACK and NACK frames of BEGIN..COMMIT. At
// COMMIT they are applied in one journal batch: all or nothing. ABORT and
// disconnect discard them.
type transaction struct {
	frames []*stomp.Frame
	bytes  int64  // txWeight of frames
	kv     string // the bucket of its /kv/ SENDs (kv_txn.go); then it holds only those
	// policy is the auth policy in force at BEGIN: if another is at
	// COMMIT, the SENDs (authorized as they came) are authorized again.
	policy *auth.Policy
}

func (s *session) onBegin(f *stomp.Frame) bool {
	id, ok := s.required(f, "transaction")
	if !ok {
		return false
	}
	if _, dup := s.txs[id]; dup {
		s.fail(f, "transaction already open", fmt.Sprintf("Transaction %q is already open on this connection.", id))
		return false
	}
	if limit := s.b.cfg().Stomp.MaxTransactions; len(s.txs) >= limit {
		s.fail(f, "too many transactions", fmt.Sprintf("A connection may hold at most %d open transactions (stomp.max_transactions); COMMIT or ABORT one first, or raise stomp.max_transactions.", limit))
		return false
	}
	s.txs[id] = &transaction{policy: s.b.authz.policy.Load()}
	s.receipt(f)
	return true
}

func (s *session) onAbort(f *stomp.Frame) bool {
	id, ok := s.required(f, "transaction")
	if !ok {
		return false
	}
	if _, open := s.txs[id]; !open {
		s.fail(f, "no such transaction", fmt.Sprintf("Transaction %q is not open on this connection.", id))
		return false
	}
	s.txBytes -= s.txs[id].bytes
	s.b.mem.release(s.txs[id].bytes)
	delete(s.txs, id)
	s.receipt(f)
	return true
}

func (s *session) buffer(id string, f *stomp.Frame) bool {
	tx, ok := s.txs[id]
	if !ok {
		s.fail(f, "no such transaction", fmt.Sprintf("Transaction %q is not open on this connection: send BEGIN first.", id))
		return false
	}
	w := txWeight(f)
	if len(tx.frames) >= s.b.cfg().Stomp.MaxTxFrames || s.txBytes+w > s.b.cfg().Stomp.MaxTxBytes {
		s.fail(f, "transaction too large", fmt.Sprintf("Transaction %q exceeds %d frames (stomp.max_transaction_frames), or this connection's open transactions exceed %d bytes (stomp.max_transaction_bytes, headers included); it is discarded. Commit smaller transactions.", id, s.b.cfg().Stomp.MaxTxFrames, s.b.cfg().Stomp.MaxTxBytes))
		return false
	}
	if f.Command == stomp.CmdSend {
		dest, ok := s.required(f, "destination")
		if !ok {
			return false
		}
		kind, name, err := s.dest(dest, false)
		if err != nil {
			s.fail(f, "invalid destination", err.Error())
			return false
		}
		if !s.bufferKV(f, tx, kind, name) {
			return false
		}
	} else if tx.kv != "" {
		// ACK or NACK: key-value writes go in a transaction of their own.
		s.fail(f, "mixed transaction", fmt.Sprintf("This transaction holds key-value writes (/kv/%s.…); it may hold only those. Send %s outside it or in another transaction.", tx.kv, f.Command))
		return false
	}
	tx.frames = append(tx.frames, f)
	tx.bytes += w
	s.txBytes += w
	s.b.mem.charge(w)
	s.receipt(f)
	return true
}

func (s *session) onCommit(f *stomp.Frame) bool {
	id, ok := s.required(f, "transaction")
	if !ok {
		return false
	}
	tx, open := s.txs[id]
	if !open {
		s.fail(f, "no such transaction", fmt.Sprintf("Transaction %q is not open on this connection.", id))
		return false
	}
	s.txBytes -= tx.bytes
	s.b.mem.release(tx.bytes)
	delete(s.txs, id)
	if s.b.authz.policy.Load() != tx.policy {
		// An auth reload since BEGIN: what it revoked is not written.
		for _, bf := range tx.frames {
			if bf.Command == stomp.CmdSend && !s.authorize(bf) {
				return false
			}
		}
	}
	if tx.kv != "" {
		return s.commitKV(f, id, tx)
	}

	type topicMsg struct {
		name    string
		headers stomp.Headers
		body    []byte
	}
	type enq struct {
		q   *queue
		m   *Message
		idx int
	}
	type ackPart struct {
		res      ackResult
		off, cnt int
	}
	var (
		ops    []Op
		topics []topicMsg
		enqs   []enq
		acks   []ackPart
		apps   []streamApp // stream appends (stream.go)
	)
	undo := func() {
		for _, a := range apps {
			a.st.inflight.Done()
		}
		for _, e := range enqs {
			e.q.enqueueFailed(e.m)
		}
		for _, a := range acks {
			if a.res.done != nil {
				a.res.done(nil, errTxAborted)
			}
		}
	}
	for _, bf := range tx.frames {
		switch bf.Command {
		case stomp.CmdSend:
			kind, name, _ := s.dest(bf.Get("destination"), false)
			if kind == destStream {
				st, err := s.b.openStream(name)
				if err == nil {
					err = st.beginAppend()
				}
				if err != nil {
					undo()
					s.fail(f, txNotCommitted(err), err.Error())
					return false
				}
				if s.b.checkDisk(false) {
					st.inflight.Done()
					undo()
					s.fail(f, "disk full", fmt.Sprintf("Free space in the data directory %s is below %d bytes (journal.min_free_bytes plus journal.wal_limit_bytes); stream %s accepts no messages until space is freed. The transaction was not committed.", s.b.cfg().DataDir, s.b.diskFloor(), name))
					return false
				}
				m := s.streamMessage(bf, name)
				if err := s.b.checkStreamSinks(name, m.Headers, m.Body); err != nil {
					st.inflight.Done()
					undo()
					s.fail(f, txNotCommitted(err), err.Error())
					return false
				}
				apps = append(apps, streamApp{st, m, len(ops)})
				ops = append(ops, st.appendOp(m))
				continue
			}
			if kind == destTopic {
				h := userHeaders(bf)
				s.rewriteReplyTo(h)
				if err := s.b.checkSinks(name, h, bf.Body); err != nil {
					undo()
					s.fail(f, txNotCommitted(err), err.Error())
					return false
				}
				topics = append(topics, topicMsg{name, h, bf.Body})
				continue
			}
			if s.b.tempGone(name) {
				s.b.stats.tempDropped.Add(1)
				continue
			}
			m, err := s.newMessage(bf, name)
			if err != nil {
				undo()
				s.fail(f, "invalid header", err.Error())
				return false
			}
			q, err := s.b.openQueue(name)
			if err != nil {
				undo()
				s.fail(f, "too many queues", err.Error())
				return false
			}
			if !s.admit(f, q, m) {
				undo()
				return false
			}
			enqs = append(enqs, enq{q, m, len(ops)})
			ops = append(ops, Op{Kind: OpEnqueue, Msg: m})
		case stomp.CmdAck, stomp.CmdNack:
			res, ok := s.ackResult(bf)
			if !ok {
				undo()
				return false
			}
			acks = append(acks, ackPart{res, len(ops), len(res.ops)})
			ops = append(ops, res.ops...)
		}
	}
	receipt := f.Get("receipt")
	// Completions only signal: topic messages of the transaction are
	// published here, on the reader, once the journal committed (a
	// multicast channel's rate limit may block; the journal's completion
	// goroutine must not).
	var committed chan error
	if len(topics) > 0 {
		committed = make(chan error, 1)
	}
	s.submit(&Batch{Ops: append(ops, Op{Kind: OpBarrier}), Done: func(b *Batch, err error) {
		// Enqueues and acks are reported in the order of their ops, which
		// is the order the journal gave their rows IDs: a NACK that
		// dead-letters a message before a SEND to that dead-letter queue
		// made the lower ID, and queue cores take commits in ID order
		// (queuecore's duty 3; reported the other way round, the moved
		// message was taken for one already paged in, and never delivered
		// until a restart).
		ei, ai := 0, 0
		for ei < len(enqs) || ai < len(acks) {
			if ai < len(acks) && (ei == len(enqs) || acks[ai].off < enqs[ei].idx) {
				a := acks[ai]
				ai++
				if a.res.done != nil {
					a.res.done(b.Ops[a.off:a.off+a.cnt], err)
				}
				continue
			}
			e := enqs[ei]
			ei++
			op := &b.Ops[e.idx]
			switch {
			case err != nil:
				e.q.enqueueFailed(e.m)
			case op.Duplicate:
				e.q.enqueueFailed(e.m)
				s.b.stats.dedupHits.Add(1)
			default:
				e.q.committed(e.m, true)
			}
		}
		for _, a := range apps {
			if op := &b.Ops[a.idx]; err == nil && !op.Duplicate {
				a.st.appended(a.m)
			} else if err == nil {
				s.b.stats.dedupHits.Add(1)
			}
			a.st.inflight.Done()
		}
		if err != nil {
			s.log.Error("transaction not stored", "transaction", id, "err", err)
			s.fail(f, txNotCommitted(err), err.Error())
		}
		if committed != nil {
			committed <- err
			return
		}
		if err == nil && receipt != "" {
			s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", receipt, "transaction", id, "frames", strconv.Itoa(len(tx.frames))))
		}
	}})
	if committed == nil {
		return true
	}
	if err := <-committed; err != nil {
		return false
	}
	for _, t := range topics {
		s.b.publish(t.name, t.headers, t.body, s)
	}
	if receipt != "" {
		s.send(stomp.NewFrame(stomp.CmdReceipt, "receipt-id", receipt, "transaction", id, "frames", strconv.Itoa(len(tx.frames))))
	}
	return true
}
