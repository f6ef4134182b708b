package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance"
)

func queuesCommand() *cli.Command {
	return &cli.Command{
		Name:        "queues",
		Usage:       "list the queues with their depth, consumers and oldest message",
		Description: "Reads GET /v1/queues.",
		Flags:       adminFlags(),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "queues [flags]"); err != nil {
				return err
			}
			return adminCall(cCtx, "queues", func(ctx context.Context, c *admin.Client) error {
				ql, err := c.Queues(ctx)
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					return printJSON(cCtx.App.Writer, ql)
				}
				t := newTable(cCtx.App.Writer, "QUEUE", "MESSAGES", "READY", "IN-FLIGHT", "DELAYED", "CONSUMERS", "BYTES", "OLDEST", "DLQ", "ENQUEUED", "DELIVERED")
				for _, q := range ql.Queues {
					t.row(q.Name, q.Messages, q.Ready, q.InFlight, q.Delayed, q.Consumers, humanBytes(q.Bytes), humanAge(q.OldestAgeSec), q.DLQDepth, q.Enqueued, q.Delivered)
				}
				if len(ql.Queues) == 0 {
					t.row("(no queues)")
				}
				return t.flush()
			})
		},
	}
}

func queueCommand() *cli.Command {
	return &cli.Command{
		Name:  "queue",
		Usage: "show, peek at, purge, delete or requeue one queue",
		Subcommands: []*cli.Command{
			{
				Name:        "show",
				Usage:       "show every figure of a queue",
				ArgsUsage:   "NAME",
				Description: "Reads GET /v1/queues/{name}. NAME may be given as /queue/NAME.",
				Flags:       adminFlags(),
				Action: func(cCtx *cli.Context) error {
					name, err := oneQueue(cCtx, "queue show [flags] NAME")
					if err != nil {
						return err
					}
					return adminCall(cCtx, "queue show "+name, func(ctx context.Context, c *admin.Client) error {
						q, err := c.Queue(ctx, name)
						if err != nil {
							return err
						}
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, q)
						}
						return printQueue(cCtx, q)
					})
				},
			},
			{
				Name:      "peek",
				Usage:     "print the oldest messages of a queue without consuming them",
				ArgsUsage: "NAME",
				Description: `Reads GET /v1/queues/{name}/messages?limit=N: the oldest N messages in
order, in-flight ones included. Nothing is delivered or acknowledged.
Bodies are cut at 1 KiB (--max-body, or --full-body for whole bodies up to
16 MiB); the table marks a cut body with "[cut]" and its BYTES column is
the whole body's length.`,
				Flags: adminFlags(
					&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, Value: admin.DefaultPeek, Usage: "how many messages (at most 1000)"},
					&cli.IntFlag{Name: "max-body", Value: admin.DefaultMaxBody, Usage: "bytes of each body to fetch (at most 16 MiB)"},
					&cli.BoolFlag{Name: "full-body", Usage: "fetch whole bodies (up to 16 MiB each)"},
				),
				Action: func(cCtx *cli.Context) error {
					name, err := oneQueue(cCtx, "queue peek [flags] NAME")
					if err != nil {
						return err
					}
					limit := cCtx.Int("limit")
					if limit < 0 || limit > admin.MaxPeek {
						return usageErrorf("--limit %d: want 0 to %d", limit, admin.MaxPeek)
					}
					o := admin.PeekOptions{MaxBody: cCtx.Int("max-body"), FullBody: cCtx.Bool("full-body")}
					if o.MaxBody < 0 || o.MaxBody > admin.MaxPeekBody {
						return usageErrorf("--max-body %d: want 0 to %d", o.MaxBody, admin.MaxPeekBody)
					}
					if o.FullBody {
						if cCtx.IsSet("max-body") {
							return usageErrorf("give --full-body or --max-body, not both")
						}
						o.MaxBody = -1
					}
					return adminCall(cCtx, "queue peek "+name, func(ctx context.Context, c *admin.Client) error {
						p, err := c.PeekBody(ctx, name, limit, o)
						if err != nil {
							return err
						}
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, p)
						}
						t := newTable(cCtx.App.Writer, "ID", "ENQUEUED", "DELIVERIES", "BYTES", "BODY")
						for _, m := range p.Messages {
							body := abbreviate(m.Body, 60)
							if m.BodyTruncated {
								body = abbreviate(m.Body, 54) + " [cut]"
							}
							t.row(m.ID, m.EnqueuedAt.Local().Format(time.DateTime), m.Deliveries, m.BodyBytes, body)
						}
						if len(p.Messages) == 0 {
							t.row("(empty)")
						}
						return t.flush()
					})
				},
			},
			{
				Name:      "purge",
				Usage:     "delete every message of a queue that is not in flight",
				ArgsUsage: "NAME",
				Description: `POST /v1/queues/{name}/purge. Messages being processed by a consumer are
kept (their ACK or NACK decides). Requires --yes.

On a terminal it shows how many messages the purge deleted so far (on
stderr). A purge that outlasts heraldd's operation timeout goes on there;
the command follows it in the queue's view to its end (through a restart of
heraldd, which stops the purge: it says so). --timeout is none by default;
if one passes first it says how many were deleted so far (exit 75): the
purge goes on.`,
				Flags: adminFlagsTimeout(followTimeout(), &cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "really purge"}),
				Action: func(cCtx *cli.Context) error {
					name, err := oneQueue(cCtx, "queue purge --yes [flags] NAME")
					if err != nil {
						return err
					}
					if !cCtx.Bool("yes") {
						return usageErrorf("queue purge deletes messages for good: add --yes to confirm (herald queue purge --yes %s)", name)
					}
					what := "queue purge " + name
					return adminCall(cCtx, what, func(ctx context.Context, c *admin.Client) error {
						r, err := purgeShown(cCtx, ctx, c, name, "purge")
						if errors.Is(err, errPurgeGoesOn) {
							return &exitError{code: exitTimeout, err: fmt.Errorf("%s: --timeout %s passed; %s (--timeout 0: no limit)", what, cCtx.Duration("timeout"), err.Error())}
						}
						if err != nil {
							return err
						}
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, r)
						}
						fmt.Fprintf(cCtx.App.Writer, "purged %d messages from %s\n", deref(r.Purged), name)
						return nil
					})
				},
			},
			{
				Name:      "delete",
				Usage:     "purge a queue and forget it (refused while it has consumers)",
				ArgsUsage: "NAME",
				Description: `DELETE /v1/queues/{name}. Refused (exit 1) while the queue has consumers:
close them first. Requires --yes.

A queue holding messages is purged first (POST /v1/queues/{name}/purge,
followed to its end and shown on a terminal as queue purge does), so that
the delete itself, which holds SENDs to the name while it runs, is short.`,
				Flags: adminFlagsTimeout(followTimeout(), &cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "really delete"}),
				Action: func(cCtx *cli.Context) error {
					name, err := oneQueue(cCtx, "queue delete --yes [flags] NAME")
					if err != nil {
						return err
					}
					if !cCtx.Bool("yes") {
						return usageErrorf("queue delete deletes messages for good: add --yes to confirm (herald queue delete --yes %s)", name)
					}
					what := "queue delete " + name
					return adminCall(cCtx, what, func(ctx context.Context, c *admin.Client) error {
						// A deep queue is purged first, followed to its end as
						// queue purge does: the delete itself is bounded by
						// heraldd's operation timeout and holds SENDs to the
						// name while it runs. Not with consumers: the delete
						// refuses those (one that comes during the purge makes
						// the delete refuse after it: the answer says both).
						purged := 0
						q, err := c.Queue(ctx, name)
						if err != nil {
							return err
						}
						if q.Consumers == 0 && q.Messages > 0 {
							pr, err := purgeShown(cCtx, ctx, c, name, "delete")
							if errors.Is(err, errPurgeGoesOn) {
								return &exitError{code: exitTimeout, err: fmt.Errorf("%s: --timeout %s passed while purging it; %s; the queue is not deleted yet: run this again once it ends (--timeout 0: no limit)", what, cCtx.Duration("timeout"), err.Error())}
							}
							if err != nil {
								return err
							}
							purged = deref(pr.Purged)
							if ctx.Err() != nil {
								return &exitError{code: exitTimeout, err: fmt.Errorf("%s: --timeout %s passed after purging its %d messages; the queue is not deleted: run this again", what, cCtx.Duration("timeout"), purged)}
							}
						}
						r, err := c.DeleteQueue(ctx, name)
						if err != nil && purged > 0 {
							var ee *exitError
							if errors.As(adminFailure(what, socketPath(cCtx), ctx, err), &ee) {
								return &exitError{code: ee.code, err: fmt.Errorf("%w (its %d messages were purged first; the queue is not deleted)", ee.err, purged)}
							}
						}
						if err != nil {
							return err
						}
						n := purged + deref(r.Deleted)
						r.Deleted = &n
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, r)
						}
						fmt.Fprintf(cCtx.App.Writer, "deleted queue %s and its %d messages\n", name, deref(r.Deleted))
						return nil
					})
				},
			},
			{
				Name:      "requeue",
				Usage:     "move dead-lettered messages of a queue back to it",
				ArgsUsage: "NAME",
				Description: `POST /v1/queues/{name}/requeue?max=N: moves up to N (default all) messages
of the queue's dead-letter queue (DLQ.NAME) back to the tail of NAME, oldest
first, with their delivery count reset. Name the original queue, not the DLQ.

It moves them in requests of 10000 (each its own journal transactions), up to
what the DLQ held when it began: on a terminal it shows how many it moved
(on stderr), and if it stops early (--timeout, an error) it says how many
had moved; run it again to move the rest.`,
				Flags: adminFlags(&cli.IntFlag{Name: "max", Usage: "move at most this many (0: all)"}),
				Action: func(cCtx *cli.Context) error {
					name, err := oneQueue(cCtx, "queue requeue [flags] NAME")
					if err != nil {
						return err
					}
					if cCtx.Int("max") < 0 {
						return usageErrorf("--max %d: want 0 (all) or more", cCtx.Int("max"))
					}
					what := "queue requeue " + name
					return adminCall(cCtx, what, func(ctx context.Context, c *admin.Client) error {
						var progress func(moved, total int)
						errw, shown := cCtx.App.ErrWriter, false
						if !cCtx.Bool("json") && isTerminal(errw) {
							progress = func(moved, total int) {
								shown = true
								if total > 0 {
									fmt.Fprintf(errw, "\rrequeue: %d/%d messages (%d%%)", moved, total, moved*100/total)
								} else {
									fmt.Fprintf(errw, "\rrequeue: %d messages", moved)
								}
							}
						}
						r, total, err := requeueInBatches(ctx, c, name, cCtx.Int("max"), progress)
						if shown {
							fmt.Fprintln(errw)
						}
						if err != nil {
							if moved := deref(r.Requeued); moved > 0 {
								var ee *exitError
								if !errors.As(adminFailure(what, socketPath(cCtx), ctx, err), &ee) {
									return err
								}
								of := ""
								if total > 0 {
									of = fmt.Sprintf(" of %d", total)
								}
								done := fmt.Sprintf("at least %d%s messages had moved from %s to %s: run it again to move the rest", moved, of, r.DLQ, name)
								if ee.code == exitTimeout && ctx.Err() != nil {
									return &exitError{code: exitTimeout, err: fmt.Errorf("%s: --timeout %s passed; %s (--timeout 0: no limit)", what, cCtx.Duration("timeout"), done)}
								}
								return &exitError{code: ee.code, err: fmt.Errorf("%w; %s", ee.err, done)}
							}
							var ae *admin.APIError
							if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
								return err
							}
							// No DLQ: none was ever needed, or the empty one
							// was forgotten. The queue being there, nothing
							// is to requeue, as from an empty DLQ.
							q, qerr := c.Queue(ctx, name)
							if qerr != nil || q.DLQ == "" || !strings.Contains(ae.Message, strconv.Quote(q.DLQ)) {
								return err
							}
							zero := 0
							r = &admin.QueueOp{Queue: name, DLQ: q.DLQ, Requeued: &zero}
						}
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, r)
						}
						fmt.Fprintf(cCtx.App.Writer, "requeued %d messages from %s to %s\n", deref(r.Requeued), r.DLQ, name)
						return nil
					})
				},
			},
		},
		Action: func(cCtx *cli.Context) error {
			if cCtx.Args().Present() {
				return usageErrorf("unknown queue command %q: want show, peek, purge, delete or requeue; see: herald queue --help", cCtx.Args().First())
			}
			return usageErrorf("queue needs a command: show, peek, purge, delete or requeue; see: herald queue --help")
		},
	}
}

// requeueBatch is how many dead letters one requeue request moves: each
// request is bounded by the daemon's operation timeout (30 s), and the
// progress shown advances per request.
var requeueBatch = 10000

// requeueInBatches moves up to maxN (0: all) dead letters of name back to
// it, requeueBatch per request, and at most what the DLQ held after the
// first request (dead letters that come back, expired again, are not
// cycled). progress, when set, is called after each request with the
// messages moved and the total to move (0: unknown). The answer sums the
// requests; on an error it holds what had moved before.
func requeueInBatches(ctx context.Context, c *admin.Client, name string, maxN int, progress func(moved, total int)) (*admin.QueueOp, int, error) {
	sum := &admin.QueueOp{Queue: name}
	moved, total := 0, 0
	sum.Requeued = &moved
	for first := true; ; first = false {
		want := requeueBatch
		if maxN > 0 {
			want = min(want, maxN-moved)
		}
		if total > 0 {
			want = min(want, total-moved)
		}
		if !first && total == 0 {
			// The DLQ's depth is unknown: the rest in one request (0: all).
			want = 0
			if maxN > 0 {
				want = maxN - moved
			}
		}
		r, err := c.Requeue(ctx, name, want)
		if err != nil {
			return sum, total, err
		}
		n := deref(r.Requeued)
		moved += n
		sum.Queue, sum.DLQ = r.Queue, r.DLQ
		if first && n == want {
			if q, err := c.Queue(ctx, r.DLQ); err == nil {
				total = moved + q.Messages
				if maxN > 0 {
					total = min(total, maxN)
				}
			}
		}
		if progress != nil && moved > 0 {
			progress(moved, total)
		}
		if n < want || want == 0 || (maxN > 0 && moved >= maxN) || (total > 0 && moved >= total) {
			return sum, total, nil
		}
	}
}

func oneQueue(cCtx *cli.Context, usage string) (string, error) {
	if err := checkArgs(cCtx, 1, 1, usage); err != nil {
		return "", err
	}
	name := queueName(cCtx.Args().First())
	if name == "" {
		return "", usageErrorf("empty queue name: herald %s", usage)
	}
	return name, nil
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// abbreviate shortens s to n runes on one line.
func abbreviate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func printQueue(cCtx *cli.Context, q *appliance.QueueView) error {
	t := newTable(cCtx.App.Writer)
	t.row("queue:", q.Name)
	t.row("messages:", fmt.Sprintf("%d (%s)", q.Messages, humanBytes(q.Bytes)))
	t.row("ready:", q.Ready)
	t.row("in flight:", q.InFlight)
	t.row("delayed:", q.Delayed)
	t.row("consumers:", q.Consumers)
	t.row("oldest message:", humanAge(q.OldestAgeSec))
	t.row("in memory:", fmt.Sprintf("%d; backlog cache %d (%s), %d page-ins from it", q.InMemory, q.Cached, humanBytes(q.CachedBytes), q.CacheHits))
	if q.Purging {
		t.row("purging:", fmt.Sprintf("%d messages deleted so far; nothing is delivered until the purge ends", q.PurgeDeleted))
	}
	if lp := q.LastPurge; lp != nil {
		how := fmt.Sprintf("%d messages (%s) deleted, ended %s", lp.Deleted, humanBytes(lp.Bytes), lp.EndedAt.Local().Format(time.DateTime))
		if lp.Error != "" {
			how += "; stopped early: " + lp.Error
		}
		t.row("last purge:", how)
	}
	if q.DLQ != "" {
		t.row("dead-letter queue:", fmt.Sprintf("%s (%d messages)", q.DLQ, q.DLQDepth))
	}
	t.row("enqueued:", q.Enqueued)
	t.row("delivered:", q.Delivered)
	t.row("redelivered:", q.Redelivered)
	t.row("acked:", q.Acked)
	t.row("expired:", q.Expired)
	t.row("dead-lettered:", q.DeadLettered)
	t.row("stale acks:", q.StaleAcks)
	t.row("ack timeouts:", q.AckTimeouts)
	t.row("blocked sends:", fmt.Sprintf("%d (%.1fs blocked)", q.BlockedSends, q.BlockedSeconds))
	return t.flush()
}
