package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:        "status",
		Usage:       "show the daemon's version, uptime, listeners, journal and totals",
		Description: "Reads GET /v1/status of the admin socket.",
		Flags:       adminFlags(),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "status [flags]"); err != nil {
				return err
			}
			return adminCall(cCtx, "status", func(ctx context.Context, c *admin.Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					return printJSON(cCtx.App.Writer, st)
				}
				if err := printStatus(cCtx, st); err != nil {
					return err
				}
				printFailingBridges(ctx, cCtx.App.Writer, c) // admin_bridges.go
				return nil
			})
		},
	}
}

func printStatus(cCtx *cli.Context, st *admin.Status) error {
	t := newTable(cCtx.App.Writer)
	ready := "yes"
	if !st.Ready {
		ready = "no"
	}
	t.row("version:", st.Version)
	t.row("pid:", st.PID)
	t.row("uptime:", humanAge(st.UptimeSeconds)+" (since "+st.StartedAt.Local().Format(time.DateTime)+")")
	t.row("ready:", ready)
	t.row("log level:", st.LogLevel)
	t.row("listeners:", "stomp "+strings.Join(st.Listeners, ", "))
	if st.MetricsListen != "" {
		t.row("metrics:", "http://"+st.MetricsListen+"/metrics")
	}
	t.row("data dir:", st.DataDir)
	t.row("connections:", fmt.Sprintf("%d open, %d accepted, %d refused", st.Connections, st.Totals.ConnectionsTotal, st.Totals.Refused))
	t.row("queues:", fmt.Sprintf("%d holding %d messages (%s)", st.Queues, st.Messages, humanBytes(st.MessageBytes)))
	if j := st.Journal; j != nil {
		t.row("journal:", fmt.Sprintf("%s, %s (%s of it free for reuse)", j.Path, humanBytes(j.DBBytes), humanBytes(j.DBFreeBytes)))
		t.row("WAL:", humanBytes(j.WALBytes))
		last := "never"
		if j.LastCheckpoint != nil {
			last = j.LastCheckpoint.Local().Format(time.DateTime) + fmt.Sprintf(" (%s ago)", humanAge(time.Since(*j.LastCheckpoint).Seconds()))
		}
		t.row("last checkpoint:", last)
		t.row("commits:", fmt.Sprintf("%d (%d operations, %d failed)", j.Commits, j.Ops, j.FailedCommits))
		t.row("read errors:", fmt.Sprintf("%d page-ins failed to read the journal (retried)", j.ReadErrors))
	}
	tot := st.Totals
	t.row("topics:", fmt.Sprintf("%d messages in, %d out, %d dropped for slow subscribers", tot.TopicIn, tot.TopicOut, tot.SlowDrops))
	t.row("backpressure:", fmt.Sprintf("%d times a connection was not read until it read its frames (stomp.max_output_bytes)", tot.OutputWaits))
	if len(st.RestartNeeded) > 0 {
		t.row("restart needed:", strings.Join(st.RestartNeeded, ", ")+" changed in the file; SIGHUP could not apply them (systemctl restart herald)")
	}
	t.row("memory:", fmt.Sprintf("%s of %s budget used (memory.budget_bytes); producers held %d times", humanBytes(tot.MemoryUsed), humanBytes(tot.MemoryBudget), tot.MemoryWaits))
	t.row("journal intake:", fmt.Sprintf("producers held %d times behind their uncommitted writes (stomp.max_journal_pending_bytes)", tot.JournalWaits))
	t.row("dead-lettered:", tot.DeadLettered)
	t.row("dedup hits:", tot.DedupHits)
	t.row("stale acks:", tot.StaleAcks)
	if tot.DiskLow {
		t.row("DISK LOW:", "free space is below journal.min_free_bytes: queues refuse SENDs")
	}
	return t.flush()
}

func awaitReadyCommand() *cli.Command {
	return &cli.Command{
		Name:  "await-ready",
		Usage: "wait until the daemon answers ready (for scripts and unit files)",
		Description: `Polls GET /v1/ready until it answers ready, or gives up after --timeout
(exit 75). A missing socket counts as not ready yet; a socket it may not use
fails at once (exit 77), and so does a path that is not a socket (exit 69).`,
		Flags: adminFlags(&cli.DurationFlag{Name: "interval", Value: 100 * time.Millisecond, Usage: "time between polls"}),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "await-ready [flags]"); err != nil {
				return err
			}
			if err := checkTimeout(cCtx); err != nil {
				return err
			}
			sock := socketPath(cCtx)
			c := admin.NewClient(sock)
			defer c.Close()
			ctx := cCtx.Context
			if d := cCtx.Duration("timeout"); d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			var last error
			for {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				last = c.Ready(rctx)
				cancel()
				if errors.Is(last, syscall.EACCES) || errors.Is(last, os.ErrPermission) ||
					errors.Is(last, syscall.ECONNREFUSED) && !isSocket(sock) {
					// Not a daemon still starting (a socket it may not
					// use, or a path that is no socket): waiting will
					// not help.
					return adminFailure("await-ready", sock, ctx, last)
				}
				if last == nil {
					if cCtx.Bool("json") {
						return printJSON(cCtx.App.Writer, admin.Ready{Ready: true})
					}
					fmt.Fprintln(cCtx.App.Writer, "ready")
					return nil
				}
				select {
				case <-ctx.Done():
					return &exitError{code: exitTimeout, err: fmt.Errorf("await-ready: heraldd on %s not ready after %s (last: %v)", sock, cCtx.Duration("timeout"), last)}
				case <-time.After(cCtx.Duration("interval")):
				}
			}
		},
	}
}

func configCommand() *cli.Command {
	return &cli.Command{
		Name:        "config",
		Usage:       "print the daemon's effective configuration (secrets hidden)",
		Description: "Reads GET /v1/config. Without --json, prints it as JSON too (the same document).",
		Flags:       adminFlags(),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "config [flags]"); err != nil {
				return err
			}
			return adminCall(cCtx, "config", func(ctx context.Context, c *admin.Client) error {
				b, err := c.Do(ctx, "GET", "/v1/config", nil)
				if err != nil {
					return err
				}
				_, err = cCtx.App.Writer.Write(b)
				return err
			})
		},
	}
}

func logLevelCommand() *cli.Command {
	return &cli.Command{
		Name:      "log-level",
		Usage:     "show or change the daemon's log level (debug, info, warn, error)",
		ArgsUsage: "[LEVEL]",
		Description: `Without LEVEL, prints the current level. With LEVEL, sets it until the next
restart or SIGHUP (which re-reads log.level from the config file).`,
		Flags: adminFlags(),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 1, "log-level [flags] [LEVEL]"); err != nil {
				return err
			}
			level := cCtx.Args().First()
			if level != "" {
				if _, err := admin.ParseLevel(level); err != nil {
					return usageErrorf("%v", err)
				}
			}
			return adminCall(cCtx, "log-level", func(ctx context.Context, c *admin.Client) error {
				var lv *admin.LogLevel
				var err error
				if level == "" {
					lv, err = c.LogLevel(ctx)
				} else {
					lv, err = c.SetLogLevel(ctx, level)
				}
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					return printJSON(cCtx.App.Writer, lv)
				}
				if lv.Previous != "" {
					fmt.Fprintf(cCtx.App.Writer, "log level %s (was %s)\n", lv.Level, lv.Previous)
				} else {
					fmt.Fprintln(cCtx.App.Writer, lv.Level)
				}
				return nil
			})
		},
	}
}
