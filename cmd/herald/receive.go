package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
sent, and messages prefetched beyond --count are lost.`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Usage: "exit after `N` messages (0: never)"},
			&cli.StringFlag{Name: "ack", Value: "auto", Usage: "acknowledgement mode: auto or client-individual"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per message"},
			&cli.DurationFlag{Name: "timeout", Usage: "exit with status 75 when no message arrives for this long (0: wait forever)"},
			&cli.IntFlag{Name: "prefetch", Usage: "ask the server to have at most `N` unacknowledged messages in flight (0: server default)"},
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
	if prefetch > 0 {
		hdrs = append(hdrs, stomp.Header{Key: "prefetch-count", Value: strconv.Itoa(prefetch)})
	}

	ctx, stop := signal.NotifyContext(cCtx.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	server := cCtx.String("server")
	c, err := dial(ctx, cCtx, [2]time.Duration{receiveHeartBeat, receiveHeartBeat})
	if err != nil {
		return err
	}
	defer c.Close()
	sub, err := c.Subscribe(dest, ack, hdrs...)
	if err != nil {
		return failure(server, "subscribe to "+dest, err)
	}

	p := &printer{
		c:        c,
		out:      bufio.NewWriterSize(cCtx.App.Writer, 64<<10),
		json:     cCtx.Bool("json"),
		ack:      ack == "client-individual",
		withDest: isWildcard(dest),
	}
	err = p.loop(ctx, sub, count, timeout, dest)
	if ferr := p.flush(); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		return failure(server, "receive from "+dest, err)
	}
	// DISCONNECT with a receipt: our ACKs have been processed.
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Disconnect(dctx); err != nil && !errors.Is(err, client.ErrClosed) {
		return failure(server, "disconnect", err)
	}
	return nil
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
}

func (p *printer) loop(ctx context.Context, sub *client.Subscription, count int, timeout time.Duration, dest string) error {
	var idle <-chan time.Time
	var timer *time.Timer
	if timeout > 0 {
		timer = time.NewTimer(timeout)
		defer timer.Stop()
		idle = timer.C
	}
	for n := 0; count == 0 || n < count; {
		select {
		case m, ok := <-sub.C():
			if !ok {
				return p.connErr()
			}
			if err := p.print(m); err != nil {
				return err
			}
			n++
			// Flush (and acknowledge) when nothing else is waiting, so
			// output is prompt and syscalls are shared under load.
			if len(sub.C()) == 0 || len(p.toAck) >= ackBatch {
				if err := p.flush(); err != nil {
					return err
				}
			}
			if timer != nil {
				timer.Reset(timeout)
			}
		case f := <-p.c.Errors():
			return &client.ServerError{Frame: f}
		case <-p.c.Done():
			return p.connErr()
		case <-idle:
			return &exitError{code: exitTimeout, err: fmt.Errorf("no message on %s within %v", dest, timeout)}
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
