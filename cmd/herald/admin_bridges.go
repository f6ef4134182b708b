package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
)

func bridgesCommand() *cli.Command {
	return &cli.Command{
		Name:  "bridges",
		Usage: "list the bridges to JetStream or STOMP peers: state, lag, rate, reconnects, last error",
		Description: `Reads GET /v1/bridges: one row per bridge and direction. LAG is the messages
waiting to cross (out: the local queues' depth and bytes; in: the JetStream
consumer's pending and unacknowledged messages), INFLIGHT those sent and not
yet acknowledged by the other side, RATE the messages per second carried
lately. A failing direction shows its last error.`,
		Flags: adminFlags(),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "bridges [flags]"); err != nil {
				return err
			}
			return adminCall(cCtx, "bridges", func(ctx context.Context, c *admin.Client) error {
				bl, err := c.Bridges(ctx)
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					return printJSON(cCtx.App.Writer, bl)
				}
				t := newTable(cCtx.App.Writer, "BRIDGE", "KIND", "DIR", "STATE", "LAG", "LAG BYTES", "INFLIGHT", "CARRIED", "RATE/S", "RECONNECTS", "LAST ERROR")
				for _, b := range bl.Bridges {
					for _, d := range b.Directions {
						state := d.State
						if d.Failing {
							state += " (failing)"
						}
						lb := "-"
						if d.LagBytes >= 0 {
							lb = humanBytes(d.LagBytes)
						}
						t.row(b.Name, b.Kind, d.Direction, state, d.LagMessages, lb, d.InFlight, d.Confirmed, fmt.Sprintf("%.1f", d.Rate), d.Reconnects, d.LastError)
					}
				}
				if len(bl.Bridges) == 0 {
					t.row("(no bridges)")
				}
				return t.flush()
			})
		},
	}
}

// printFailingBridges adds the failing bridges to herald status; an older
// daemon without GET /v1/bridges shows none.
func printFailingBridges(ctx context.Context, w io.Writer, c *admin.Client) {
	bl, err := c.Bridges(ctx)
	if err != nil {
		return
	}
	for _, b := range bl.Bridges {
		for _, d := range b.Directions {
			if d.Failing {
				fmt.Fprintf(w, "bridge failing:  %s (%s, %s) since %s: %s (see herald bridges)\n", b.Name, b.Kind, d.Direction, d.FailingSince, d.LastError)
			}
		}
	}
}
