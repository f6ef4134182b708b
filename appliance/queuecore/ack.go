package queuecore

import "sort"

// Ack acknowledges the delivery of message id to con (attempt 0: whichever
// attempt con holds, the STOMP 1.0/1.1 form). For AckClient it covers every
// earlier delivery of con too. It returns the journal batch that makes it
// durable, for the caller to submit (alone or within a transaction), or
// stale when con holds no such delivery (ignored and counted).
func (c *Core) Ack(con *Consumer, id uint64, attempt int, now int64) (b *Batch, stale bool) {
	taken := c.take(con, id, attempt)
	if taken == nil {
		return nil, true
	}
	var p pend
	for _, d := range taken {
		d.Msg.state = stLeaving
		p.ops = append(p.ops, deleteOp(OpDelete, d.Msg))
		p.ds = append(p.ds, d)
	}
	b = c.emitDirect(p)
	c.end(now)
	return b, false
}

// AckToken names one delivery for AckMany: message ID and attempt (0:
// whichever attempt the consumer holds).
type AckToken struct {
	ID      uint64
	Attempt int
}

// AckMany is a run of Acks by con, in order, made durable by one batch:
// the ACK frames a session read together. Each token is applied as Ack
// applies it (a token that names no delivery con holds is stale: counted
// and skipped); the deliveries they free are dispatched once, after the
// last. b is nil when every token was stale.
func (c *Core) AckMany(con *Consumer, toks []AckToken, now int64) (b *Batch, stale int) {
	var p pend
	individual := con.Mode != AckClient
	for _, t := range toks {
		var taken []*Delivery
		if individual {
			// Taken out of con.inflight once, after the loop: removing
			// each from the front of a prefetch-long list moved the
			// whole list per ACK.
			if d := c.takeLater(con, t.ID, t.Attempt); d != nil {
				taken = []*Delivery{d}
			}
		} else {
			taken = c.take(con, t.ID, t.Attempt)
		}
		if taken == nil {
			stale++
			continue
		}
		for _, d := range taken {
			d.Msg.state = stLeaving
			p.ops = append(p.ops, deleteOp(OpDelete, d.Msg))
			p.ds = append(p.ds, d)
		}
	}
	if individual && len(p.ds) > 0 {
		kept := con.inflight[:0]
		for _, x := range con.inflight {
			if !x.ended {
				kept = append(kept, x)
			} else {
				con.inflightBytes -= x.Msg.Size
			}
		}
		clear(con.inflight[len(kept):])
		con.inflight = kept
	}
	if len(p.ops) > 0 {
		b = c.emitDirect(p)
	}
	c.end(now)
	return b, stale
}

// takeLater is take for one delivery of a consumer that is not AckClient,
// except that it stays in con.inflight (ended) for the caller to remove.
func (c *Core) takeLater(con *Consumer, id uint64, attempt int) *Delivery {
	d := c.flight[id]
	if d == nil || d.C != con || d.abandoned || d.ended || !d.claimed || (attempt != 0 && d.Attempt != attempt) {
		c.StaleAcks++
		return nil
	}
	d.ended = true
	c.dropDeadline(d)
	delete(c.flight, d.Msg.ID)
	return d
}

// Nack returns the deliveries an ACK of the same token would cover: after a
// back-off, or to the dead-letter queue when requeue is false or they
// reached max_deliveries. The message keeps blocking its group during its
// back-off. The batch is the caller's to submit.
func (c *Core) Nack(con *Consumer, id uint64, attempt int, requeue bool, now int64) (b *Batch, stale bool) {
	return c.NackReason(con, id, attempt, requeue, "", now)
}

// NackReason is Nack with the consumer's reason for a NACK that
// dead-letters (requeue false): the dead letter's reason is then
// "nack: " + why rather than "nack".
func (c *Core) NackReason(con *Consumer, id uint64, attempt int, requeue bool, why string, now int64) (b *Batch, stale bool) {
	reason := "nack"
	if why != "" {
		reason += ": " + why
	}
	taken := c.take(con, id, attempt)
	if taken == nil {
		return nil, true
	}
	var p pend
	for _, d := range taken {
		m := d.Msg
		switch {
		case c.cfg.DeadLetter && !requeue:
			m.state = stLeaving
			p.ops = append(p.ops, Op{Kind: OpDeadLetter, Msg: m, Reason: reason})
		case c.cfg.DeadLetter && c.cfg.MaxDeliveries > 0 && m.Deliveries >= c.cfg.MaxDeliveries:
			m.state = stLeaving
			p.ops = append(p.ops, Op{Kind: OpDeadLetter, Msg: m, Reason: "max-deliveries"})
		default:
			m.NotBefore = now + c.backoff(m.Deliveries)
			p.ops = append(p.ops, Op{Kind: OpRelease, Msg: m, NotBefore: m.NotBefore})
			c.place(m, now)
		}
		p.ds = append(p.ds, d)
	}
	b = c.emitDirect(p)
	c.end(now)
	return b, false
}

// emitDirect registers a batch the caller submits itself.
func (c *Core) emitDirect(p pend) *Batch {
	c.nextSeq++
	pp := p
	c.pending[c.nextSeq] = &pp
	return &Batch{Seq: c.nextSeq, Ops: p.ops}
}

// take removes the deliveries an ack of (id, attempt) covers from con; nil
// (counted as a stale ack) when con holds no such delivery.
func (c *Core) take(con *Consumer, id uint64, attempt int) []*Delivery {
	// An unknown or stale token is refused by one map lookup, never a scan
	// of the consumer's deliveries.
	d := c.flight[id]
	if d == nil || d.C != con || d.abandoned || d.ended || !d.claimed || (attempt != 0 && d.Attempt != attempt) {
		c.StaleAcks++
		return nil
	}
	idx := -1
	for i, x := range con.inflight { // acks come mostly in order: found at once
		if x == d {
			idx = i
			break
		}
	}
	if idx < 0 {
		c.StaleAcks++
		return nil
	}
	var taken []*Delivery
	if con.Mode == AckClient {
		kept := con.inflight[:0]
		for i, x := range con.inflight {
			if i <= idx && x.claimed {
				taken = append(taken, x)
			} else {
				kept = append(kept, x)
			}
		}
		clear(con.inflight[len(kept):])
		con.inflight = kept
	} else {
		taken = []*Delivery{d}
		if idx == 0 {
			// In order (the usual case): drop the head without moving
			// the rest; append reallocates when the room runs out.
			con.inflight[0] = nil
			con.inflight = con.inflight[1:]
		} else {
			copy(con.inflight[idx:], con.inflight[idx+1:])
			con.inflight[len(con.inflight)-1] = nil
			con.inflight = con.inflight[:len(con.inflight)-1]
		}
	}
	for _, d := range taken {
		d.ended = true
		c.dropDeadline(d)
		delete(c.flight, d.Msg.ID)
		con.inflightBytes -= d.Msg.Size
	}
	return taken
}

// Written reports auto-ack deliveries whose MESSAGE was written: they are
// deleted.
func (c *Core) Written(ds []*Delivery, now int64) {
	var touched []*Consumer
	for _, d := range ds {
		if d.ended {
			continue
		}
		d.ended = true
		delete(c.flight, d.Msg.ID)
		d.Msg.state = stLeaving
		c.addWork(deleteOp(OpDelete, d.Msg), d)
		touched = append(touched, d.C)
	}
	for _, con := range touched {
		kept := con.inflight[:0]
		for _, d := range con.inflight {
			if !d.ended {
				kept = append(kept, d)
			} else {
				con.inflightBytes -= d.Msg.Size
			}
		}
		clear(con.inflight[len(kept):])
		con.inflight = kept
	}
	c.end(now)
}

// Done reports the outcome of batch seq: committed (err == nil, with the
// journal's result) or failed as a whole.
func (c *Core) Done(seq uint64, res Result, err error, now int64) {
	p := c.pending[seq]
	if p == nil {
		return
	}
	delete(c.pending, seq)
	retryAt := int64(0)
	if err != nil {
		// One fault fails every batch already in the journal's hands:
		// they are one round, not that many consecutive failures. The
		// streak grows only for a batch submitted after the last failure
		// that grew it, so the back-off doubles per retry round, not per
		// batch (ten concurrent deletes failing must not put their
		// retries 2^9 rounds away).
		if seq > c.streakSeq {
			c.failStreak++
			c.streakSeq = c.nextSeq
		}
		c.JournalFailures++
		retryAt = now + c.retryDelay(c.failStreak)
		c.out.Events = append(c.out.Events, Event{Kind: EvJournalFailed, Err: err})
	} else {
		c.failStreak = 0
	}
	for i, op := range p.ops {
		m := op.Msg
		var d *Delivery
		if i < len(p.ds) {
			d = p.ds[i]
		}
		switch op.Kind {
		case OpClaim:
			if d == nil {
				// A row of count 0 (place) or a revert of an abandoned
				// claim. One of count 0 that failed is written again:
				// without it the mark may count a delivery.
				if op.Deliveries == 0 {
					c.pinsOut--
					if err != nil {
						c.repin = append(c.repin, m)
						c.repinAt = retryAt
					}
				}
				continue
			}
			c.claimDone(d, err, retryAt, now)
		case OpDelete, OpDrop, OpDeadLetter, OpMoveOut:
			if err != nil {
				c.leaveFailed(m, retryAt, now)
				continue
			}
			c.left(m)
			switch op.Kind {
			case OpDelete:
				c.Acked++
			case OpDrop:
				c.Expired++
			case OpDeadLetter:
				c.DeadLettered++
				if op.Reason == "expired" {
					c.Expired++
				}
				c.out.Moved = append(c.out.Moved, Moved{Msg: m, NewID: newID(res, i), Reason: op.Reason})
				c.out.Events = append(c.out.Events, Event{Kind: EvDeadLettered, ID: m.ID, Reason: op.Reason})
			case OpMoveOut:
				c.readEpoch++
				c.out.Moved = append(c.out.Moved, Moved{Msg: m, NewID: newID(res, i), Queue: op.Target})
			}
		case OpRelease:
			// Only the back-off's durability; memory already has it.
		case OpPurge:
			c.purgeDone(op, res, err)
		}
	}
	c.end(now)
}

func newID(res Result, i int) uint64 {
	if i < len(res.NewIDs) {
		return res.NewIDs[i]
	}
	return 0
}

func (c *Core) claimDone(d *Delivery, err error, retryAt, now int64) {
	m := d.Msg
	switch {
	case err != nil:
		// Not delivered: the count goes back, and the message waits out a
		// back-off still holding its group, so that nothing of its group
		// overtakes it.
		m.Deliveries = d.Attempt - 1
		d.ended = true
		c.dropDeadline(d)
		delete(c.flight, m.ID)
		if !d.abandoned {
			d.C.inflight = removeDelivery(d.C.inflight, d)
			d.C.inflightBytes -= m.Size
		}
		m.NotBefore = max(m.NotBefore, retryAt)
		c.place(m, now)
	case d.abandoned:
		// The consumer left before the MESSAGE could go out: it was never
		// delivered, so its durable count goes back too.
		m.Deliveries = d.Attempt - 1
		d.ended = true
		c.dropDeadline(d)
		delete(c.flight, m.ID)
		c.claimRow(m, m.Deliveries, nil)
		c.place(m, now)
	default:
		d.claimed = true
		if d.deadline != 0 && (c.nextDeadline == 0 || d.deadline < c.nextDeadline) {
			c.nextDeadline = d.deadline // maybe passed already
		}
		c.out.Deliver = append(c.out.Deliver, d)
	}
}

// left finishes a message whose delete or move committed.
func (c *Core) left(m *Msg) {
	c.count--
	c.bytes -= m.Size
	c.unhold(m.ID)
	if m.ID > c.memTail || c.inHole(m) {
		if c.goneAhead == nil {
			c.goneAhead = map[uint64]string{}
		}
		c.goneAhead[m.ID] = m.Group
	}
	m.state = stNone
	if m.holdsGroup {
		m.holdsGroup = false
		c.ready.release(m.Group)
	}
	c.out.Space = true
}

// leaveFailed puts back a message whose delete or move failed: it is
// still in the journal, so it is delivered again after a back-off (never a
// hot loop against a failing disk).
func (c *Core) leaveFailed(m *Msg, retryAt, now int64) {
	if m.ID > c.memTail {
		// Never in memory (requeue of a message not paged in): the pager
		// finds it again.
		c.unhold(m.ID)
		m.state = stNone
		c.spilled = true
		c.spillSeq++
		c.cacheCut(m.ID)
		if m.holdsGroup {
			m.holdsGroup = false
			c.ready.release(m.Group)
		}
		return
	}
	m.NotBefore = max(m.NotBefore, retryAt)
	c.place(m, now)
}

func removeDelivery(s []*Delivery, d *Delivery) []*Delivery {
	for i, x := range s {
		if x == d {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

func sortDeliveries(ds []*Delivery) {
	sort.Slice(ds, func(i, j int) bool { return ds[i].Msg.ID < ds[j].Msg.ID })
}
