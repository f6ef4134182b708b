package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/herald-mq/herald/admin"
)

// ANSI sequences of the full-screen view.
const (
	ansiAltScreen  = "\x1b[?1049h"
	ansiMainScreen = "\x1b[?1049l"
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
	ansiHome       = "\x1b[H"
	ansiClearDown  = "\x1b[J"
	ansiClearLine  = "\x1b[K"
	ansiBold       = "\x1b[1m"
	ansiReset      = "\x1b[0m"
)

func topCommand() *cli.Command {
	return &cli.Command{
		Name:  "top",
		Usage: "live view of queues, topics and channels with rates",
		Description: `Refreshes every --interval a full-screen view of the queues, topics and
multicast channels, with per-second rates computed between refreshes. Quit
with q or Ctrl-C; the terminal is restored. When stdin or stdout is not a
terminal, or with --iterations, prints plain frames one after another.`,
		Flags: hideFlags(adminFlags(
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "refresh period"},
			&cli.IntFlag{Name: "iterations", Usage: "stop after this many frames (0: until q)"},
		)),
		Action: runTop,
	}
}

// hideFlags leaves two shared admin flags out of top's help and manual
// page: --json, which top refuses (runTop) with a pointer to the commands
// that have it, and --timeout, which a live view has no use for (each
// refresh is bounded by itself); it is still accepted, and ignored.
func hideFlags(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.BoolFlag:
			f.Hidden = f.Name == "json"
		case *cli.DurationFlag:
			f.Hidden = f.Name == "timeout"
		}
	}
	return flags
}

// topSnap is one refresh's data.
type topSnap struct {
	at       time.Time
	status   *admin.Status
	queues   *admin.QueueList
	topics   *admin.TopicList
	channels *admin.ChannelList
}

func fetchTop(ctx context.Context, c *admin.Client) (*topSnap, error) {
	s := &topSnap{at: time.Now()}
	var err error
	if s.status, err = c.Status(ctx); err != nil {
		return nil, err
	}
	if s.queues, err = c.Queues(ctx); err != nil {
		return nil, err
	}
	if s.topics, err = c.Topics(ctx); err != nil {
		return nil, err
	}
	if s.channels, err = c.Channels(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func runTop(cCtx *cli.Context) error {
	if err := checkArgs(cCtx, 0, 0, "top [flags]"); err != nil {
		return err
	}
	if cCtx.Bool("json") {
		// A live screen of rates between samples, not a document: the
		// figures it shows are each command's own --json.
		return usageErrorf("herald top has no --json: use herald status, queues, topics or channels --json for its figures")
	}
	interval := cCtx.Duration("interval")
	if interval < 100*time.Millisecond {
		return usageErrorf("--interval %s: want at least 100ms", interval)
	}
	iterations := cCtx.Int("iterations")
	if iterations < 0 {
		return usageErrorf("--iterations %d: want 0 or more", iterations)
	}
	out := cCtx.App.Writer
	in, inOK := cCtx.App.Reader.(*os.File)
	outF, outOK := out.(*os.File)
	screen := iterations == 0 && inOK && outOK && term.IsTerminal(int(in.Fd())) && term.IsTerminal(int(outF.Fd()))
	sock := socketPath(cCtx)
	c := admin.NewClient(sock)
	defer c.Close()

	ctx, stop := signal.NotifyContext(cCtx.Context, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	quit := make(chan struct{})
	nl := "\n"
	height, width := 0, 0
	if screen {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("top: cannot set the terminal to raw mode: %w", err)
		}
		defer term.Restore(int(in.Fd()), old)
		io.WriteString(out, ansiAltScreen+ansiHideCursor)
		defer io.WriteString(out, ansiShowCursor+ansiMainScreen)
		nl = ansiClearLine + "\r\n"
		// The reader ends with the process: a blocked read of a terminal
		// cannot be interrupted portably.
		go func() {
			b := make([]byte, 16)
			for {
				n, err := in.Read(b)
				if err != nil {
					close(quit)
					return
				}
				if bytes.ContainsAny(b[:n], "qQ\x03\x04") {
					close(quit)
					return
				}
			}
		}()
	}

	var prev *topSnap
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for frame := 1; ; frame++ {
		rctx, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
		snap, err := fetchTop(rctx, c)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return adminFailure("top", sock, rctx, err)
		}
		if screen {
			if w, h, err := term.GetSize(int(outF.Fd())); err == nil {
				width, height = w, h
			}
		}
		var buf bytes.Buffer
		if screen {
			buf.WriteString(ansiHome)
		}
		renderTop(&buf, snap, prev, sock, nl, width, height, screen)
		if screen {
			buf.WriteString(ansiClearDown)
		} else {
			buf.WriteString("\n")
		}
		out.Write(buf.Bytes())
		prev = snap
		if iterations > 0 && frame >= iterations {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-quit:
			return nil
		case <-tick.C:
		}
	}
}

// rate is the per-second change of a counter between two snapshots.
func rate(cur, old uint64, secs float64, ok bool) string {
	if !ok || secs <= 0 || cur < old {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(cur-old)/secs)
}

func renderTop(w *bytes.Buffer, s, prev *topSnap, sock, nl string, width, height int, screen bool) {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	secs := 0.0
	if prev != nil {
		secs = s.at.Sub(prev.at).Seconds()
	}
	st := s.status
	bold, reset := "", ""
	if screen {
		bold, reset = ansiBold, ansiReset
	}
	hint := ""
	if screen {
		hint = "   (q to quit)"
	}
	add("%sherald top%s  %s  %s  up %s%s", bold, reset, sock, s.at.Format(time.TimeOnly), humanAge(st.UptimeSeconds), hint)
	wal := "-"
	if st.Journal != nil {
		wal = humanBytes(st.Journal.WALBytes)
	}
	add("connections %d   queues %d   messages %d (%s)   WAL %s", st.Connections, st.Queues, st.Messages, humanBytes(st.MessageBytes), wal)
	add("")

	table := func(header []string, rows [][]string) {
		var tb bytes.Buffer
		t := newTable(&tb, header...)
		for _, r := range rows {
			t.row(toAny(r)...)
		}
		t.flush()
		for i, l := range strings.Split(strings.TrimRight(tb.String(), "\n"), "\n") {
			if i == 0 {
				l = bold + l + reset
			}
			lines = append(lines, l)
		}
		add("")
	}

	old := map[string][2]uint64{}
	if prev != nil {
		for _, q := range prev.queues.Queues {
			old[q.Name] = [2]uint64{q.Enqueued, q.Delivered}
		}
	}
	var rows [][]string
	for _, q := range s.queues.Queues {
		o, ok := old[q.Name]
		rows = append(rows, []string{q.Name, fmt.Sprint(q.Messages), fmt.Sprint(q.Ready), fmt.Sprint(q.InFlight), fmt.Sprint(q.Consumers),
			rate(q.Enqueued, o[0], secs, ok), rate(q.Delivered, o[1], secs, ok), humanAge(q.OldestAgeSec), fmt.Sprint(q.DLQDepth)})
	}
	if len(rows) == 0 {
		rows = append(rows, []string{"(no queues)"})
	}
	table([]string{"QUEUE", "MESSAGES", "READY", "IN-FLIGHT", "CONSUMERS", "IN/s", "OUT/s", "OLDEST", "DLQ"}, rows)

	old = map[string][2]uint64{}
	if prev != nil {
		for _, t := range prev.topics.Topics {
			old[t.Name] = [2]uint64{t.In, t.Out}
		}
	}
	rows = nil
	for _, t := range s.topics.Topics {
		o, ok := old[t.Name]
		rows = append(rows, []string{t.Name, fmt.Sprint(t.Subscribers), rate(t.In, o[0], secs, ok), rate(t.Out, o[1], secs, ok), fmt.Sprint(t.Dropped)})
	}
	if len(rows) == 0 {
		rows = append(rows, []string{"(no topics)"})
	}
	table([]string{"TOPIC", "SUBSCRIBERS", "IN/s", "OUT/s", "DROPPED"}, rows)

	old = map[string][2]uint64{}
	if prev != nil {
		for _, c := range prev.channels.Channels {
			old[c.Name] = [2]uint64{c.Messages, c.Datagrams}
		}
	}
	rows = nil
	for _, c := range s.channels.Channels {
		o, ok := old[c.Name]
		rows = append(rows, []string{c.Name, c.Group, rate(c.Messages, o[0], secs, ok), rate(c.Datagrams, o[1], secs, ok), fmt.Sprint(c.Repairs), fmt.Sprint(c.NAKs), fmt.Sprint(c.Losses)})
	}
	if len(rows) == 0 {
		rows = append(rows, []string{"(no multicast channels)"})
	}
	table([]string{"CHANNEL", "GROUP", "MSG/s", "DGRAM/s", "REPAIRS", "NAKS", "LOSSES"}, rows)

	if height > 0 && len(lines) > height-1 {
		lines = append(lines[:height-2], fmt.Sprintf("… %d more lines: enlarge the terminal", len(lines)-(height-2)))
	}
	for _, l := range lines {
		if width > 0 && len([]rune(l)) > width && !strings.Contains(l, "\x1b") {
			l = string([]rune(l)[:width])
		}
		w.WriteString(l)
		w.WriteString(nl)
	}
}
