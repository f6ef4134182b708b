package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herald-mq/herald/admin"
)

// purgePoll is how often herald queue purge reads the queue's view while
// the purge runs (its progress, and its end once the daemon stopped
// waiting for it).
var purgePoll = 250 * time.Millisecond

// errPurgeGoesOn: the purge outlasted --timeout and goes on in heraldd.
var errPurgeGoesOn = errors.New("the purge goes on")

// purgeQueue purges queue name and follows the purge to its end. A purge
// longer than the daemon's operation timeout is answered 202 (it goes on):
// purgeQueue then watches the queue's view until the purge ends and
// answers with its last_purge. progress, if not nil, is called with the
// count deleted so far as it grows. If ctx ends first the answer holds
// the count seen so far, with an error wrapping errPurgeGoesOn.
func purgeQueue(ctx context.Context, c *admin.Client, name string, progress func(deleted int)) (*admin.QueueOp, error) {
	start := time.Now()
	type answer struct {
		r   *admin.QueueOp
		err error
	}
	ans := make(chan answer, 1)
	go func() {
		r, err := c.Purge(ctx, name)
		ans <- answer{r, err}
	}()
	tick := time.NewTicker(purgePoll)
	defer tick.Stop()
	sofar := 0
	// look reads the queue's view: whether the purge still runs.
	look := func(ctx context.Context) (*admin.QueueOp, bool, error) {
		q, err := c.Queue(ctx, name)
		if err != nil {
			return nil, false, err
		}
		if q.Purging {
			if q.PurgeDeleted > sofar && progress != nil {
				progress(q.PurgeDeleted)
			}
			sofar = max(sofar, q.PurgeDeleted)
			return nil, true, nil
		}
		lp := q.LastPurge
		if lp == nil || lp.EndedAt.Before(start.Add(-time.Second)) {
			return nil, false, fmt.Errorf("the purge of %s ended, but heraldd no longer says how (did it restart?): its log has the end of every purge (\"queue purged\")", name)
		}
		n := lp.Deleted
		r := &admin.QueueOp{Queue: name, Purged: &n}
		if lp.Error != "" {
			return r, false, fmt.Errorf("the purge of %s stopped: %s (%d messages were deleted; the rest stays: purge again)", name, lp.Error, n)
		}
		return r, false, nil
	}
	goesOn := func() (*admin.QueueOp, error) {
		// A last look with a moment of its own, for the count so far.
		lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if r, running, err := look(lctx); err == nil && !running {
			return r, nil // it ended meanwhile
		}
		n := sofar
		return &admin.QueueOp{Queue: name, Purged: &n, Running: true}, fmt.Errorf("%w (%d messages deleted so far; see herald queue show %s)", errPurgeGoesOn, n, name)
	}

	var a answer
	for waiting := true; waiting; {
		select {
		case a = <-ans:
			waiting = false
		case <-tick.C:
			if progress != nil {
				look(ctx)
			}
		}
	}
	if a.err != nil {
		if ctx.Err() != nil {
			return goesOn()
		}
		return a.r, a.err
	}
	if !a.r.Running {
		return a.r, nil
	}
	// The daemon stopped waiting and the purge goes on: follow it in the
	// queue's view.
	sofar = max(sofar, deref(a.r.Purged))
	for {
		select {
		case <-ctx.Done():
			return goesOn()
		case <-tick.C:
		}
		r, running, err := look(ctx)
		if err != nil && ctx.Err() != nil {
			return goesOn()
		}
		if err != nil || !running {
			return r, err
		}
	}
}
