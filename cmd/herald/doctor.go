package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/mcdoctor"
	"github.com/herald-mq/herald/multicast"
)

// DefaultConfigFile is the packaged daemon's configuration, read by doctor
// without --config.
const DefaultConfigFile = "/etc/herald/herald.toml"

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check what makes a multicast channel fail on this host, and print the fixes",
		Description: `Checks, on the host where it runs, each channel of the config file (or the one
named by --channel, or the group given by --group):

  interface  exists, is up, has a carrier, an IPv4 address and the MULTICAST flag
  route      which interface the kernel picks for the group, and whether it is the configured one
  rmem_max   net.core.rmem_max against the receive buffer herald listen asks for (16 MiB)
  rp_filter  strict reverse-path filtering drops multicast from senders on other subnets
  igmp       whether the group is joined on the interface (/proc/net/igmp)
  querier    whether an IGMP querier was heard (--querier-wait listens for one)
  firewall   nftables (nft -j list ruleset) or iptables rules dropping the channel's UDP port
  ttl        the TTL against the route (TTL 1 with the group routed via a gateway)
  loopback   joins the group, sends one datagram with TTL 0 and multicast loop (it never
             leaves the host; herald listen on this host counts it as malformed, or as an
             authentication failure with a key) and receives it

Each line is OK, INFO (not verified: the text says why), WARN (works here, fails under load
or for some receivers) or FAIL, followed by the fix. Exit 0 when nothing failed, 1 when a
check failed (the error names which). Some checks need root (the firewall ruleset, the
querier wait). With --json, one object per check:
{"channel","group","interface","check","status","detail","fix"}.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Value: DefaultConfigFile, Usage: "heraldd's config `FILE` to read the channels from"},
			&cli.StringFlag{Name: "channel", Usage: "check only the channel `NAME` of the config file"},
			&cli.StringFlag{Name: "group", Usage: "check multicast `ADDR:PORT` instead of the config file's channels"},
			&cli.StringFlag{Name: "interface", Aliases: []string{"i"}, Usage: "`IFACE` of the channel (default: the config's, else the interface of the route to the group)"},
			&cli.IntFlag{Name: "ttl", Value: multicast.DefaultTTL, Usage: "TTL the channel's sender uses (with a config file: overrides the channel's ttl when given)"},
			&cli.StringFlag{Name: "sender", Usage: "IPv4 `ADDR` the channel's datagrams come from: checks rp_filter against the route back to it"},
			&cli.DurationFlag{Name: "querier-wait", Usage: "listen this long for an IGMP query (queries come every 125s by default; 0: do not listen)"},
			&cli.DurationFlag{Name: "timeout", Value: time.Second, Usage: "how long the loopback check waits for its datagram"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per check, in an array"},
		},
		Action: runDoctor,
	}
}

type doctorTarget struct {
	name string
	ch   mcdoctor.Channel
}

type doctorRow struct {
	Channel   string `json:"channel"`
	Group     string `json:"group"`
	Interface string `json:"interface"`
	mcdoctor.Result
}

func doctorTargets(cCtx *cli.Context) ([]doctorTarget, error) {
	var sender netip.Addr
	if s := cCtx.String("sender"); s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return nil, usageErrorf("--sender %q: want an IPv4 address", s)
		}
		sender = a
	}
	if ttl := cCtx.Int("ttl"); ttl < 0 || ttl > 255 {
		return nil, usageErrorf("--ttl %d: want 0 to 255", ttl)
	}
	if g := cCtx.String("group"); g != "" {
		if cCtx.IsSet("channel") {
			return nil, usageErrorf("--group and --channel: give one (--channel reads the group from --config)")
		}
		ap, err := netip.ParseAddrPort(g)
		if err != nil || !ap.Addr().Is4() || !ap.Addr().IsMulticast() || ap.Port() == 0 {
			return nil, usageErrorf("--group %q: want an IPv4 multicast address and port, e.g. 239.255.0.1:7400", g)
		}
		return []doctorTarget{{name: "-", ch: mcdoctor.Channel{Group: ap, Interface: cCtx.String("interface"),
			TTL: cCtx.Int("ttl"), Sender: sender}}}, nil
	}
	path := cCtx.String("config")
	cfg, err := appliance.LoadConfig(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &exitError{code: exitNoInput, err: fmt.Errorf("doctor: config file %s does not exist; name the file with --config, or the group with --group ADDR:PORT --interface IFACE", path)}
		}
		return nil, &exitError{code: exitNoInput, err: fmt.Errorf("doctor: %w", err)}
	}
	var out []doctorTarget
	var names []string
	for _, c := range cfg.Multicast.Channels {
		names = append(names, c.Name)
		if n := cCtx.String("channel"); n != "" && n != c.Name {
			continue
		}
		ap, err := netip.ParseAddrPort(c.Group)
		if err != nil || !ap.Addr().Is4() || !ap.Addr().IsMulticast() || ap.Port() == 0 {
			return nil, &exitError{code: exitOther, err: fmt.Errorf("doctor: config %s: channel %q: group %q: want an IPv4 multicast address and port (heraldd --check-config -config %s says more)", path, c.Name, c.Group, path)}
		}
		ifname := c.Interface
		if cCtx.IsSet("interface") {
			ifname = cCtx.String("interface")
		}
		ttl := c.TTL
		if cCtx.IsSet("ttl") {
			ttl = cCtx.Int("ttl")
		}
		out = append(out, doctorTarget{name: c.Name, ch: mcdoctor.Channel{Group: ap, Interface: ifname, TTL: ttl, Sender: sender}})
	}
	switch {
	case len(names) == 0:
		return nil, usageErrorf("config %s has no [[multicast.channel]]; check a group with --group ADDR:PORT --interface IFACE", path)
	case len(out) == 0:
		return nil, usageErrorf("config %s has no channel %q; its channels: %s", path, cCtx.String("channel"), strings.Join(names, ", "))
	}
	return out, nil
}

func runDoctor(cCtx *cli.Context) error {
	if err := checkArgs(cCtx, 0, 0, "doctor [--channel NAME | --group ADDR:PORT --interface IFACE] [--config FILE] [--json]"); err != nil {
		return err
	}
	if d := cCtx.Duration("timeout"); d <= 0 {
		return usageErrorf("--timeout %v: want a positive duration, e.g. 1s", d)
	}
	if d := cCtx.Duration("querier-wait"); d < 0 {
		return usageErrorf("--querier-wait %v: must not be negative", d)
	}
	targets, err := doctorTargets(cCtx)
	if err != nil {
		return err
	}
	o := mcdoctor.Options{QuerierWait: cCtx.Duration("querier-wait"), LoopbackWait: cCtx.Duration("timeout")}
	var rows []doctorRow
	var failed []string
	w := cCtx.App.Writer
	for i, t := range targets {
		rs := mcdoctor.Run(cCtx.Context, t.ch, o)
		ifname := t.ch.Interface
		if ifname == "" {
			ifname = "(route)"
		}
		if !cCtx.Bool("json") {
			if i > 0 {
				fmt.Fprintln(w)
			}
			if t.name == "-" {
				fmt.Fprintf(w, "group %s on %s\n", t.ch.Group, ifname)
			} else {
				fmt.Fprintf(w, "channel %s: group %s on %s\n", t.name, t.ch.Group, ifname)
			}
		}
		for _, r := range rs {
			rows = append(rows, doctorRow{Channel: t.name, Group: t.ch.Group.String(), Interface: t.ch.Interface, Result: r})
			if !cCtx.Bool("json") {
				fmt.Fprintf(w, "%-4s  %-9s  %s\n", r.Status, r.Check, r.Detail)
				if r.Fix != "" {
					fmt.Fprintf(w, "%-4s  %-9s  fix: %s\n", "", "", r.Fix)
				}
			}
		}
		for _, f := range mcdoctor.Failed(rs) {
			if t.name == "-" {
				failed = append(failed, f)
			} else {
				failed = append(failed, t.name+"/"+f)
			}
		}
	}
	if cCtx.Bool("json") {
		if err := printJSON(w, rows); err != nil {
			return stdoutErr(err)
		}
	}
	if len(failed) > 0 {
		return &exitError{code: exitOther, err: fmt.Errorf("doctor: %d check(s) failed: %s; the fixes are printed with each", len(failed), strings.Join(failed, ", "))}
	}
	return nil
}
