package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
)

func topicsCommand() *cli.Command {
	return &cli.Command{
		Name:  "topics",
		Usage: "list the topics with subscribers and message counts",
		Description: `Reads GET /v1/topics?limit=N: the first N topics by name (default 1000), and
how many there are. Wildcard subscriptions are listed under their pattern.`,
		Flags: adminFlags(&cli.IntFlag{Name: "limit", Aliases: []string{"n"}, Value: admin.DefaultTopics, Usage: "list at most this many topics (at most 100000)"}),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "topics [flags]"); err != nil {
				return err
			}
			limit := cCtx.Int("limit")
			if limit < 0 || limit > admin.MaxTopics {
				return usageErrorf("--limit %d: want 0 to %d", limit, admin.MaxTopics)
			}
			return adminCall(cCtx, "topics", func(ctx context.Context, c *admin.Client) error {
				tl, err := c.TopicsLimit(ctx, limit)
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					return printJSON(cCtx.App.Writer, tl)
				}
				t := newTable(cCtx.App.Writer, "TOPIC", "SUBSCRIBERS", "IN", "OUT", "DROPPED")
				for _, v := range tl.Topics {
					t.row(v.Name, v.Subscribers, v.In, v.Out, v.Dropped)
				}
				if len(tl.Topics) == 0 && tl.Total == 0 {
					t.row("(no topics)")
				}
				if err := t.flush(); err != nil {
					return err
				}
				if tl.Total > len(tl.Topics) {
					fmt.Fprintf(cCtx.App.Writer, "(%d of %d topics shown; see --limit)\n", len(tl.Topics), tl.Total)
				}
				return nil
			})
		},
	}
}

func channelsCommand() *cli.Command {
	return &cli.Command{
		Name:        "channels",
		Usage:       "list the multicast channels with their traffic and repairs",
		Description: "Reads GET /v1/channels (empty when multicast is off).",
		Flags:       adminFlags(),
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "channels [flags]"); err != nil {
				return err
			}
			return adminCall(cCtx, "channels", func(ctx context.Context, c *admin.Client) error {
				cl, err := c.Channels(ctx)
				if err != nil {
					return err
				}
				if cCtx.Bool("json") {
					return printJSON(cCtx.App.Writer, cl)
				}
				t := newTable(cCtx.App.Writer, "CHANNEL", "GROUP", "PROFILE", "TOPICS", "STREAMS", "MESSAGES", "DATAGRAMS", "BYTES", "REPAIRS", "REPAIR-BYTES", "NAKS", "LOSSES", "FRAGMENTED", "TOP-NAK-SOURCE")
				for _, v := range cl.Channels {
					top := "-"
					if len(v.NAKSources) > 0 {
						s := v.NAKSources[0]
						top = fmt.Sprintf("%s (%d NAKs, %s)", s.Source, s.NAKs, humanBytes(int64(s.RepairBytes)))
					}
					carried := append([]string(nil), v.Topics...)
					for _, b := range v.KV {
						carried = append(carried, "kv:"+b)
					}
					t.row(v.Name, v.Group, v.Profile, strings.Join(carried, ","), v.Streams, v.Messages, v.Datagrams, humanBytes(int64(v.Bytes)),
						v.Repairs, humanBytes(int64(v.RepairBytes)), v.NAKs, v.Losses, fmt.Sprintf("%d (%d fragments)", v.FragmentedMessages, v.Fragments), top)
				}
				if len(cl.Channels) == 0 {
					t.row("(no multicast channels)")
				}
				return t.flush()
			})
		},
	}
}
