package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
)

func connectionsCommand() *cli.Command {
	return &cli.Command{
		Name:        "connections",
		Usage:       "list the STOMP connections, or close one",
		Description: "Reads GET /v1/connections.",
		Flags:       adminFlags(),
		Subcommands: []*cli.Command{{
			Name:        "close",
			Usage:       "close a STOMP connection with an ERROR frame naming the reason",
			ArgsUsage:   "ID",
			Description: "DELETE /v1/connections/{id}. Its unacknowledged messages return to their queues.",
			Flags:       adminFlags(&cli.StringFlag{Name: "reason", Value: "closed by the operator", Usage: "told to the client in the ERROR frame"}),
			Action: func(cCtx *cli.Context) error {
				const usage = "connections close [flags] ID"
				if err := checkArgs(cCtx, 1, 1, usage); err != nil {
					return err
				}
				id, err := strconv.ParseUint(cCtx.Args().First(), 10, 64)
				if err != nil {
					return usageErrorf("connection id %q is not a number: herald %s (ids: herald connections)", cCtx.Args().First(), usage)
				}
				return adminCall(cCtx, "connections close", func(ctx context.Context, c *admin.Client) error {
					r, err := c.CloseConnection(ctx, id, cCtx.String("reason"))
					if err != nil {
						return err
					}
					if cCtx.Bool("json") {
						return printJSON(cCtx.App.Writer, r)
					}
					fmt.Fprintf(cCtx.App.Writer, "closed connection %d\n", r.ID)
					return nil
				})
			},
		}},
		Action: func(cCtx *cli.Context) error {
			if cCtx.Args().Present() {
				return usageErrorf("unknown connections command %q: want close; see: herald connections --help", cCtx.Args().First())
			}
			return adminCall(cCtx, "connections", func(ctx context.Context, c *admin.Client) error {
				cl, err := c.Connections(ctx)
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					return printJSON(cCtx.App.Writer, cl)
				}
				t := newTable(cCtx.App.Writer, "ID", "PEER", "USER", "AUTH", "TLS", "VERSION", "AGE", "SUBS", "MSGS-IN", "MSGS-OUT", "BYTES-IN", "DROPS")
				for _, v := range cl.Connections {
					t.row(v.ID, v.Peer, dash(v.User), dash(v.Auth), dash(v.TLS), v.Version, humanAge(time.Since(v.Connected).Seconds()), v.Subscriptions, v.MessagesIn, v.MessagesOut, humanBytes(int64(v.BytesIn)), v.SlowDrops)
				}
				if len(cl.Connections) == 0 {
					t.row("(no connections)")
				}
				return t.flush()
			})
		},
	}
}

// dash is s, or "-" when it is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
