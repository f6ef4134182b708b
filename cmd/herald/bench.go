package main

// herald bench: a load generator for any STOMP 1.2 server (Herald, RabbitMQ's
// STOMP plugin, ActiveMQ), plus a raw NATS core client for topic latency
// comparisons. See docs/benchmarks.md.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// Headers carried by topic benchmark messages.
const (
	benchTSHeader  = "bench-ts"  // send time, Unix nanoseconds
	benchSeqHeader = "bench-seq" // 0-based sequence number of the publisher
)

// DefaultNATSServer is used by bench topic --nats when no --server is given.
const DefaultNATSServer = "127.0.0.1:4222"

func benchCommand() *cli.Command {
	common := []cli.Flag{
		&cli.IntFlag{Name: "size", Value: 1024, Usage: "message body size in `bytes`"},
		&cli.DurationFlag{Name: "duration", Value: 10 * time.Second, Usage: "measure for this long"},
		&cli.DurationFlag{Name: "warmup", Value: 0, Usage: "run this long before measuring (not counted)"},
		&cli.StringFlag{Name: "vhost", Usage: "CONNECT host header (RabbitMQ: the virtual host, e.g. /); default: the server's host"},
		&cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object"},
	}
	return &cli.Command{
		Name:  "bench",
		Usage: "load generator for any STOMP 1.2 server (Herald, RabbitMQ, ActiveMQ) and NATS core",
		Description: `Measures a STOMP server from the outside, the same way for every server:
  herald bench send    durable SENDs with receipts: throughput and receipt latency
  herald bench topic   one paced publisher, K subscribers: end-to-end latency and losses
  herald bench drain   fill a queue, then C consumers ACK every message: drain rate
                       (--jetstream: the same against a NATS JetStream pull consumer)
The target is the global --server (and --login/--passcode). See docs/benchmarks.md.
On a terminal, the run's phase and progress show on stderr (not with --json).`,
		Action: func(cCtx *cli.Context) error {
			if cCtx.Args().Present() {
				return usageErrorf("unknown bench command %q; want send, topic or drain", cCtx.Args().First())
			}
			cli.ShowSubcommandHelp(cCtx)
			return usageErrorf("no bench command given; want send, topic or drain")
		},
		Subcommands: []*cli.Command{
			{
				Name:  "send",
				Usage: "N producers each keep W SENDs with receipts outstanding",
				Description: `Each of --producers connections sends messages of --size bytes to --dest,
keeping --window of them awaiting their RECEIPT (pipelined). Reports messages
and MB per second confirmed within --duration, and the receipt latency
(time from the SEND being handed to the client to its RECEIPT arriving).
For RabbitMQ use --persistent (persistent:true) and a /queue/ destination:
a RECEIPT then stands for a publisher confirm of a durable message.

Without --dest, the run sends to a queue of its own, /queue/bench.RUNID, and
removes it at the end: it drains the messages (a consumer with ack auto),
then deletes the empty queue through the admin socket (--socket) when that
daemon's socket is at hand; otherwise it says how to delete it. With --dest,
the queue is yours: the messages stay, and it says how many.`,
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "dest", Usage: "destination (default: a new queue /queue/bench.RUNID, removed at the end)"},
					&cli.StringFlag{Name: "socket", EnvVars: []string{"HERALD_SOCKET"}, Usage: "admin socket `PATH` used to delete the run's queue (default as for the admin commands)"},
					&cli.IntFlag{Name: "producers", Value: 4, Usage: "connections sending in parallel"},
					&cli.IntFlag{Name: "window", Value: 64, Usage: "receipts outstanding per producer"},
					&cli.BoolFlag{Name: "persistent", Usage: "add the header persistent:true (RabbitMQ, ActiveMQ)"},
					&cli.BoolFlag{Name: "jetstream", Usage: "publish to a NATS JetStream file stream of the run's own (default server 127.0.0.1:4222), a JetStream ack standing for the RECEIPT"},
				}, common...),
				Action: runBenchSend,
			},
			{
				Name:  "topic",
				Usage: "one publisher paced at R msg/s, K subscribers: end-to-end latency",
				Description: `--subscribers connections subscribe to --dest (ack auto), then one more
connection publishes --rate messages per second (without receipts), each
carrying its send time. Reports the publisher's rate, each subscriber's
delivered rate, the end-to-end latency over all subscribers and the messages
lost (sent in the measured window but never delivered).
With --nats, speaks NATS core's text protocol instead (default server
127.0.0.1:4222; the subject is --dest without /topic/, slashes made dots).`,
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "dest", Value: "/topic/bench", Usage: "destination (NATS: subject)"},
					&cli.IntFlag{Name: "subscribers", Value: 4, Usage: "subscriber connections"},
					&cli.Float64Flag{Name: "rate", Value: 1000, Usage: "messages per second published"},
					&cli.DurationFlag{Name: "tick", Value: time.Millisecond, Usage: "pacing interval: each tick sends the messages then due"},
					&cli.DurationFlag{Name: "drain", Value: 2 * time.Second, Usage: "after the run, wait this long at most for messages in flight"},
					&cli.BoolFlag{Name: "nats", Usage: "speak NATS core (no STOMP) to --server"},
				}, common...),
				Action: runBenchTopic,
			},
			benchDrainCommand(common),
		},
	}
}

// ---- histogram -------------------------------------------------------------

// histogram is an HDR-style log-linear histogram of durations in nanoseconds:
// 64 linear sub-buckets per power of two, so any recorded value is reported
// within 1/64 (1.6%) of its true value. The zero value is ready to use; it is
// not safe for concurrent use (merge per-goroutine histograms instead).
type histogram struct {
	counts [64 * 60]uint64
	n      uint64
	max    int64
	min    int64
	sum    float64
}

const histSub = 64

func histIndex(v int64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 7 // v>>e in [64,128)
	return (e+1)*histSub + int(v>>e) - histSub
}

// histValue is the midpoint of bucket i.
func histValue(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	e := i/histSub - 1
	m := int64(i%histSub + histSub)
	return m<<e + (int64(1)<<e)/2
}

func (h *histogram) record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.n++
	h.sum += float64(v)
	if v > h.max {
		h.max = v
	}
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// quantile returns the value at quantile q (0..1); 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			v := histValue(i)
			if v > h.max {
				v = h.max
			}
			if v < h.min {
				v = h.min
			}
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}

// latencyJSON is a latency summary in microseconds.
type latencyJSON struct {
	Count uint64  `json:"count"`
	Min   float64 `json:"min_us"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
}

// benchGCPercent is the GOGC of a load generator run (benchGC).
const benchGCPercent = 400

// benchGC makes the load generator collect less often: its live heap is a
// few MiB (the MESSAGEs in flight) while it allocates a body per message,
// so with Go's GOGC of 100 it collected several times a second, and the
// marking (a quarter of its CPU in a drain) ran on the cores the servers
// under test share with it. GOGC 400, the cap heraldd's own tuner uses,
// unless GOGC is set in the environment. The same for every target.
func benchGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(benchGCPercent)
	}
}

func benchUS(d time.Duration) float64 { return math.Round(float64(d)/100) / 10 }

func (h *histogram) summary() latencyJSON {
	s := latencyJSON{Count: h.n}
	if h.n == 0 {
		return s
	}
	s.Min = benchUS(time.Duration(h.min))
	s.Mean = benchUS(time.Duration(h.sum / float64(h.n)))
	s.P50 = benchUS(h.quantile(0.50))
	s.P90 = benchUS(h.quantile(0.90))
	s.P99 = benchUS(h.quantile(0.99))
	s.P999 = benchUS(h.quantile(0.999))
	s.Max = benchUS(time.Duration(h.max))
	return s
}

// ---- common ----------------------------------------------------------------

type benchFlags struct {
	server, dest string
	size         int
	duration     time.Duration
	warmup       time.Duration
	jsonOut      bool
}

func readBenchFlags(cCtx *cli.Context) (benchFlags, error) {
	f := benchFlags{
		server:   cCtx.String("server"),
		dest:     cCtx.String("dest"),
		size:     cCtx.Int("size"),
		duration: cCtx.Duration("duration"),
		warmup:   cCtx.Duration("warmup"),
		jsonOut:  cCtx.Bool("json"),
	}
	if err := checkArgs(cCtx, 0, 0, "bench "+cCtx.Command.Name+" [flags]"); err != nil {
		return f, err
	}
	switch {
	case f.dest == "" && (cCtx.IsSet("dest") || cCtx.Command.Name == "topic"):
		return f, usageErrorf("--dest must not be empty")
	case f.size < 0 || f.size > 64<<20:
		return f, usageErrorf("--size %d: want 0 to 64 MiB", f.size)
	case f.duration <= 0:
		return f, usageErrorf("--duration must be positive")
	case f.warmup < 0:
		return f, usageErrorf("--warmup must not be negative")
	}
	return f, nil
}

// benchProgress shows, when standard error is a terminal and the result is
// not --json, one line that status renders: at once, then every half
// second. The returned stop clears it (call it before printing anything).
func benchProgress(cCtx *cli.Context, jsonOut bool, status func() string) (stop func()) {
	w := cCtx.App.ErrWriter
	if jsonOut || !isTerminal(w) {
		return func() {}
	}
	fmt.Fprintf(w, "\r\x1b[Kbench: %s", status())
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprint(w, "\r\x1b[K")
				return
			case <-t.C:
				fmt.Fprintf(w, "\r\x1b[Kbench: %s", status())
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

// benchClock renders the phase of a timed run: warming up, then measuring.
func benchClock(start time.Time, warmup, duration time.Duration) func() string {
	return func() string {
		el := time.Since(start)
		if el < warmup {
			return fmt.Sprintf("warming up, %s of %s", el.Truncate(time.Second), warmup)
		}
		return fmt.Sprintf("measuring, %s of %s", min(el-warmup, duration).Truncate(time.Second), duration)
	}
}

// benchDial is dial with the bench options: a virtual host and a large
// subscription buffer, so that a subscriber never stalls the reader.
func benchDial(ctx context.Context, cCtx *cli.Context) (*client.Conn, error) {
	server := cCtx.String("server")
	c, err := client.Dial(ctx, server, client.Options{
		Login:              cCtx.String("login"),
		Passcode:           cCtx.String("passcode"),
		Host:               cCtx.String("vhost"),
		DialTimeout:        cCtx.Duration("connect-timeout"),
		SubscriptionBuffer: 1 << 16,
	})
	if err == nil {
		return c, nil
	}
	var se *client.ServerError
	if errors.As(err, &se) {
		return nil, &exitError{code: exitOther, err: fmt.Errorf(
			"server %s refused the connection: %s; check --login/--passcode (RabbitMQ: also --vhost /)",
			server, strings.TrimPrefix(se.Error(), "stomp server error: "))}
	}
	return nil, &exitError{code: exitUnavailable, err: fmt.Errorf(
		"cannot reach the STOMP server at %s: %w; start it, or point --server at it", server, unwrapClient(err))}
}

func benchBody(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

func benchRound1(x float64) float64 { return math.Round(x*10) / 10 }

func benchMS(us float64) string { return strconv.FormatFloat(us/1000, 'f', 3, 64) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

// ---- bench send ------------------------------------------------------------

type sendResult struct {
	Mode       string      `json:"mode"` // "send"
	Server     string      `json:"server"`
	Dest       string      `json:"dest"`
	Producers  int         `json:"producers"`
	Window     int         `json:"window"`
	Size       int         `json:"size"`
	Persistent bool        `json:"persistent"`
	DurationS  float64     `json:"duration_s"`
	Messages   uint64      `json:"messages"` // receipts received in the window
	MsgsPerS   float64     `json:"msgs_per_s"`
	MBPerS     float64     `json:"mb_per_s"`
	Latency    latencyJSON `json:"receipt_latency"`
	Errors     uint64      `json:"errors"`
	FirstError string      `json:"first_error,omitempty"`
	Cleanup    benchClean  `json:"cleanup"`
}

// benchClean is what the run did to remove its messages.
type benchClean struct {
	Stored       uint64 `json:"stored"`        // every SEND confirmed, warm-up and tail included
	Drained      uint64 `json:"drained"`       // messages consumed from the run's own queue
	QueueDeleted bool   `json:"queue_deleted"` // the empty queue deleted through the admin socket
	Note         string `json:"note"`          // what was done, or what is left and how to remove it
}

type inflight struct {
	at time.Time
	ch <-chan client.Result
}

func runBenchSend(cCtx *cli.Context) error {
	benchGC()
	bf, err := readBenchFlags(cCtx)
	if err != nil {
		return err
	}
	producers, window := cCtx.Int("producers"), cCtx.Int("window")
	if producers < 1 || window < 1 {
		return usageErrorf("--producers and --window must be at least 1")
	}
	var hdrs []stomp.Header
	if cCtx.Bool("persistent") {
		hdrs = append(hdrs, stomp.Header{Key: "persistent", Value: "true"})
	}
	if cCtx.Bool("jetstream") {
		return runBenchSendJetStream(cCtx, bf, producers, window)
	}
	own := bf.dest == ""
	if own {
		bf.dest = "/queue/bench." + benchRunID()
	}
	ctx := cCtx.Context
	conns := make([]*client.Conn, producers)
	for i := range conns {
		c, err := benchDial(ctx, cCtx)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return err
		}
		conns[i] = c
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	payload := benchBody(bf.size)
	start := time.Now()
	measureFrom := start.Add(bf.warmup)
	measureTo := measureFrom.Add(bf.duration)
	stopProgress := benchProgress(cCtx, bf.jsonOut, benchClock(start, bf.warmup, bf.duration))
	defer stopProgress()

	type prodResult struct {
		h        histogram
		n        uint64
		stored   uint64 // every receipt, measured or not
		errs     uint64
		firstErr error
	}
	results := make([]*prodResult, producers)
	var wg sync.WaitGroup
	for i, c := range conns {
		r := &prodResult{}
		results[i] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				r.errs++
				if r.firstErr == nil {
					r.firstErr = err
				}
			}
			q := make([]inflight, 0, window)
			timeout := time.NewTimer(time.Hour)
			defer timeout.Stop()
			for {
				now := time.Now()
				for len(q) < window && now.Before(measureTo) && c.Err() == nil {
					ch, err := c.SendAsync(bf.dest, payload, hdrs...)
					if err != nil {
						fail(err)
						break
					}
					q = append(q, inflight{at: now, ch: ch})
					now = time.Now()
				}
				if len(q) == 0 {
					return // done, or the connection failed
				}
				p := q[0]
				q = q[1:]
				timeout.Reset(30 * time.Second)
				select {
				case res := <-p.ch:
					done := time.Now()
					if res.Err != nil {
						fail(res.Err)
						continue
					}
					r.stored++
					if !p.at.Before(measureFrom) && !done.After(measureTo) {
						r.n++
						r.h.record(done.Sub(p.at))
					}
				case <-timeout.C:
					fail(fmt.Errorf("no receipt within 30s"))
					c.Close() // fails the rest of q at once
				}
			}
		}()
	}
	wg.Wait()
	stopProgress()

	res := sendResult{
		Mode: "send", Server: bf.server, Dest: bf.dest, Producers: producers, Window: window,
		Size: bf.size, Persistent: cCtx.Bool("persistent"), DurationS: bf.duration.Seconds(),
	}
	var h histogram
	for _, r := range results {
		h.merge(&r.h)
		res.Messages += r.n
		res.Cleanup.Stored += r.stored
		res.Errors += r.errs
		if r.firstErr != nil && res.FirstError == "" {
			res.FirstError = unwrapClient(r.firstErr).Error()
		}
	}
	res.MsgsPerS = benchRound1(float64(res.Messages) / bf.duration.Seconds())
	res.MBPerS = math.Round(res.MsgsPerS*float64(bf.size)/1e6*100) / 100
	res.Latency = h.summary()
	for _, c := range conns {
		c.Close()
	}
	benchCleanup(ctx, cCtx, &res, own)
	fmt.Fprintf(cCtx.App.ErrWriter, "bench: %s\n", res.Cleanup.Note)

	out := cCtx.App.Writer
	if bf.jsonOut {
		if err := writeJSON(out, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "server\t%s\n", res.Server)
		fmt.Fprintf(tw, "dest\t%s (persistent: %v)\n", res.Dest, res.Persistent)
		fmt.Fprintf(tw, "producers x window\t%d x %d, %d B messages, %s\n", producers, window, bf.size, bf.duration)
		fmt.Fprintf(tw, "confirmed\t%d messages\n", res.Messages)
		fmt.Fprintf(tw, "throughput\t%.0f msg/s, %.2f MB/s\n", res.MsgsPerS, res.MBPerS)
		l := res.Latency
		fmt.Fprintf(tw, "receipt latency (ms)\tp50 %s  p99 %s  p999 %s  max %s\n", benchMS(l.P50), benchMS(l.P99), benchMS(l.P999), benchMS(l.Max))
		fmt.Fprintf(tw, "errors\t%d\n", res.Errors)
		if res.FirstError != "" {
			fmt.Fprintf(tw, "first error\t%s\n", res.FirstError)
		}
		tw.Flush()
	}
	if res.Messages == 0 {
		if res.FirstError != "" {
			return &exitError{code: exitOther, err: fmt.Errorf("no SEND was confirmed: %s", res.FirstError)}
		}
		return &exitError{code: exitOther, err: fmt.Errorf("no SEND was confirmed within %s", bf.duration)}
	}
	return nil
}

// benchRunID names a run's own queue.
func benchRunID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// benchIdle is how long the drain waits for one more message once it has
// the confirmed ones (SENDs whose receipt failed may have been stored too),
// and benchStall how long it waits for a message before giving up.
const (
	benchIdle  = 300 * time.Millisecond
	benchStall = 10 * time.Second
)

// benchCleanup removes the messages of a run: with its own queue, drains
// it and deletes it when the admin socket reaches the same daemon; with a
// --dest given, only says what is left there.
func benchCleanup(ctx context.Context, cCtx *cli.Context, res *sendResult, own bool) {
	cl := &res.Cleanup
	name, isQueue := strings.CutPrefix(res.Dest, "/queue/")
	if !own {
		if isQueue {
			cl.Note = fmt.Sprintf("left %d message(s) in %s (given with --dest, so not emptied); empty it with: herald queue purge --yes %s", cl.Stored, res.Dest, name)
		} else {
			cl.Note = fmt.Sprintf("sent %d message(s) to %s (a topic keeps none)", cl.Stored, res.Dest)
		}
		return
	}
	drained, err := benchDrain(ctx, cCtx, res.Dest, cl.Stored)
	cl.Drained = drained
	if err != nil {
		cl.Note = fmt.Sprintf("could not empty %s: %v (%d of %d message(s) drained); purge it with: herald queue purge --yes %s, then herald queue delete --yes %s",
			res.Dest, unwrapClient(err), drained, cl.Stored, name, name)
		return
	}
	benchDeleteEmpty(ctx, cCtx, name, cl)
}

// benchDeleteEmpty deletes the run's queue name through the admin socket
// when it is there and empty, and says in cl.Note what it did.
func benchDeleteEmpty(ctx context.Context, cCtx *cli.Context, name string, cl *benchClean) {
	dest, drained := "/queue/"+name, cl.Drained
	// The admin socket may belong to another daemon than --server: the
	// queue's random name tells. Delete it only if it is there and empty.
	sock := cCtx.String("socket")
	if sock == "" {
		sock = socketPath(cCtx)
	}
	ac := admin.NewClient(sock)
	defer ac.Close()
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	q, err := ac.Queue(actx, name)
	if err == nil && q.Messages == 0 {
		if _, err = ac.DeleteQueue(actx, name); err == nil {
			cl.QueueDeleted = true
			cl.Note = fmt.Sprintf("removed %s: drained its %d message(s) and deleted the queue", dest, drained)
			return
		}
	}
	why := "no admin socket of this daemon at " + sock
	if err != nil {
		var ae *admin.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			why = plain(err.Error())
		}
	} else if q.Messages != 0 {
		why = fmt.Sprintf("%d message(s) arrived meanwhile", q.Messages)
	}
	cl.Note = fmt.Sprintf("drained %s (%d message(s)); the empty queue remains (%s): delete it on the server with: herald queue delete --yes %s",
		dest, drained, why, name)
}

// benchDrain consumes dest (ack auto) until it has at least want messages
// and none more arrive for benchIdle.
func benchDrain(ctx context.Context, cCtx *cli.Context, dest string, want uint64) (uint64, error) {
	c, err := benchDial(ctx, cCtx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	sub, err := c.Subscribe(dest, "auto", stomp.Header{Key: "prefetch-count", Value: "1000"})
	if err != nil {
		return 0, err
	}
	var n uint64
	t := time.NewTimer(benchStall)
	defer t.Stop()
	for {
		select {
		case _, ok := <-sub.C():
			if !ok {
				<-c.Done()
				return n, c.Err()
			}
			n++
		case <-c.Done():
			return n, c.Err()
		case <-ctx.Done():
			return n, ctx.Err()
		case <-t.C:
			if n >= want {
				dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				// UNSUBSCRIBE with a receipt first: the server has removed
				// the consumer by then, so the queue can be deleted at once
				// (a DISCONNECT's receipt comes before the session's
				// subscriptions end).
				if err := sub.Unsubscribe(dctx); err != nil {
					return n, err
				}
				return n, c.Disconnect(dctx)
			}
			return n, fmt.Errorf("%d message(s) expected, none for %v", want, benchStall)
		}
		wait := benchStall
		if n >= want {
			wait = benchIdle
		}
		t.Reset(wait) // Go 1.23 timers: no stale tick to drain
	}
}

// ---- bench topic -----------------------------------------------------------

type topicResult struct {
	Mode        string      `json:"mode"`      // "topic"
	Transport   string      `json:"transport"` // "stomp" or "nats"
	Server      string      `json:"server"`
	Dest        string      `json:"dest"`
	Subscribers int         `json:"subscribers"`
	Rate        float64     `json:"rate"`
	Size        int         `json:"size"`
	DurationS   float64     `json:"duration_s"`
	Sent        uint64      `json:"sent"` // in the measured window
	SentPerS    float64     `json:"sent_per_s"`
	Delivered   []uint64    `json:"delivered"` // per subscriber, of the messages sent in the window
	DeliveredPS []float64   `json:"delivered_per_s"`
	MinDelivPS  float64     `json:"min_delivered_per_s"`
	Latency     latencyJSON `json:"latency"` // end to end, all subscribers
	Lost        uint64      `json:"lost"`    // sum over subscribers of sent - delivered
	OutOfOrder  uint64      `json:"out_of_order"`
	Errors      uint64      `json:"errors"`
	FirstError  string      `json:"first_error,omitempty"`
}

// topicSub is what one subscriber counts. The window is known by sequence
// numbers: the publisher stores the first and last sequence of the window.
type topicSub struct {
	h        histogram
	n        uint64 // delivered, sent in the window
	ooo      uint64
	lastSeq  int64
	seen     atomic.Int64 // highest sequence seen, for the drain
	err      error
	received uint64
}

// window marks which sequence numbers were sent in the measured window.
type seqWindow struct {
	first, last atomic.Int64 // -1 until known
}

func (w *seqWindow) in(seq int64) bool {
	f := w.first.Load()
	if f < 0 || seq < f {
		return false
	}
	l := w.last.Load()
	return l < 0 || seq <= l
}

func (s *topicSub) got(seq, ts int64, now time.Time, w *seqWindow) {
	s.received++
	if seq <= s.lastSeq {
		s.ooo++
	}
	s.lastSeq = seq
	if seq > s.seen.Load() {
		s.seen.Store(seq)
	}
	if w.in(seq) {
		s.n++
		s.h.record(now.Sub(time.Unix(0, ts)))
	}
}

// topicTransport abstracts STOMP and NATS for the topic benchmark.
type topicTransport interface {
	// subscribe opens a subscriber and runs its reader in a goroutine
	// calling got for each message until stop is closed or it fails.
	subscribe(ctx context.Context, s *topicSub, w *seqWindow, stop <-chan struct{}, wg *sync.WaitGroup) error
	// publisher returns a function that publishes one message.
	publisher(ctx context.Context) (pub func(seq int64) error, closeFn func(), err error)
}

func runBenchTopic(cCtx *cli.Context) error {
	benchGC()
	bf, err := readBenchFlags(cCtx)
	if err != nil {
		return err
	}
	k, rate, tick, drain := cCtx.Int("subscribers"), cCtx.Float64("rate"), cCtx.Duration("tick"), cCtx.Duration("drain")
	if k < 1 {
		return usageErrorf("--subscribers must be at least 1")
	}
	if rate <= 0 || tick <= 0 {
		return usageErrorf("--rate and --tick must be positive")
	}
	if bf.size < 16 && cCtx.Bool("nats") {
		bf.size = 16 // the NATS payload carries the timestamp and sequence
	}
	var tr topicTransport
	transport := "stomp"
	if cCtx.Bool("nats") {
		transport = "nats"
		if bf.server == DefaultServer && os.Getenv("HERALD_SERVER") == "" {
			bf.server = DefaultNATSServer
		}
		tr = &natsTransport{addr: bf.server, subject: natsSubject(bf.dest), size: bf.size, timeout: cCtx.Duration("connect-timeout")}
	} else {
		tr = &stompTransport{cCtx: cCtx, dest: bf.dest, payload: benchBody(bf.size)}
	}

	ctx := cCtx.Context
	subs := make([]*topicSub, k)
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	var w seqWindow
	w.first.Store(-1)
	w.last.Store(-1)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		rwg.Wait()
	}()
	for i := range subs {
		subs[i] = &topicSub{lastSeq: -1}
		subs[i].seen.Store(-1)
		if err := tr.subscribe(ctx, subs[i], &w, stop, &rwg); err != nil {
			return err
		}
	}
	pub, closePub, err := tr.publisher(ctx)
	if err != nil {
		return err
	}
	defer closePub()

	// Pace: every tick, send what is due since the start.
	start := time.Now()
	measureFrom := start.Add(bf.warmup)
	measureTo := measureFrom.Add(bf.duration)
	stopProgress := benchProgress(cCtx, bf.jsonOut, benchClock(start, bf.warmup, bf.duration))
	defer stopProgress()
	var seq int64
	var pubErr error
	t := time.NewTicker(tick)
	for pubErr == nil {
		now := time.Now()
		if !now.Before(measureTo) {
			break
		}
		if w.first.Load() < 0 && !now.Before(measureFrom) {
			w.first.Store(seq)
		}
		due := int64(now.Sub(start).Seconds() * rate)
		for ; seq < due; seq++ {
			// A server that pushes back (TCP flow control) makes sends block:
			// do not let the backlog run past the end of the window.
			if seq&63 == 0 && seq > 0 && !time.Now().Before(measureTo) {
				break
			}
			if err := pub(seq); err != nil {
				pubErr = err
				break
			}
		}
		<-t.C
	}
	t.Stop()
	if w.first.Load() < 0 {
		w.first.Store(seq)
	}
	w.last.Store(seq - 1)
	sent := uint64(seq - w.first.Load())

	// Wait for the last message to reach every live subscriber, or drain.
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) {
		all := true
		for _, s := range subs {
			if s.seen.Load() < seq-1 {
				all = false
			}
		}
		if all {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	closePub()
	rwg.Wait()
	stopProgress()

	res := topicResult{
		Mode: "topic", Transport: transport, Server: bf.server, Dest: bf.dest, Subscribers: k,
		Rate: rate, Size: bf.size, DurationS: bf.duration.Seconds(), Sent: sent,
		SentPerS: benchRound1(float64(sent) / bf.duration.Seconds()),
	}
	if pubErr != nil {
		res.Errors++
		res.FirstError = "publish: " + unwrapClient(pubErr).Error()
	}
	var h histogram
	res.MinDelivPS = math.Inf(1)
	for _, s := range subs {
		h.merge(&s.h)
		res.Delivered = append(res.Delivered, s.n)
		ps := benchRound1(float64(s.n) / bf.duration.Seconds())
		res.DeliveredPS = append(res.DeliveredPS, ps)
		res.MinDelivPS = math.Min(res.MinDelivPS, ps)
		if s.n < sent {
			res.Lost += sent - s.n
		}
		res.OutOfOrder += s.ooo
		if s.err != nil {
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = "subscriber: " + unwrapClient(s.err).Error()
			}
		}
	}
	res.Latency = h.summary()

	out := cCtx.App.Writer
	if bf.jsonOut {
		if err := writeJSON(out, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "server\t%s (%s)\n", res.Server, transport)
		fmt.Fprintf(tw, "dest\t%s, %d subscribers, %d B messages, %s\n", res.Dest, k, bf.size, bf.duration)
		fmt.Fprintf(tw, "published\t%d messages, %.0f msg/s (asked %.0f)\n", res.Sent, res.SentPerS, rate)
		ps := make([]string, len(res.DeliveredPS))
		for i, v := range res.DeliveredPS {
			ps[i] = strconv.FormatFloat(v, 'f', 0, 64)
		}
		fmt.Fprintf(tw, "delivered msg/s\t%s\n", strings.Join(ps, " "))
		l := res.Latency
		fmt.Fprintf(tw, "latency (ms)\tp50 %s  p99 %s  p999 %s  max %s\n", benchMS(l.P50), benchMS(l.P99), benchMS(l.P999), benchMS(l.Max))
		fmt.Fprintf(tw, "lost\t%d (out of order: %d)\n", res.Lost, res.OutOfOrder)
		fmt.Fprintf(tw, "errors\t%d\n", res.Errors)
		if res.FirstError != "" {
			fmt.Fprintf(tw, "first error\t%s\n", res.FirstError)
		}
		tw.Flush()
	}
	if res.Latency.Count == 0 {
		if res.FirstError != "" {
			return &exitError{code: exitOther, err: fmt.Errorf("no message was delivered: %s", res.FirstError)}
		}
		return &exitError{code: exitOther, err: fmt.Errorf("no message was delivered within %s", bf.duration)}
	}
	return nil
}

// ---- STOMP transport -------------------------------------------------------

type stompTransport struct {
	cCtx    *cli.Context
	dest    string
	payload []byte
	mu      sync.Mutex
	conns   []*client.Conn
}

// subscribe reads the topic over a STOMP connection of its own, in one
// goroutine that decodes each MESSAGE and takes its arrival time, as the
// NATS subscriber does: no hand-off through the client library's
// subscription channel, which put a goroutine wake-up in every STOMP
// message's measured latency and none in NATS's.
func (t *stompTransport) subscribe(ctx context.Context, s *topicSub, w *seqWindow, stop <-chan struct{}, wg *sync.WaitGroup) error {
	server := t.cCtx.String("server")
	timeout := t.cCtx.Duration("connect-timeout")
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return &exitError{code: exitUnavailable, err: fmt.Errorf(
			"cannot reach the STOMP server at %s: %w; start it, or point --server at it", server, err)}
	}
	fail := func(what string, err error) error {
		nc.Close()
		return failure(server, what, err)
	}
	host := t.cCtx.String("vhost")
	if host == "" {
		host = server
		if h, _, err := net.SplitHostPort(server); err == nil {
			host = h
		}
	}
	cf := stomp.NewFrame(stomp.CmdConnect, "accept-version", "1.2", "host", host)
	if l := t.cCtx.String("login"); l != "" {
		cf.Headers.Add("login", l)
	}
	if p := t.cCtx.String("passcode"); p != "" {
		cf.Headers.Add("passcode", p)
	}
	// One buffered reader for the handshake (stomp.Reader reads through
	// it: bufio does not wrap a large enough bufio.Reader again) and for
	// scanBenchFrame afterwards.
	br := bufio.NewReaderSize(nc, 64<<10)
	r := stomp.NewReader(br, stomp.Limits{})
	nc.SetDeadline(time.Now().Add(max(timeout, 10*time.Second)))
	next := func() (*stomp.Frame, error) {
		for {
			f, err := r.ReadFrame()
			if f != nil || err != nil {
				return f, err
			}
		}
	}
	if _, err := nc.Write(stomp.AppendFrame(nil, cf, "")); err != nil {
		return fail("connect", err)
	}
	f, err := next()
	if err != nil {
		return fail("connect", err)
	}
	if f.Command != stomp.CmdConnected {
		return fail("connect", fmt.Errorf("server refused the connection: %s %s; check --login/--passcode (RabbitMQ: also --vhost /)", f.Get("message"), f.Body))
	}
	v := f.Get("version")
	r.SetVersion(v)
	sf := stomp.NewFrame(stomp.CmdSubscribe, "id", "0", "destination", t.dest, "ack", "auto", "receipt", "sub")
	if _, err := nc.Write(stomp.AppendFrame(nil, sf, v)); err != nil {
		return fail("subscribe to "+t.dest, err)
	}
	for {
		f, err := next()
		if err != nil {
			return fail("subscribe to "+t.dest, err)
		}
		if f.Command == stomp.CmdReceipt {
			break
		}
		if f.Command == stomp.CmdError {
			return fail("subscribe to "+t.dest, fmt.Errorf("%s %s", f.Get("message"), f.Body))
		}
	}
	nc.SetDeadline(time.Time{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-stop
		nc.Close()
	}()
	go func() {
		defer wg.Done()
		var sc benchScan
		for {
			if err := sc.next(br); err != nil {
				select {
				case <-stop:
				default:
					s.err = err
				}
				return
			}
			switch {
			case sc.isError:
				s.err = fmt.Errorf("server sent ERROR: %s", sc.message)
				return
			case sc.isMessage && sc.ok:
				s.got(sc.seq, sc.ts, sc.at, w)
			}
		}
	}()
	return nil
}

// benchScan reads STOMP frames as the NATS subscriber reads MSG lines:
// only what the bench needs (a MESSAGE's bench-ts and bench-seq, an
// ERROR's message), without building a frame; the arrival time is taken
// once the frame's headers are read.
type benchScan struct {
	isMessage, isError, ok bool
	ts, seq                int64
	at                     time.Time
	message                string
}

func (sc *benchScan) next(br *bufio.Reader) error {
	*sc = benchScan{}
	line := func() ([]byte, error) {
		l, err := br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		l = l[:len(l)-1]
		if n := len(l); n > 0 && l[n-1] == '\r' {
			l = l[:n-1]
		}
		return l, nil
	}
	var cmd []byte
	for len(cmd) == 0 { // EOLs between frames are heart-beats
		l, err := line()
		if err != nil {
			return err
		}
		cmd = l
	}
	sc.isMessage, sc.isError = string(cmd) == stomp.CmdMessage, string(cmd) == stomp.CmdError
	length := -1
	haveTS, haveSeq, seenTS, seenSeq := false, false, false, false
	for {
		l, err := line()
		if err != nil {
			return err
		}
		if len(l) == 0 {
			break
		}
		var k, v []byte
		if i := bytes.IndexByte(l, ':'); i >= 0 {
			k, v = l[:i], l[i+1:]
		} else {
			k = l
		}
		switch string(k) { // the first of repeated headers counts
		case "content-length":
			if length < 0 {
				if length, err = strconv.Atoi(string(v)); err != nil {
					return fmt.Errorf("bad content-length %q", v)
				}
			}
		case benchTSHeader:
			if !seenTS {
				seenTS = true
				sc.ts, haveTS = parseBenchInt(v)
			}
		case benchSeqHeader:
			if !seenSeq {
				seenSeq = true
				sc.seq, haveSeq = parseBenchInt(v)
			}
		case "message":
			if sc.isError && sc.message == "" {
				sc.message = string(v)
			}
		}
	}
	sc.at = time.Now()
	sc.ok = haveTS && haveSeq
	if length >= 0 {
		if _, err := br.Discard(length); err != nil {
			return err
		}
		if b, err := br.ReadByte(); err != nil || b != 0 {
			if err == nil {
				err = errors.New("frame not terminated by NUL after content-length octets")
			}
			return err
		}
		return nil
	}
	for {
		_, err := br.ReadSlice(0)
		if err == nil {
			return nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// parseBenchInt is strconv.ParseInt(string(v), 10, 64) without its
// conversion and generality for the plain digits the bench sends (a
// subscriber parses two per message, at up to a million messages a
// second); anything else goes to ParseInt, so the result is the same.
func parseBenchInt(v []byte) (int64, bool) {
	if n := len(v); n > 0 && n <= 19 { // 19 digits fit a uint64
		var x uint64
		digits := true
		for _, c := range v {
			if c < '0' || c > '9' {
				digits = false
				break
			}
			x = x*10 + uint64(c-'0')
		}
		if digits && x <= math.MaxInt64 {
			return int64(x), true
		}
	}
	x, err := strconv.ParseInt(string(v), 10, 64)
	return x, err == nil
}

func (t *stompTransport) publisher(ctx context.Context) (func(int64) error, func(), error) {
	c, err := benchDial(ctx, t.cCtx)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	closeFn := func() { once.Do(func() { c.Close() }) }
	pub := func(seq int64) error {
		return c.Send(t.dest, t.payload,
			stomp.Header{Key: benchTSHeader, Value: strconv.FormatInt(time.Now().UnixNano(), 10)},
			stomp.Header{Key: benchSeqHeader, Value: strconv.FormatInt(seq, 10)})
	}
	return pub, closeFn, nil
}

// ---- NATS core transport ---------------------------------------------------
//
// A minimal client of NATS's text protocol (https://docs.nats.io/reference/
// reference-protocols/nats-protocol): INFO, CONNECT, PING/PONG, SUB, PUB, MSG,
// +OK, -ERR. The payload starts with the send time and sequence (8 bytes
// each, big-endian).

type natsTransport struct {
	addr    string
	subject string
	size    int
	timeout time.Duration
}

func natsSubject(dest string) string {
	s := strings.TrimPrefix(dest, "/topic/")
	s = strings.Trim(s, "/")
	s = strings.ReplaceAll(s, "/", ".")
	if s == "" {
		s = "bench"
	}
	return s
}

type natsConn struct {
	nc  net.Conn
	br  *bufio.Reader
	bw  *bufio.Writer
	wmu sync.Mutex
}

func natsDial(ctx context.Context, addr string, timeout time.Duration) (*natsConn, error) {
	return natsDialOpts(ctx, addr, timeout, false)
}

// natsDialOpts is natsDial; headers asks for HMSG (JetStream's status
// messages) and no-responders replies.
func natsDialOpts(ctx context.Context, addr string, timeout time.Duration, headers bool) (*natsConn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &exitError{code: exitUnavailable, err: fmt.Errorf("cannot reach the NATS server at %s: %w; start nats-server, or point --server at it", addr, err)}
	}
	c := &natsConn{nc: nc, br: bufio.NewReaderSize(nc, 256<<10), bw: bufio.NewWriterSize(nc, 64<<10)}
	nc.SetDeadline(time.Now().Add(timeout))
	line, err := c.readLine()
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		nc.Close()
		return nil, &exitError{code: exitUnavailable, err: fmt.Errorf("%s does not speak NATS (first line %q, %v)", addr, line, err)}
	}
	hdr := ""
	if headers {
		hdr = ",\"headers\":true,\"no_responders\":true"
	}
	if err := c.write("CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"herald-bench\",\"lang\":\"go\",\"version\":\"0\",\"protocol\":1" + hdr + "}\r\n"); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.ping(); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *natsConn) readLine() (string, error) {
	line, err := c.br.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func (c *natsConn) write(s string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.bw.WriteString(s)
	return c.bw.Flush()
}

// ping sends PING and waits for PONG (before the reader goroutine starts):
// every earlier command has then been processed by the server.
func (c *natsConn) ping() error {
	if err := c.write("PING\r\n"); err != nil {
		return err
	}
	for {
		line, err := c.readLine()
		if err != nil {
			return fmt.Errorf("nats: waiting for PONG: %w", err)
		}
		switch {
		case line == "PONG":
			return nil
		case strings.HasPrefix(line, "-ERR"):
			return fmt.Errorf("nats server error: %s", line)
		}
	}
}

func (t *natsTransport) subscribe(ctx context.Context, s *topicSub, w *seqWindow, stop <-chan struct{}, wg *sync.WaitGroup) error {
	c, err := natsDial(ctx, t.addr, t.timeout)
	if err != nil {
		return err
	}
	if err := c.write("SUB " + t.subject + " 1\r\n"); err != nil {
		c.nc.Close()
		return err
	}
	c.nc.SetDeadline(time.Now().Add(t.timeout))
	if err := c.ping(); err != nil {
		c.nc.Close()
		return err
	}
	c.nc.SetDeadline(time.Time{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-stop
		c.nc.Close()
	}()
	go func() {
		defer wg.Done()
		select {
		case <-stop:
		default:
			if err := c.readMessages(s, w); err != nil {
				select {
				case <-stop:
				default:
					s.err = err
				}
			}
		}
	}()
	return nil
}

// readMessages parses MSG frames until the connection ends.
func (c *natsConn) readMessages(s *topicSub, w *seqWindow) error {
	var payload []byte
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		now := time.Now()
		lb := bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(lb, []byte("MSG ")):
			// MSG <subject> <sid> [reply-to] <#bytes>: the byte count is
			// the last field; read without building strings (a subscriber
			// reads up to a million a second, as the STOMP one does).
			n, fields := natsMsgSize(lb)
			if fields < 4 || n < 0 {
				return fmt.Errorf("nats: bad MSG line %q", lb)
			}
			if cap(payload) < n+2 {
				payload = make([]byte, n+2)
			}
			payload = payload[:n+2]
			if _, err := io.ReadFull(c.br, payload); err != nil {
				return err
			}
			if n >= 16 {
				ts := int64(binary.BigEndian.Uint64(payload[0:8]))
				seq := int64(binary.BigEndian.Uint64(payload[8:16]))
				s.got(seq, ts, now, w)
			}
		case string(lb) == "PING":
			if err := c.write("PONG\r\n"); err != nil {
				return err
			}
		case bytes.HasPrefix(lb, []byte("-ERR")):
			return fmt.Errorf("nats server error: %s", lb)
		}
		// +OK, PONG, INFO: nothing to do.
	}
}

// natsMsgSize returns the last field of a MSG line as a byte count (-1 if
// it is not a decimal number) and how many fields the line has, as
// strings.Fields would split it.
func natsMsgSize(l []byte) (n, fields int) {
	in := false
	start := 0
	last := []byte(nil)
	for i, c := range l {
		sp := c == ' ' || c == '\t'
		if !sp && !in {
			in, start = true, i
			fields++
		} else if sp && in {
			in = false
			last = l[start:i]
		}
	}
	if in {
		last = l[start:]
	}
	if len(last) == 0 || len(last) > 9 {
		return -1, fields
	}
	for _, c := range last {
		if c < '0' || c > '9' {
			return -1, fields
		}
		n = n*10 + int(c-'0')
	}
	return n, fields
}

func (t *natsTransport) publisher(ctx context.Context) (func(int64) error, func(), error) {
	c, err := natsDial(ctx, t.addr, t.timeout)
	if err != nil {
		return nil, nil, err
	}
	// Answer the server's PINGs and notice -ERR while publishing.
	var rerr atomic.Value
	go func() {
		for {
			line, err := c.readLine()
			if err != nil {
				return
			}
			switch {
			case line == "PING":
				c.write("PONG\r\n")
			case strings.HasPrefix(line, "-ERR"):
				rerr.Store(errors.New("nats server error: " + line))
			}
		}
	}()
	payload := benchBody(t.size)
	head := []byte("PUB " + t.subject + " " + strconv.Itoa(t.size) + "\r\n")
	var once sync.Once
	closeFn := func() { once.Do(func() { c.nc.Close() }) }
	pub := func(seq int64) error {
		if e, ok := rerr.Load().(error); ok {
			return e
		}
		binary.BigEndian.PutUint64(payload[0:8], uint64(time.Now().UnixNano()))
		binary.BigEndian.PutUint64(payload[8:16], uint64(seq))
		c.wmu.Lock()
		defer c.wmu.Unlock()
		c.bw.Write(head)
		c.bw.Write(payload)
		c.bw.WriteString("\r\n")
		return c.bw.Flush() // one write per message, as the STOMP client does
	}
	return pub, closeFn, nil
}
