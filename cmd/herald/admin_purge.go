package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
)

// purgePoll is how often herald queue purge reads the queue's view while
// the purge runs (its progress, and its end once the daemon stopped
// waiting for it); purgeLostAfter is how long the view may fail to come
// (heraldd restarting, overloaded) before the command gives up following.
var (
	purgePoll      = 250 * time.Millisecond
	purgeLostAfter = time.Minute
)

// followTimeout is the --timeout of the commands that follow a purge: none
// by default, heraldd's own operation timeout bounding each request (with
// the same 30 s the command would give up before the daemon answered 202).
func followTimeout() *cli.DurationFlag {
	return &cli.DurationFlag{Name: "timeout", DefaultText: "none", Usage: "give up after this long (exit 75; the purge goes on)"}
}

// errPurgeGoesOn: the purge outlasted --timeout and goes on in heraldd.
var errPurgeGoesOn = errors.New("the purge goes on")

// purgeState is what the queue's view says of a purge.
type purgeState int

const (
	purgeRunning purgeState = iota
	purgeEnded              // its last_purge: this purge's end
	purgeUnknown            // the view did not come, or says nothing of this purge
)

// purgeQueue purges queue name and follows the purge to its end. A purge
// longer than the daemon's operation timeout is answered 202 (it goes on):
// purgeQueue then watches the queue's view until the purge ends and
// answers with its last_purge. progress, if not nil, is called with the
// count deleted so far as it grows. If ctx ends while the purge runs, the
// answer holds the count so far, with an error wrapping errPurgeGoesOn.
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
	look := func(ctx context.Context) (purgeState, *admin.QueueOp, error) {
		q, err := c.Queue(ctx, name)
		if err != nil {
			return purgeUnknown, nil, err
		}
		if q.Purging {
			if q.PurgeDeleted > sofar && progress != nil {
				progress(q.PurgeDeleted)
			}
			sofar = max(sofar, q.PurgeDeleted)
			return purgeRunning, nil, nil
		}
		lp := q.LastPurge
		if lp == nil || lp.EndedAt.Before(start) {
			// Nothing of a purge since this one began: heraldd restarted
			// (a purge stops at shutdown).
			return purgeUnknown, nil, fmt.Errorf("no purge of %s is running and heraldd does not know how it ended: it restarted (a purge stops at shutdown; what it deleted stays deleted). %d messages are in the queue: purge again", name, q.Messages)
		}
		n := lp.Deleted
		r := &admin.QueueOp{Queue: name, Purged: &n}
		if lp.Error != "" {
			return purgeEnded, r, fmt.Errorf("the purge of %s stopped: %s (%d messages were deleted; the rest stays: purge again)", name, lp.Error, n)
		}
		return purgeEnded, r, nil
	}
	// timedOut answers once ctx ended: the purge goes on, or it ended
	// meanwhile, or none runs (the request never reached heraldd).
	timedOut := func() (*admin.QueueOp, error) {
		lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		switch st, r, err := look(lctx); st {
		case purgeRunning:
			n := sofar
			return &admin.QueueOp{Queue: name, Purged: &n, Running: true}, fmt.Errorf("%w (%d messages deleted so far; see herald queue show %s)", errPurgeGoesOn, n, name)
		case purgeEnded:
			return r, err
		}
		return nil, ctx.Err()
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
			return timedOut()
		}
		return a.r, a.err
	}
	if !a.r.Running {
		return a.r, nil
	}
	// The daemon stopped waiting and the purge goes on: follow it in the
	// queue's view, through a restart or a moment without answers.
	sofar = max(sofar, deref(a.r.Purged))
	var failingSince time.Time
	for {
		select {
		case <-ctx.Done():
			return timedOut()
		case <-tick.C:
		}
		st, r, err := look(ctx)
		switch {
		case ctx.Err() != nil:
			return timedOut()
		case st != purgeUnknown:
			if st == purgeEnded {
				return r, err
			}
			failingSince = time.Time{}
			continue
		case !transient(err):
			return nil, err
		case failingSince.IsZero():
			failingSince = time.Now()
		case time.Since(failingSince) > purgeLostAfter:
			return nil, fmt.Errorf("following the purge of %s: %w; heraldd logs its end (\"queue purged\")", name, err)
		}
	}
}

// purgeShown is purgeQueue with the count shown on stderr as "WHAT: N
// messages deleted" when it is a terminal (not with --json).
func purgeShown(cCtx *cli.Context, ctx context.Context, c *admin.Client, name, what string) (*admin.QueueOp, error) {
	var progress func(int)
	errw, shown := cCtx.App.ErrWriter, false
	if !cCtx.Bool("json") && isTerminal(errw) {
		progress = func(n int) {
			shown = true
			fmt.Fprintf(errw, "\r%s: %d messages deleted", what, n)
		}
	}
	r, err := purgeQueue(ctx, c, name, progress)
	if shown {
		fmt.Fprintln(errw)
	}
	return r, err
}

// transient reports whether an admin error may pass by itself: heraldd
// not answering (restarting) or not ready.
func transient(err error) bool {
	var ce *admin.ConnError
	var ae *admin.APIError
	return errors.As(err, &ce) || (errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable)
}
