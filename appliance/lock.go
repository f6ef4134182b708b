package appliance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/herald-mq/herald/appliance/lockcore"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Advisory locks: /lock/NAME, the shell around appliance/lockcore.
//
// SUBSCRIBE /lock/NAME asks for the lock (the write permission on
// /lock/NAME). Requests are served in arrival order. The holder gets one
// MESSAGE: lock-token:N (this lock's fencing token, one above the last
// one given, journaled before the MESSAGE is sent so that it never goes
// back, also across restarts), lock-name:NAME, no body. UNSUBSCRIBE gives
// the lock back (or leaves the queue); so does the end of the connection,
// heart-beat timeout included: the connection is the lease. A writer
// proves it still holds the lock with if-fence:NAME:N on a /kv/ SEND: the
// write is refused (ERROR "fenced") unless N is the token of the lock's
// current holder.
//
// One lock (lockStore.mu) serialises the table; a grant waits for its
// token's journal commit under it. A grant whose token the journal could
// not store is given back and its connection ended (an ERROR naming the
// journal error); the lock passes to the next waiter.

type lockStore struct {
	mu     sync.Mutex
	core   *lockcore.Core // nil: the journal keeps no lock tokens
	subs   map[lockcore.Owner]*subscription
	owners map[*subscription]lockcore.Owner
	next   lockcore.Owner

	grants, fenced atomic.Uint64
}

// fence is an if-fence header: the write needs lock name held with token.
type fence struct {
	name  string
	token uint64
}

// openLocks loads the lock tokens from the journal (openKV).
func (b *Broker) openLocks(ctx context.Context) error {
	ls := &b.kv.locks
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.subs, ls.owners = map[lockcore.Owner]*subscription{}, map[*subscription]lockcore.Owner{}
	j, ok := b.j.(LockJournal)
	if !ok {
		return nil
	}
	c := lockcore.New()
	if err := j.LockLoad(ctx, func(t LockToken) error {
		c.Recover(t.Name, t.Token)
		return nil
	}); err != nil {
		return fmt.Errorf("recover lock tokens: %w", err)
	}
	ls.core = c
	return nil
}

const errLocksUnavailable = "This heraldd's journal keeps no lock tokens: /lock/ is unavailable."

func (s *session) onLockSubscribe(f *stomp.Frame, sub *subscription) bool {
	ls := &s.b.kv.locks
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.core == nil {
		s.fail(f, "locks unavailable", errLocksUnavailable)
		return false
	}
	cfg := s.b.cfg().KV
	ls.next++
	o := ls.next
	g, err := ls.core.Acquire(sub.name, o, lockcore.Limits{MaxNames: cfg.MaxLockNames, MaxWaiters: cfg.MaxLockWaiters})
	switch {
	case errors.Is(err, lockcore.ErrTooManyNames):
		s.fail(f, "too many locks", fmt.Sprintf("%d lock names are known already (kv.max_lock_names; each keeps its last token for good). Use an existing name or raise the limit.", cfg.MaxLockNames))
		return false
	case errors.Is(err, lockcore.ErrTooManyWaiters):
		s.fail(f, "too many waiters", fmt.Sprintf("%d requests wait for %s already (kv.max_lock_waiters). Try again later or raise the limit.", cfg.MaxLockWaiters, sub.dest))
		return false
	case err != nil: // a fresh owner is never a duplicate
		s.fail(f, "lock not taken", err.Error())
		return false
	}
	ls.subs[o], ls.owners[sub] = sub, o
	s.subsMu.Lock()
	s.subs[sub.id] = sub
	s.subsMu.Unlock()
	s.nsubs.Add(1)
	s.receipt(f, stomp.Header{Key: "lock-waiters", Value: strconv.Itoa(len(ls.core.Waiters(sub.name)))})
	ls.grant(s.b, g)
	return true
}

// grant journals a grant's token and tells its owner; a grant that cannot
// be journaled passes on (under ls.mu).
func (ls *lockStore) grant(b *Broker, g *lockcore.Grant) {
	for g != nil {
		sub := ls.subs[g.Owner]
		done := make(chan error, 1)
		b.j.Submit(&Batch{Ops: []Op{{Kind: OpLock, Lock: &LockToken{Name: g.Name, Token: g.Token}}}, Done: func(_ *Batch, err error) { done <- err }})
		err := <-done
		b.journalResult(err)
		if err == nil {
			ls.grants.Add(1)
			tok := strconv.FormatUint(g.Token, 10)
			sub.s.push(outItem{f: stomp.NewFrame(stomp.CmdMessage,
				"subscription", sub.id,
				"message-id", "lock."+g.Name+"."+tok,
				"destination", sub.dest,
				"lock-name", g.Name,
				"lock-token", tok)})
			return
		}
		b.log.Error("lock token not stored; the request is refused", "lock", g.Name, "token", g.Token, "err", err)
		delete(ls.subs, g.Owner)
		delete(ls.owners, sub)
		next := ls.core.Release(g.Name, g.Owner)
		stored := "could not be stored in the journal"
		if errors.Is(err, ErrOutcomeUnknown) {
			stored = "may or may not be stored in the journal (its commit met an I/O error)"
		}
		sub.s.drop("lock not granted", fmt.Sprintf("The token of %s %s (%v); the request is given up and this connection ends. Check the data directory's disk, then ask again.", sub.dest, stored, err))
		g = next
	}
}

// release gives back sub's lock or its place in the queue (UNSUBSCRIBE,
// connection end).
func (ls *lockStore) release(b *Broker, sub *subscription) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	o, ok := ls.owners[sub]
	if !ok {
		return
	}
	delete(ls.owners, sub)
	delete(ls.subs, o)
	ls.grant(b, ls.core.Release(sub.name, o))
}

// checkFence takes the lock table and checks an if-fence header: the write
// may go on only while fc's token is the lock's holder's. On success the
// table stays locked until the returned func is called (after the write
// committed), so no new holder appears in between.
func (s *session) checkFence(f *stomp.Frame, fc *fence, dest string) (func(), bool) {
	ls := &s.b.kv.locks
	ls.mu.Lock()
	if ls.core == nil {
		ls.mu.Unlock()
		s.fail(f, "locks unavailable", errLocksUnavailable)
		return nil, false
	}
	if err := ls.core.Fence(fc.name, fc.token); err != nil {
		ls.mu.Unlock()
		ls.fenced.Add(1)
		s.drainJournal()
		s.fail(f, "fenced", fmt.Sprintf("%v (if-fence); nothing was written to %s. The holder of an older token must stop and take the lock again.", err, dest))
		return nil, false
	}
	return ls.mu.Unlock, true
}

// LockStats are the advisory locks' counts.
type LockStats struct {
	Names          int
	Grants, Fenced uint64
}

// LockStats returns the advisory locks' counts.
func (b *Broker) LockStats() LockStats {
	ls := &b.kv.locks
	ls.mu.Lock()
	defer ls.mu.Unlock()
	st := LockStats{Grants: ls.grants.Load(), Fenced: ls.fenced.Load()}
	if ls.core != nil {
		st.Names = ls.core.Names()
	}
	return st
}
