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

// followPoll is how often a command following a long operation (herald
// queue purge, herald stream delete) asks heraldd how it stands (its
// progress, and its end once the daemon stopped waiting for it);
// followLostAfter is how long the answer may fail to come (heraldd
// restarting, overloaded) before the command gives up following.
var (
	followPoll      = 250 * time.Millisecond
	followLostAfter = time.Minute
)

// followTimeout is the --timeout of the commands that follow a purge: none
// by default, heraldd's own operation timeout bounding each request (with
// the same 30 s the command would give up before the daemon answered 202).
func followTimeout() *cli.DurationFlag { return followTimeoutOf("purge") }

// followTimeoutOf is followTimeout for the operation what.
func followTimeoutOf(what string) *cli.DurationFlag {
	return &cli.DurationFlag{Name: "timeout", DefaultText: "none", Usage: "give up after this long (exit 75; the " + what + " goes on)"}
}

// errPurgeGoesOn: the purge outlasted --timeout and goes on in heraldd.
var errPurgeGoesOn = errors.New("the purge goes on")

// opState is how heraldd says a long operation stands.
type opState int

const (
	opRunning opState = iota
	opEnded           // its end: the operation's answer
	opUnknown         // no answer, or one that says nothing of this operation
)

// longOp is an admin operation that heraldd goes on with past its
// operation timeout, answering 202 with running and the count so far: a
// queue purge, a stream delete. R is its answer.
type longOp[R any] struct {
	// call sends the request: its answer, whether the operation goes on
	// (202) and its count so far.
	call func(ctx context.Context) (r R, running bool, sofar int, err error)
	// look asks how the operation stands: running with its count so
	// far, ended with its answer (and the error that stopped it early),
	// or unknown with why.
	look func(ctx context.Context) (st opState, r R, sofar int, err error)
	// goesOn is the answer when the caller's ctx ends while the operation
	// runs, n done so far: an error wrapping the command's errXGoesOn.
	goesOn func(n int) (R, error)
	// lost is the error when heraldd cannot be asked for followLostAfter.
	lost func(err error) error
}

// follow runs o and follows it to its end. A run longer than the daemon's
// operation timeout is answered 202 (it goes on): follow then asks how it
// stands every followPoll, through a restart or a moment without answers,
// until it ends. progress, if not nil, is called with the count so far as
// it grows. If ctx ends while the operation runs, the answer is goesOn's.
func (o longOp[R]) follow(ctx context.Context, progress func(n int)) (R, error) {
	var zero R
	type answer struct {
		r       R
		running bool
		n       int
		err     error
	}
	ans := make(chan answer, 1)
	go func() {
		r, running, n, err := o.call(ctx)
		ans <- answer{r, running, n, err}
	}()
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	sofar := 0
	look := func(ctx context.Context) (opState, R, error) {
		st, r, n, err := o.look(ctx)
		if st == opRunning {
			if n > sofar && progress != nil {
				progress(n)
			}
			sofar = max(sofar, n)
		}
		return st, r, err
	}
	// timedOut answers once ctx ended: the operation goes on, or it ended
	// meanwhile, or none runs (the request never reached heraldd).
	timedOut := func() (R, error) {
		lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		switch st, r, err := look(lctx); st {
		case opRunning:
			return o.goesOn(sofar)
		case opEnded:
			return r, err
		}
		return zero, ctx.Err()
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
	if !a.running {
		return a.r, nil
	}
	// The daemon stopped waiting and the operation goes on: follow it,
	// through a restart or a moment without answers.
	sofar = max(sofar, a.n)
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
		case st != opUnknown:
			if st == opEnded {
				return r, err
			}
			failingSince = time.Time{}
			continue
		case !transient(err):
			return zero, err
		case failingSince.IsZero():
			failingSince = time.Now()
		case time.Since(failingSince) > followLostAfter:
			return zero, o.lost(err)
		}
	}
}

// purgeQueue purges queue name and follows the purge to its end (longOp):
// once the daemon answered 202, in the queue's view until the purge ends,
// answering with its last_purge. progress, if not nil, is called with the
// count deleted so far as it grows. If ctx ends while the purge runs, the
// answer holds the count so far, with an error wrapping errPurgeGoesOn.
func purgeQueue(ctx context.Context, c *admin.Client, name string, progress func(deleted int)) (*admin.QueueOp, error) {
	start := time.Now()
	return longOp[*admin.QueueOp]{
		call: func(ctx context.Context) (*admin.QueueOp, bool, int, error) {
			r, err := c.Purge(ctx, name)
			if err != nil {
				return r, false, 0, err
			}
			return r, r.Running, deref(r.Purged), nil
		},
		look: func(ctx context.Context) (opState, *admin.QueueOp, int, error) {
			q, err := c.Queue(ctx, name)
			if err != nil {
				return opUnknown, nil, 0, err
			}
			if q.Purging {
				return opRunning, nil, q.PurgeDeleted, nil
			}
			lp := q.LastPurge
			if lp == nil || lp.EndedAt.Before(start) {
				// Nothing of a purge since this one began: heraldd
				// restarted (a purge stops at shutdown).
				return opUnknown, nil, 0, fmt.Errorf("no purge of %s is running and heraldd does not know how it ended: it restarted (a purge stops at shutdown; what it deleted stays deleted). %d messages are in the queue: purge again", name, q.Messages)
			}
			n := lp.Deleted
			r := &admin.QueueOp{Queue: name, Purged: &n}
			if lp.Error != "" {
				return opEnded, r, 0, fmt.Errorf("the purge of %s stopped: %s (%d messages were deleted; the rest stays: purge again)", name, lp.Error, n)
			}
			return opEnded, r, 0, nil
		},
		goesOn: func(n int) (*admin.QueueOp, error) {
			return &admin.QueueOp{Queue: name, Purged: &n, Running: true}, fmt.Errorf("%w (%d messages deleted so far; see herald queue show %s)", errPurgeGoesOn, n, name)
		},
		lost: func(err error) error {
			return fmt.Errorf("following the purge of %s: %w; heraldd logs its end (\"queue purged\")", name, err)
		},
	}.follow(ctx, progress)
}

// purgeShown is purgeQueue with the count shown on stderr as "WHAT: N
// messages deleted" when it is a terminal (not with --json).
func purgeShown(cCtx *cli.Context, ctx context.Context, c *admin.Client, name, what string) (*admin.QueueOp, error) {
	progress, end := deletedShown(cCtx, what)
	r, err := purgeQueue(ctx, c, name, progress)
	end()
	return r, err
}

// deletedShown returns a progress function that shows the count on stderr
// as "WHAT: N messages deleted" when it is a terminal (nil otherwise, and
// with --json), and end, which ends the line once the operation answered.
func deletedShown(cCtx *cli.Context, what string) (progress func(int), end func()) {
	errw, shown := cCtx.App.ErrWriter, false
	if !cCtx.Bool("json") && isTerminal(errw) {
		progress = func(n int) {
			shown = true
			fmt.Fprintf(errw, "\r%s: %d messages deleted", what, n)
		}
	}
	return progress, func() {
		if shown {
			fmt.Fprintln(errw)
		}
	}
}

// transient reports whether an admin error may pass by itself: heraldd
// not answering (restarting) or not ready.
func transient(err error) bool {
	var ce *admin.ConnError
	var ae *admin.APIError
	return errors.As(err, &ce) || (errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable)
}
