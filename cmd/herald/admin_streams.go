package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance"
)

// herald streams, herald stream show|cursors|delete|reset-cursor.

func streamsCommand() *cli.Command {
	return &cli.Command{
		Name:        "streams",
		Usage:       "list the streams with their size, offsets, times, retention and cursors' lag",
		Description: "Reads GET /v1/streams. LAG is the most messages any durable cursor of the stream has not acknowledged.",
		Flags:       adminFlags(),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "streams [flags]"); err != nil {
				return err
			}
			return adminCall(cCtx, "streams", func(ctx context.Context, c *admin.Client) error {
				l, err := c.Streams(ctx)
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					return printJSON(cCtx.App.Writer, l)
				}
				t := newTable(cCtx.App.Writer, "STREAM", "MESSAGES", "BYTES", "FIRST", "LAST", "FIRST-TIME", "LAST-TIME", "RETENTION", "SUBSCRIBERS", "CURSORS", "MAX-LAG")
				for _, s := range l.Streams {
					var lag uint64
					for _, cu := range s.Cursors {
						lag = max(lag, cu.Lag)
					}
					t.row(s.Name, s.Messages, humanBytes(s.Bytes), s.FirstOffset, lastOffset(s), timeCell(s.FirstTime), timeCell(s.LastTime), retention(s.Retention), s.Subscribers, len(s.Cursors), lag)
				}
				if len(l.Streams) == 0 {
					t.row("(no streams)")
				}
				return t.flush()
			})
		},
	}
}

func lastOffset(s appliance.StreamView) string {
	if s.LastOffset == nil {
		return "-"
	}
	return fmt.Sprint(*s.LastOffset)
}

func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func retention(r appliance.StreamRetentionView) string {
	var parts []string
	if r.MaxAgeSeconds > 0 {
		parts = append(parts, (time.Duration(r.MaxAgeSeconds * float64(time.Second))).String())
	}
	if r.MaxBytes > 0 {
		parts = append(parts, humanBytes(r.MaxBytes))
	}
	if r.MaxCount > 0 {
		parts = append(parts, fmt.Sprintf("%d msgs", r.MaxCount))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func oneStream(cCtx *cli.Context, usage string, nargs int) (string, error) {
	if err := checkArgs(cCtx, nargs, nargs, usage); err != nil {
		return "", err
	}
	name := strings.TrimPrefix(cCtx.Args().First(), "/stream/")
	if name == "" {
		return "", usageErrorf("empty stream name: herald %s", usage)
	}
	return name, nil
}

func printCursors(cCtx *cli.Context, cs []appliance.StreamCursorView) error {
	t := newTable(cCtx.App.Writer, "CURSOR", "NEXT-OFFSET", "LAG", "ACTIVE")
	for _, cu := range cs {
		t.row(cu.Name, cu.Next, cu.Lag, cu.Active)
	}
	if len(cs) == 0 {
		t.row("(no cursors)")
	}
	return t.flush()
}

// errDeleteGoesOn: the stream delete outlasted --timeout and goes on in
// heraldd.
var errDeleteGoesOn = errors.New("the delete goes on")

// deleteStream deletes stream name and follows the delete to its end
// (longOp): once heraldd answered 202, through GET
// /v1/streams/{name}/delete. progress, if not nil, is called with the count
// removed so far as it grows. If ctx ends while the delete runs, the answer
// holds the count so far, with an error wrapping errDeleteGoesOn.
func deleteStream(ctx context.Context, c *admin.Client, name string, progress func(deleted int)) (*admin.StreamOp, error) {
	start := time.Now()
	return longOp[*admin.StreamOp]{
		call: func(ctx context.Context) (*admin.StreamOp, bool, int, error) {
			r, err := c.DeleteStream(ctx, name)
			if err != nil {
				return r, false, 0, err
			}
			return r, r.Running, r.Deleted, nil
		},
		look: func(ctx context.Context) (opState, *admin.StreamOp, int, error) {
			d, err := c.StreamDelete(ctx, name)
			var ae *admin.APIError
			switch {
			case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
				d = nil // heraldd knows no delete of the name
			case err != nil:
				return opUnknown, nil, 0, err
			}
			if d != nil && d.Running {
				return opRunning, nil, d.Deleted, nil
			}
			if d == nil || d.EndedAt == nil || d.EndedAt.Before(start) {
				// Nothing of a delete since this one began: heraldd
				// restarted (a delete stops at shutdown).
				what := "what it deleted stays deleted, the rest stays in the stream: delete it again"
				s, err := c.Stream(ctx, name)
				switch {
				case err == nil:
					what = fmt.Sprintf("what it deleted stays deleted; %d messages are left in the stream: delete it again", s.Messages)
				case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
					what = "the stream is gone"
				}
				return opUnknown, nil, 0, fmt.Errorf("no delete of stream %s is running and heraldd does not know how it ended: it restarted (a delete stops at shutdown); %s", name, what)
			}
			r := &admin.StreamOp{Stream: name, Deleted: d.Deleted}
			if d.Error != "" {
				return opEnded, r, 0, fmt.Errorf("the delete of stream %s stopped after %d messages: %s", name, d.Deleted, d.Error)
			}
			return opEnded, r, 0, nil
		},
		goesOn: func(n int) (*admin.StreamOp, error) {
			return &admin.StreamOp{Stream: name, Deleted: n, Running: true}, fmt.Errorf("%w (%d messages deleted so far; herald stream show %s shows it while it runs)", errDeleteGoesOn, n, name)
		},
		lost: func(err error) error {
			return fmt.Errorf("following the delete of stream %s: %w; heraldd logs its end (\"stream deleted\")", name, err)
		},
	}.follow(ctx, progress)
}

func streamCommand() *cli.Command {
	return &cli.Command{
		Name:  "stream",
		Usage: "show, list the cursors of, delete, or reset a cursor of one stream",
		Subcommands: []*cli.Command{
			{
				Name:        "show",
				Usage:       "show every figure of a stream",
				ArgsUsage:   "NAME",
				Description: "Reads GET /v1/streams/{name}. NAME may be given as /stream/NAME.",
				Flags:       adminFlags(),
				Action: func(cCtx *cli.Context) error {
					name, err := oneStream(cCtx, "stream show [flags] NAME", 1)
					if err != nil {
						return err
					}
					return adminCall(cCtx, "stream show "+name, func(ctx context.Context, c *admin.Client) error {
						s, err := c.Stream(ctx, name)
						if err != nil {
							return err
						}
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, s)
						}
						t := newTable(cCtx.App.Writer)
						t.row("stream:", s.Name)
						t.row("messages:", fmt.Sprintf("%d (%s)", s.Messages, humanBytes(s.Bytes)))
						t.row("offsets:", fmt.Sprintf("first %d, last %s, next %d", s.FirstOffset, lastOffset(*s), s.NextOffset))
						t.row("times:", fmt.Sprintf("first %s, last %s", timeCell(s.FirstTime), timeCell(s.LastTime)))
						t.row("retention:", retention(s.Retention))
						t.row("subscribers:", s.Subscribers)
						t.row("appends:", fmt.Sprintf("%d (%s) since start", s.Appends, humanBytes(int64(s.AppendBytes))))
						t.row("trimmed:", fmt.Sprintf("%d since start", s.Trimmed))
						t.row("reads:", fmt.Sprintf("%d from the tail cache (%s held), %d from the journal", s.TailHits, humanBytes(s.TailBytes), s.TailReads))
						if s.Deleting {
							t.row("deleting:", fmt.Sprintf("%d messages deleted so far", s.DeleteDeleted))
						}
						if err := t.flush(); err != nil {
							return err
						}
						fmt.Fprintln(cCtx.App.Writer)
						return printCursors(cCtx, s.Cursors)
					})
				},
			},
			{
				Name:        "cursors",
				Usage:       "list the durable cursors of a stream and their lag",
				ArgsUsage:   "NAME",
				Description: "Reads GET /v1/streams/{name}/cursors. LAG is how many messages the stream holds that the cursor has not acknowledged; ACTIVE says whether a consumer holds the cursor now.",
				Flags:       adminFlags(),
				Action: func(cCtx *cli.Context) error {
					name, err := oneStream(cCtx, "stream cursors [flags] NAME", 1)
					if err != nil {
						return err
					}
					return adminCall(cCtx, "stream cursors "+name, func(ctx context.Context, c *admin.Client) error {
						l, err := c.StreamCursors(ctx, name)
						if err != nil {
							return err
						}
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, l)
						}
						return printCursors(cCtx, l.Cursors)
					})
				},
			},
			{
				Name:      "delete",
				Usage:     "delete a stream, its messages and cursors (refused while it has subscribers)",
				ArgsUsage: "NAME",
				Description: `DELETE /v1/streams/{name}. Refused (exit 1) while the stream has
subscribers: close them first. A later append to the name starts a new stream
at offset 0. Requires --yes.

On a terminal it shows how many messages the delete removed so far (on
stderr). A delete that outlasts heraldd's operation timeout goes on there; the
command follows it to its end (GET /v1/streams/{name}/delete, through a
restart of heraldd, which stops the delete: it says so, and what is left stays
in the stream). --timeout is none by default; if one passes first it says how
many were deleted so far (exit 75): the delete goes on.`,
				Flags: adminFlagsTimeout(followTimeoutOf("delete"), &cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "really delete"}),
				Action: func(cCtx *cli.Context) error {
					name, err := oneStream(cCtx, "stream delete --yes [flags] NAME", 1)
					if err != nil {
						return err
					}
					if !cCtx.Bool("yes") {
						return usageErrorf("stream delete deletes messages and cursors for good: add --yes to confirm (herald stream delete --yes %s)", name)
					}
					what := "stream delete " + name
					return adminCall(cCtx, what, func(ctx context.Context, c *admin.Client) error {
						progress, end := deletedShown(cCtx, "stream "+name)
						r, err := deleteStream(ctx, c, name, progress)
						end()
						if errors.Is(err, errDeleteGoesOn) {
							return &exitError{code: exitTimeout, err: fmt.Errorf("%s: --timeout %s passed; %s (--timeout 0: no limit)", what, cCtx.Duration("timeout"), err.Error())}
						}
						if err != nil {
							return err
						}
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, r)
						}
						fmt.Fprintf(cCtx.App.Writer, "deleted stream %s and its %d messages\n", name, r.Deleted)
						return nil
					})
				},
			},
			{
				Name:      "reset-cursor",
				Usage:     "move a durable cursor of a stream back or forth",
				ArgsUsage: "NAME CURSOR",
				Description: `POST /v1/streams/{name}/cursors/{cursor}/reset?to=TARGET. The cursor's next
consumer (x-stream-consumer:CURSOR) resumes at TARGET: first (the oldest
message held), last (the newest), next (only what is appended from now on) or
an offset. Refused (exit 1) while a consumer holds the cursor.`,
				Flags: adminFlags(&cli.StringFlag{Name: "to", Value: "first", Usage: "first, last, next or an offset"}),
				Action: func(cCtx *cli.Context) error {
					name, err := oneStream(cCtx, "stream reset-cursor [flags] NAME CURSOR", 2)
					if err != nil {
						return err
					}
					cursor := cCtx.Args().Get(1)
					to := cCtx.String("to")
					if _, err := appliance.ParseCursorTarget(to, 0, 0); err != nil {
						return usageErrorf("--to %q: want first, last, next or an offset", to)
					}
					return adminCall(cCtx, "stream reset-cursor "+name, func(ctx context.Context, c *admin.Client) error {
						r, err := c.ResetCursor(ctx, name, cursor, to)
						if err != nil {
							return err
						}
						if cCtx.Bool("json") {
							return printJSON(cCtx.App.Writer, r)
						}
						fmt.Fprintf(cCtx.App.Writer, "cursor %s of stream %s: next offset %d (was %d)\n", cursor, name, r.Offset, r.Previous)
						return nil
					})
				},
			},
		},
		Action: func(cCtx *cli.Context) error {
			if cCtx.Args().Present() {
				return usageErrorf("unknown stream command %q: want show, cursors, delete or reset-cursor; see: herald stream --help", cCtx.Args().First())
			}
			return usageErrorf("stream needs a command: show, cursors, delete or reset-cursor; see: herald stream --help")
		},
	}
}
