package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/appliance/streamcore"
)

// receiveHeartBeat is offered both ways, so that a dead server is noticed
// while waiting for messages.
const receiveHeartBeat = 10 * time.Second

// ackBatch bounds how many printed messages wait for their ACK.
const ackBatch = 64

func receiveCommand() *cli.Command {
	return &cli.Command{
		Name:      "receive",
		Usage:     "print the messages of a destination, one per line",
		ArgsUsage: "DEST",
		Description: `Subscribes to DEST and prints each message body on its own line (a newline is
added unless the body ends with one). On a wildcard topic (/topic/prices.*,
/topic/prices.>) each line is the message's destination, a tab, then the
body: /topic/prices.eur<TAB>1.08. With --json, prints one JSON object per
line: {"headers":{...},"body":"..."}, plus "body_base64" holding the exact
bytes when the body is not valid UTF-8 (then "body" has U+FFFD in their place).

With --ack client-individual, each message is acknowledged only after it has
been written to stdout, so a crash or Ctrl-C never loses one (it may print it
again later). With --ack auto (the default) the server forgets a message once
sent, and messages prefetched beyond --count are lost.

With --reconnect, a refused or dropped connection (the server restarting, a
network cut, a missed heart-beat) is retried with capped exponential back-off
(waits drawn from 0.05-0.1 s, doubling up to 5-10 s, reset once subscribed
again), each retry told on stderr; then it subscribes again. With
--ack client-individual nothing is lost: the messages it had printed but not
yet acknowledged are delivered again by the server (and printed again).
--count counts across connections; --timeout counts from the last message,
reconnections included. A refusal (login, destination) is not retried.`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Usage: "exit after `N` messages (0: never)"},
			&cli.StringFlag{Name: "ack", Value: "auto", Usage: "acknowledgement mode: auto or client-individual"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per message"},
			&cli.DurationFlag{Name: "timeout", Usage: "exit with status 75 when no message arrives for this long (0: wait forever)"},
			&cli.StringFlag{Name: "offset", Usage: "/stream/ destinations: start at `WHERE`: first, last, next, an offset N or timestamp=T (seconds); sent as x-stream-offset"},
			&cli.IntFlag{Name: "prefetch", Usage: "ask the server to have at most `N` unacknowledged messages in flight (0: server default)"},
			&cli.BoolFlag{Name: "reconnect", Usage: "when the server cannot be reached or the connection drops, reconnect (back-off 0.1s doubling to 10s) and subscribe again"},
		},
		Action: runReceive,
	}
}

func runReceive(cCtx *cli.Context) error {
	const usage = "receive [flags] DEST"
	if err := checkArgs(cCtx, 1, 1, usage); err != nil {
		return err
	}
	dest := cCtx.Args().First()
	if dest == "" {
		return usageErrorf("empty destination: herald %s", usage)
	}
	ack := cCtx.String("ack")
	if ack != "auto" && ack != "client-individual" {
		return usageErrorf("--ack %q: want auto or client-individual", ack)
	}
	count, prefetch, timeout := cCtx.Int("count"), cCtx.Int("prefetch"), cCtx.Duration("timeout")
	if count < 0 || prefetch < 0 || timeout < 0 {
		return usageErrorf("--count, --prefetch and --timeout must not be negative")
	}
	if prefetch == 0 && count > 0 {
		prefetch = count // do not take (and with ack:auto, lose) more than we will print
	}
	var hdrs []stomp.Header
	if off := cCtx.String("offset"); off != "" {
		if !strings.HasPrefix(dest, "/stream/") {
			return usageErrorf("--offset is for /stream/ destinations (got %s)", dest)
		}
		if _, _, _, err := streamcore.ParseStart(off); err != nil {
			return usageErrorf("--offset %q: want first, last, next, an offset or timestamp=T (seconds)", off)
		}
		hdrs = append(hdrs, stomp.Header{Key: "x-stream-offset", Value: off})
	}
	if prefetch > 0 {
		hdrs = append(hdrs, stomp.Header{Key: "prefetch-count", Value: strconv.Itoa(prefetch)})
	}

	ctx, stop := signal.NotifyContext(cCtx.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := &printer{
		out:      bufio.NewWriterSize(cCtx.App.Writer, 64<<10),
		json:     cCtx.Bool("json"),
		ack:      ack == "client-individual",
		withDest: isWildcard(dest),
		count:    count,
		timeout:  timeout,
		dest:     dest,
	}
	p.touch()
	server := cCtx.String("server")
	bo := backoff{min: reconnectMin, max: reconnectMax}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for attempt := 0; ; attempt++ {
		p.retrying = attempt > 0
		connected, retry, err := p.session(ctx, cCtx, server, ack, hdrs)
		if err == nil || !cCtx.Bool("reconnect") || !retry {
			return err
		}
		if connected {
			bo.reset()
		}
		d := bo.next(rng)
		fmt.Fprintf(cCtx.App.ErrWriter, "herald: %v; reconnecting in %v (--reconnect)\n", err, d.Round(time.Millisecond))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil // interrupted by the user: a normal end
		case <-p.idle():
			t.Stop()
			return p.idleErr()
		}
	}
}

// Reconnection back-off bounds of --reconnect.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 10 * time.Second
)

// backoff is capped exponential back-off: the ceiling doubles from min to
// max with each attempt, and each wait is drawn from [ceiling/2, ceiling]
// so that many receivers of one restarted server do not return in step.
// Deterministic given its random source.
type backoff struct {
	min, max time.Duration
	ceil     time.Duration
}

func (b *backoff) next(r *rand.Rand) time.Duration {
	if b.ceil == 0 {
		b.ceil = b.min
	}
	d := b.ceil
	b.ceil = min(2*b.ceil, b.max)
	return d/2 + time.Duration(r.Int64N(int64(d/2)+1))
}

func (b *backoff) reset() { b.ceil = 0 }

// session connects, subscribes and prints until the count is reached, the
// user interrupts, or the connection fails. connected reports whether it
// got as far as a subscription (the back-off starts over then); retry
// whether --reconnect may try again: the server could not be reached or
// the connection was lost, as opposed to a refusal (login, destination) or
// the idle --timeout.
func (p *printer) session(ctx context.Context, cCtx *cli.Context, server, ack string, hdrs []stomp.Header) (connected, retry bool, err error) {
	c, err := dial(ctx, cCtx, [2]time.Duration{receiveHeartBeat, receiveHeartBeat})
	if err != nil {
		var ee *exitError
		return false, errors.As(err, &ee) && ee.code == exitUnavailable, err
	}
	defer c.Close()
	if p.retrying {
		fmt.Fprintf(cCtx.App.ErrWriter, "herald: reconnected to %s, subscribing to %s again\n", server, p.dest)
	}
	p.c = c
	p.toAck = p.toAck[:0] // those were on the old connection: the server delivers them again
	sub, err := c.Subscribe(p.dest, ack, hdrs...)
	if err != nil {
		err = serverCause(c, err)
		return false, lost(c, err), failure(server, "subscribe to "+p.dest, err)
	}
	err = p.loop(ctx, sub)
	if ferr := p.flush(); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) { // stdout, or the idle timeout
			return true, false, err
		}
		err = serverCause(c, err)
		return true, lost(c, err), failure(server, "receive from "+p.dest, err)
	}
	// DISCONNECT with a receipt: our ACKs have been processed.
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Disconnect(dctx); err != nil && !errors.Is(err, client.ErrClosed) {
		return true, false, failure(server, "disconnect", serverCause(c, err))
	}
	return true, false, nil
}

// lost reports whether err is the connection going away (worth a
// reconnect) rather than the server refusing something.
func lost(c *client.Conn, err error) bool {
	var se *client.ServerError
	if errors.As(err, &se) {
		return se.Frame.Get("message") == "server shutting down"
	}
	select {
	case <-c.Done():
		return true // ended: EOF, reset, heart-beat timeout
	default:
	}
	return errors.Is(err, client.ErrConnectionLost) || errors.Is(err, client.ErrHeartbeatTimeout) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// printer writes messages to stdout and acknowledges them once written.
type printer struct {
	c    *client.Conn
	out  *bufio.Writer
	json bool
	ack  bool
	// withDest prefixes each plain body with its destination and a tab
	// (wildcard subscriptions, where it differs from message to message).
	withDest bool
	toAck    []*stomp.Frame
	enc      *json.Encoder

	dest     string
	count    int           // stop after this many (0: never)
	n        int           // printed so far, over every connection
	timeout  time.Duration // --timeout: at most this long without a message (0: no limit)
	last     time.Time     // when the last message (or the start) was
	retrying bool          // a --reconnect attempt, not the first connection
}

// touch restarts the idle --timeout.
func (p *printer) touch() { p.last = time.Now() }

// idle fires when --timeout has passed without a message (never without
// --timeout). The timer is not stopped: it is short-lived and fires once.
func (p *printer) idle() <-chan time.Time {
	if p.timeout <= 0 {
		return nil
	}
	return time.After(time.Until(p.last.Add(p.timeout)))
}

func (p *printer) idleErr() error {
	return &exitError{code: exitTimeout, err: fmt.Errorf("no message on %s within %v", p.dest, p.timeout)}
}

func (p *printer) loop(ctx context.Context, sub *client.Subscription) error {
	var idle <-chan time.Time
	var timer *time.Timer
	if p.timeout > 0 {
		timer = time.NewTimer(time.Until(p.last.Add(p.timeout)))
		defer timer.Stop()
		idle = timer.C
	}
	for p.count == 0 || p.n < p.count {
		select {
		case m, ok := <-sub.C():
			if !ok {
				return p.connErr()
			}
			if err := p.print(m); err != nil {
				return err
			}
			p.n++
			p.touch()
			// Flush (and acknowledge) when nothing else is waiting, so
			// output is prompt and syscalls are shared under load.
			if len(sub.C()) == 0 || len(p.toAck) >= ackBatch {
				if err := p.flush(); err != nil {
					return err
				}
			}
			if timer != nil {
				timer.Reset(p.timeout)
			}
		case f := <-p.c.Errors():
			return &client.ServerError{Frame: f}
		case <-p.c.Done():
			return p.connErr()
		case <-idle:
			return p.idleErr()
		case <-ctx.Done():
			return nil // interrupted by the user: a normal end
		}
	}
	return nil
}

// isWildcard reports whether dest is a topic pattern: a segment that is *
// or > (see appliance.MatchTopic).
func isWildcard(dest string) bool {
	name, ok := strings.CutPrefix(dest, "/topic/")
	if !ok {
		return false
	}
	for _, seg := range strings.Split(name, ".") {
		if seg == "*" || seg == ">" {
			return true
		}
	}
	return false
}

func (p *printer) connErr() error {
	<-p.c.Done()
	return p.c.Err()
}

type jsonMessage struct {
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
	BodyBase64 string            `json:"body_base64,omitempty"`
}

func (p *printer) print(m *stomp.Frame) error {
	if p.json {
		jm := jsonMessage{Headers: make(map[string]string, len(m.Headers)), Body: string(m.Body)}
		for _, h := range m.Headers {
			if _, dup := jm.Headers[h.Key]; !dup { // the first of repeated headers wins
				jm.Headers[h.Key] = h.Value
			}
		}
		if !utf8.Valid(m.Body) {
			jm.BodyBase64 = base64.StdEncoding.EncodeToString(m.Body)
		}
		if p.enc == nil {
			p.enc = json.NewEncoder(p.out)
			p.enc.SetEscapeHTML(false)
		}
		if err := p.enc.Encode(&jm); err != nil {
			return stdoutErr(err)
		}
	} else {
		if p.withDest {
			p.out.WriteString(m.Get("destination"))
			p.out.WriteByte('\t')
		}
		p.out.Write(m.Body)
		if len(m.Body) == 0 || m.Body[len(m.Body)-1] != '\n' {
			p.out.WriteByte('\n')
		}
	}
	if p.ack {
		p.toAck = append(p.toAck, m)
	}
	return nil
}

// flush writes buffered output, then acknowledges what it held.
func (p *printer) flush() error {
	if err := p.out.Flush(); err != nil {
		return stdoutErr(err)
	}
	for _, m := range p.toAck {
		if err := p.c.Ack(m); err != nil {
			return err
		}
	}
	p.toAck = p.toAck[:0]
	return nil
}

func stdoutErr(err error) error {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrClosedPipe) {
		return &exitError{code: exitOther, err: fmt.Errorf("write stdout: reader went away: %w", err)}
	}
	return &exitError{code: exitOther, err: fmt.Errorf("write stdout: %w", err)}
}
