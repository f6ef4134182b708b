package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/multicast"
)

func listenCommand() *cli.Command {
	return &cli.Command{
		Name:  "listen",
		Usage: "print the messages of a multicast channel, one per line",
		Description: `Joins a Herald multicast channel on an interface and prints each message as
"topic<TAB>body" (a newline is added unless the body ends with one). Lost messages that
cannot be repaired are never silent: they print as

  #GAP<TAB>topic<TAB>from-to<TAB>reason       (reason: expired, gone, session-restart, slow-consumer)

and a sender restart as "#SESSION<TAB>old<TAB>new" (hex session ids). On a channel that
carries a stream (/stream/NAME), a gap is followed by how to read the lost offsets back
over STOMP:

  #CATCHUP<TAB>/stream/NAME<TAB>from-to<TAB>herald receive /stream/NAME --offset FROM --count N

With --json, every line is one JSON object: {"topic","stream","seq","headers","body"} for a
message (plus "body_base64" when the body is not UTF-8, "repaired":true for a repair),
{"gap":{...}} for a gap, {"catchup":{...}} for a catch-up hint and {"session":{...}} for a
restart. The formats are specified in
docs/multicast-protocol.md.

With --key-file, every datagram must carry a valid HMAC made with that key: the file's
bytes with every trailing CR and LF byte removed (nothing else: spaces count), as heraldd
reads key_file. Others are dropped, counted (--stats) and logged at most every 10 s.
On a channel with seal = true, add --seal: datagrams are then opened with the key (and
unsealed ones refused). During a key rotation, --next-key-file and --next-key-id name the
new key: both are accepted, and the old one for 10 s more once the sender uses the new one.
Without a key, sealed datagrams are only counted (sealed, in --stats).

Without a key, a host on the LAN can inject messages, but not take the channel away:
datagrams far ahead of the window, of another session while the current one is live, or
of the current session from another address are ignored, counted and logged.

The listener runs on one thread (GOMAXPROCS=1) unless GOMAXPROCS is set in the environment
or --serve is given: a receiver is one pipeline, and handing each message between two threads
cost more time than it saved.

With --late-join N (or --late-join-age DURATION), a listener started while the channel is
running asks the sender for the recent messages of its topics still in the sender's
retransmit window and prints them first, in order, then the live ones with no gap and no
duplicate between the two: a dashboard starts full. What cannot be repaired prints as #GAP.
A sender older than protocol revision 4 does not answer: after 1 s (2 s with the dashboard
profile) the listener goes on with the live messages only (history-unanswered in --stats).

With --serve ADDR, the listener also re-serves the channel on this host, read-only: the
appliance's dashboard page at / (gaps listed on it), STOMP over WebSocket at /stomp (SUBSCRIBE to
/topic/PATTERN; a gap is a MESSAGE frame with gap-from, gap-to and gap-reason headers and no
body; SEND gets an ERROR) and server-sent events at /events?topic=PATTERN[&format=json] (a gap
is an event of type "gap"). A wall-screen PC receives the channel once from the LAN and serves
any number of local browsers. It listens on 127.0.0.1 unless ADDR names a host; pages of
another origin are refused unless --serve-allow-origin names them. Each client may have at most
--serve-client-buffer bytes waiting (default 4 MiB): a slower one is dropped with an error.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "group", Required: true, Usage: "multicast `ADDR:PORT` of the channel, e.g. 239.255.0.1:7400"},
			&cli.StringFlag{Name: "interface", Aliases: []string{"i"}, Usage: "`IFACE` to join on (default: the interface of the route to the group)"},
			&cli.StringSliceFlag{Name: "topic", Aliases: []string{"t"}, Usage: "only topics matching `PATTERN` ('*' one segment, '>' the rest); repeatable"},
			&cli.StringFlag{Name: "key-file", Usage: "HMAC key `FILE`: drop datagrams not signed with it"},
			&cli.IntFlag{Name: "key-id", Value: 0, Usage: "key id the sender uses with that key"},
			&cli.BoolFlag{Name: "seal", Usage: "the channel is sealed (seal = true): open datagrams with the key, refuse unsealed ones"},
			&cli.StringFlag{Name: "next-key-file", Usage: "key rotation: the new key `FILE`, accepted besides --key-file"},
			&cli.IntFlag{Name: "next-key-id", Value: 0, Usage: "key id of the new key (not --key-id's)"},
			&cli.StringFlag{Name: "profile", Value: string(multicast.ProfileLowLatency), Usage: "recovery timing: low-latency or dashboard"},
			&cli.StringFlag{Name: "mode", Value: "ordered", Usage: "ordered (hold back until repaired) or skip (print at once, repairs later)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per line"},
			&cli.BoolFlag{Name: "timestamps", Usage: "with --json, add \"time_ns\" to each message: when it was printed (Unix nanoseconds), to measure latency against a send time"},
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Usage: "exit after `N` messages (0: never)"},
			&cli.BoolFlag{Name: "stats", Usage: "print the receiver's counters to stderr on exit (one JSON object with --json)"},
			&cli.DurationFlag{Name: "session-timeout", Value: multicast.DefaultSessionTimeout,
				Usage: "without a key, follow a new sender session only after the current one has been silent this long"},
			&cli.IntFlag{Name: "late-join", Usage: "joining late, first print the last `N` messages of each topic still in the sender's window (repaired like any loss)"},
			&cli.StringFlag{Name: "serve", Usage: "re-serve the channel at `ADDR` ([HOST]:PORT, on 127.0.0.1 without a host): the dashboard page at /, STOMP over WebSocket at /stomp (read-only), server-sent events at /events"},
			&cli.IntFlag{Name: "serve-client-buffer", Value: defaultServeClientBuffer, Usage: "with --serve, the most `BYTES` waiting for one client; a client that lets more pile up is dropped with an error"},
			&cli.IntFlag{Name: "serve-max-clients", Value: defaultServeMaxClients, Usage: "with --serve, the most clients served at once"},
			&cli.StringSliceFlag{Name: "serve-allow-origin", Usage: "with --serve, a web page `ORIGIN` (scheme://host[:port], or *) allowed besides the server's own; repeatable"},
			&cli.DurationFlag{Name: "late-join-age", Usage: "joining late, first print the messages of each topic sent within `DURATION` still in the sender's window (with --late-join: the last N of those)"},
		},
		Action: runListen,
	}
}

func runListen(cCtx *cli.Context) error {
	const usage = "listen --group ADDR:PORT [--interface IFACE] [--topic PATTERN] [--key-file F] [--json] [--count N] [--late-join N]"
	if err := checkArgs(cCtx, 0, 0, usage); err != nil {
		return err
	}
	cfg := multicast.ReceiverConfig{
		Group:     cCtx.String("group"),
		Interface: cCtx.String("interface"),
		Profile:   multicast.Profile(cCtx.String("profile")),
		Topics:    cCtx.StringSlice("topic"),
		KeyID:     uint8(cCtx.Int("key-id")),
		Logger:    slog.New(slog.NewTextHandler(cCtx.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	switch cCtx.String("mode") {
	case "ordered":
		cfg.Mode = multicast.Ordered
	case "skip":
		cfg.Mode = multicast.Skip
	default:
		return usageErrorf("--mode %q: want ordered or skip", cCtx.String("mode"))
	}
	if id := cCtx.Int("key-id"); id < 0 || id > 255 {
		return usageErrorf("--key-id %d: want 0 to 255", id)
	}
	if id := cCtx.Int("next-key-id"); id < 0 || id > 255 {
		return usageErrorf("--next-key-id %d: want 0 to 255", id)
	}
	cfg.Seal, cfg.NextKeyID = cCtx.Bool("seal"), uint8(cCtx.Int("next-key-id"))
	if (cfg.Seal || cCtx.String("next-key-file") != "") && cCtx.String("key-file") == "" {
		return usageErrorf("--seal and --next-key-file need --key-file (the channel's key)")
	}
	if f := cCtx.String("next-key-file"); f != "" {
		key, err := readKeyFile("--next-key-file", f)
		if err != nil {
			return err
		}
		cfg.NextKey = key
	}
	if cCtx.Bool("timestamps") && !cCtx.Bool("json") {
		return usageErrorf("--timestamps needs --json (it adds the field time_ns)")
	}
	count := cCtx.Int("count")
	if count < 0 {
		return usageErrorf("--count must not be negative")
	}
	if n := cCtx.Int("late-join"); n < 0 {
		return usageErrorf("--late-join %d: want a count of messages per topic, 0 for none", n)
	} else {
		cfg.LateJoin = n
	}
	if d := cCtx.Duration("late-join-age"); d < 0 {
		return usageErrorf("--late-join-age %v: want a positive duration, e.g. 10m", d)
	} else {
		cfg.LateJoinAge = d
	}
	if d := cCtx.Duration("session-timeout"); d <= 0 {
		return usageErrorf("--session-timeout %v: want a positive duration, e.g. 3s", d)
	} else {
		cfg.SessionTimeout = d
	}
	if f := cCtx.String("key-file"); f != "" {
		key, err := readKeyFile("--key-file", f)
		if err != nil {
			return err
		}
		cfg.Key = key
	}
	r, err := multicast.NewReceiver(cfg)
	if err != nil {
		return usageErrorf("%v", err)
	}
	if n := listenProcs(os.Getenv("GOMAXPROCS"), cCtx.String("serve") != ""); n > 0 {
		setMaxProcs(n)
	}
	ctx, stop := signal.NotifyContext(cCtx.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := r.Open(ctx); err != nil {
		return fmt.Errorf("listen on %s: %w (try --interface, and check that the group is routed there)", cfg.Group, err)
	}
	defer r.Close()
	p := &listenPrinter{out: bufio.NewWriterSize(listenOutput(cCtx.App.Writer), 64<<10), json: cCtx.Bool("json"), stamp: cCtx.Bool("timestamps")}

	if a := cCtx.String("serve"); a != "" {
		if p.serve, err = listenServe(cCtx, a, cfg.Group); err != nil {
			return err
		}
		defer p.serve.close()
	}
	if p.json {
		p.enc = json.NewEncoder(p.out)
		p.enc.SetEscapeHTML(false)
	}
	err = p.loop(ctx, r, count)
	if ferr := p.out.Flush(); err == nil && ferr != nil {
		err = stdoutErr(ferr)
	}
	if cCtx.Bool("stats") {
		writeListenStats(cCtx.App.ErrWriter, r.Stats(), cCtx.Bool("json"))
	}
	return err
}

// writeListenStats prints the receiver's counters: one line of "name value"
// pairs, or with asJSON one JSON object of the same counters (names with
// underscores: {"datagrams": N, ..., "streams_evicted": N}).
func writeListenStats(w io.Writer, st multicast.ReceiverStats, asJSON bool) {
	counters := []struct {
		name string
		v    uint64
	}{
		{"datagrams", st.Datagrams}, {"messages", st.Messages}, {"gaps", st.Gaps}, {"gap-messages", st.GapMessages},
		{"naks", st.NAKs}, {"repairs", st.Repairs}, {"kernel-drops", st.KernelDrops}, {"auth-failures", st.AuthFailures},
		{"rcvbuf", uint64(st.RcvBuf)}, {"malformed", st.Malformed}, {"ahead", st.Ahead}, {"foreign-source", st.ForeignSource},
		{"other-session", st.OtherSession}, {"overflow", st.Overflow}, {"slow-consumer", st.SlowConsumerDrops},
		{"reassembled", st.Reassembled}, {"forged-fragments", st.ForgedFragments}, {"sealed", st.Sealed},
		{"fragments", st.Fragments}, {"fragments-dropped", st.ReassemblyDrops}, {"incomplete", uint64(st.Incomplete)},
		{"history-requests", st.HistoryRequests}, {"history-answers", st.HistoryAnswers}, {"history-repairs", st.HistoryRepairs},
		{"history-unanswered", st.HistoryUnanswered}, {"window-expired", st.WindowExpired}, {"budget-expired", st.BudgetExpired},
		{"catalog-conflicts", st.CatalogConflicts}, {"streams-evicted", st.StreamsEvicted},
	}
	var b []byte
	if asJSON {
		b = append(b, '{')
		for i, c := range counters {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, strings.ReplaceAll(c.name, "-", "_"))
			b = append(b, ':')
			b = strconv.AppendUint(b, c.v, 10)
		}
		b = append(b, '}', '\n')
		w.Write(b)
		return
	}
	for i, c := range counters {
		if c.name == "gap-messages" {
			// "gaps N (M messages)", as the line has always read
			b = append(b, " ("...)
			b = strconv.AppendUint(b, c.v, 10)
			b = append(b, " messages)"...)
			continue
		}
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, c.name...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, c.v, 10)
	}
	b = append(b, '\n')
	w.Write(b)
}

// listenProcs is how many threads may run Go code at once in herald listen, 0 to leave the
// runtime's choice: one, unless the environment sets GOMAXPROCS or --serve has web clients to
// serve. A receiver is one pipeline (socket, core, output) with nothing to do in parallel;
// with more threads, every message handed from the reading goroutine to the printing one woke
// another thread, which cost more than it saved: with one, latency at 10,000 messages/s was
// about 0.6x and the rate flat out about 1.05x (docs/benchmarks.md). A write to a full stdout
// still blocks only the printing goroutine (a blocked system call gives up its thread).
func listenProcs(env string, serve bool) int {
	if env != "" || serve {
		return 0
	}
	return 1
}

// setMaxProcs is runtime.GOMAXPROCS (tests, which run herald listen in their own process, keep
// theirs).
var setMaxProcs = func(n int) { runtime.GOMAXPROCS(n) }

// readKeyFile reads an HMAC key as docs/multicast-protocol.md section 6 says: the file's bytes
// with every trailing CR and LF byte removed.
// flag names the option that gave it (--key-file, --next-key-file).
func readKeyFile(flag, f string) ([]byte, error) {
	key, err := os.ReadFile(f)
	if err != nil {
		why := err
		var pe *fs.PathError
		if errors.As(err, &pe) {
			why = pe.Err
		}
		return nil, &exitError{code: exitNoInput, err: fmt.Errorf(
			"%s %s: cannot read it (%w); check the path, and that this user may read the file (a key file is kept 0640, readable by its group)", flag, f, why)}
	}
	key = bytes.TrimRight(key, "\r\n")
	if len(key) == 0 {
		return nil, usageErrorf("%s %s is empty (or only line ends)", flag, f)
	}
	return key, nil
}

type listenPrinter struct {
	out   *bufio.Writer
	json  bool
	stamp bool // --timestamps
	enc   *json.Encoder
	serve *serveHub // --serve: every event goes to the local clients too
}

func (p *listenPrinter) loop(ctx context.Context, r *multicast.Receiver, count int) error {
	for n := 0; count == 0 || n < count; {
		select {
		case e, ok := <-r.Events():
			if !ok {
				return nil
			}
			if p.serve != nil {
				p.serve.publish(e)
			}
			if err := p.print(e); err != nil {
				return err
			}
			if _, ok := e.(multicast.Message); ok {
				n++
			}
			if len(r.Events()) == 0 {
				if err := p.out.Flush(); err != nil {
					return stdoutErr(err)
				}
			}
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

type jsonMulticastMessage struct {
	Topic      string            `json:"topic"`
	Stream     uint32            `json:"stream"`
	Seq        uint64            `json:"seq"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
	BodyBase64 string            `json:"body_base64,omitempty"`
	Repaired   bool              `json:"repaired,omitempty"`
	TimeNs     int64             `json:"time_ns,omitempty"` // --timestamps
}

type jsonGap struct {
	Gap struct {
		Topic  string `json:"topic"`
		Stream uint32 `json:"stream"`
		From   uint64 `json:"from"`
		To     uint64 `json:"to"`
		Reason string `json:"reason"`
	} `json:"gap"`
}

type jsonSession struct {
	Session struct {
		Old string `json:"old"`
		New string `json:"new"`
	} `json:"session"`
}

func (p *listenPrinter) print(e multicast.Event) error {
	if err := streamCatchUp(p, e); err != nil { // listen_stream.go
		return err
	}
	var err error
	switch e := e.(type) {
	case multicast.Message:
		if p.json {
			jm := jsonMulticastMessage{Topic: e.Topic, Stream: e.Stream, Seq: e.StreamSeq, Body: string(e.Body),
				Repaired: e.Repaired, Headers: make(map[string]string, len(e.Headers))}
			for _, h := range e.Headers {
				if _, dup := jm.Headers[h.Key]; !dup {
					jm.Headers[h.Key] = h.Value
				}
			}
			if !utf8.Valid(e.Body) {
				jm.BodyBase64 = base64.StdEncoding.EncodeToString(e.Body)
			}
			if p.stamp {
				jm.TimeNs = time.Now().UnixNano()
			}
			err = p.enc.Encode(&jm)
		} else {
			p.out.WriteString(e.Topic)
			p.out.WriteByte('\t')
			p.out.Write(e.Body)
			if len(e.Body) == 0 || e.Body[len(e.Body)-1] != '\n' {
				err = p.out.WriteByte('\n')
			}
		}
	case multicast.Gap:
		if p.json {
			var g jsonGap
			g.Gap.Topic, g.Gap.Stream, g.Gap.From, g.Gap.To, g.Gap.Reason = e.Topic, e.Stream, e.From, e.To, e.Reason.String()
			err = p.enc.Encode(&g)
		} else {
			_, err = fmt.Fprintf(p.out, "#GAP\t%s\t%d-%d\t%s\n", e.Topic, e.From, e.To, e.Reason)
		}
	case multicast.SessionChange:
		if p.json {
			var s jsonSession
			s.Session.Old, s.Session.New = fmt.Sprintf("%016x", e.Old), fmt.Sprintf("%016x", e.New)
			err = p.enc.Encode(&s)
		} else {
			_, err = fmt.Fprintf(p.out, "#SESSION\t%016x\t%016x\n", e.Old, e.New)
		}
	}
	if err != nil {
		return stdoutErr(err)
	}
	return nil
}
