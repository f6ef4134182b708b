package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// sendWindow bounds the receipts outstanding with --receipt.
const sendWindow = 64

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send a message, a file as one message, or each line of stdin as a message",
		ArgsUsage: "DEST [BODY]",
		Description: `With BODY, sends one message to DEST (for example /queue/orders or /topic/prices).
With --file F, sends the whole of file F, byte for byte, as one message
(--file - reads all of stdin). Otherwise sends each line of stdin as a
message (without its line ending).
With --receipt, waits until the server confirms each message (for a queue:
stored on disk), pipelining up to 64 at a time in order. --timeout 0 waits
for the receipts without a limit.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "receipt", Usage: "wait for the server's receipt of each message"},
			&cli.StringSliceFlag{Name: "header", Aliases: []string{"H"}, Usage: "extra header `key=value` (repeatable)"},
			&cli.StringFlag{Name: "content-type", Usage: "content-type header of the messages"},
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "send the whole of `FILE` as one message (- for stdin)"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up waiting for the server's receipts after this long (exit 75; 0: no limit)"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "report what was sent on stderr"},
		},
		Action: runSend,
	}
}

func runSend(cCtx *cli.Context) error {
	const usage = "send [flags] DEST [BODY]"
	if err := checkArgs(cCtx, 1, 2, usage); err != nil {
		return err
	}
	dest := cCtx.Args().Get(0)
	if dest == "" {
		return usageErrorf("empty destination: herald %s", usage)
	}
	hdrs, err := parseHeaders(cCtx.StringSlice("header"))
	if err != nil {
		return err
	}
	timeout := cCtx.Duration("timeout")
	if timeout < 0 {
		return usageErrorf("--timeout %v: must not be negative (0: no limit)", timeout)
	}
	file := cCtx.String("file")
	if cCtx.IsSet("file") && file == "" {
		return usageErrorf("--file needs a file name (- for stdin)")
	}
	if file != "" && cCtx.Args().Len() == 2 {
		return usageErrorf("give BODY or --file, not both: herald %s", usage)
	}
	var whole []byte
	if file != "" {
		// Read before connecting: a missing file costs no connection.
		if whole, err = readWhole(cCtx.App.Reader, file); err != nil {
			return err
		}
	}
	if ct := cCtx.String("content-type"); ct != "" {
		hdrs = append(hdrs, stomp.Header{Key: "content-type", Value: ct})
	}

	ctx := cCtx.Context
	c, err := dial(ctx, cCtx, [2]time.Duration{})
	if err != nil {
		return err
	}
	defer c.Close()

	s := &sender{
		c:       c,
		dest:    dest,
		hdrs:    hdrs,
		receipt: cCtx.Bool("receipt"),
		timeout: timeout,
		server:  cCtx.String("server"),
	}
	switch {
	case file != "":
		err = s.send(whole)
	case cCtx.Args().Len() == 2:
		err = s.send([]byte(cCtx.Args().Get(1)))
	default:
		err = s.sendLines(cCtx.App.Reader)
	}
	if err == nil {
		err = s.drain()
	}
	if err != nil {
		return err
	}
	// DISCONNECT with a receipt: the server has processed every frame we
	// sent. Without --receipt, this is where a refused message is told
	// (the server answers it with ERROR and closes).
	dctx, cancel := withTimeout(ctx, s.timeout)
	defer cancel()
	if err := c.Disconnect(dctx); err != nil {
		return s.fail("send to "+dest, err)
	}
	if cCtx.Bool("verbose") {
		how := "without receipts"
		if s.receipt {
			how = "each confirmed by a receipt"
		}
		fmt.Fprintf(cCtx.App.ErrWriter, "herald: sent %d message(s) to %s, %s\n", s.sent, dest, how)
	}
	return nil
}

// withTimeout is context.WithTimeout where 0 means no limit.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// readWhole reads file (stdin for "-") whole.
func readWhole(stdin io.Reader, file string) ([]byte, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		if file == "-" {
			file = "stdin"
		}
		code := exitOther
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			code = exitNoInput
		}
		return nil, &exitError{code: code, err: fmt.Errorf("--file: cannot read %w", err)}
	}
	return b, nil
}

func parseHeaders(kvs []string) ([]stomp.Header, error) {
	hdrs := make([]stomp.Header, 0, len(kvs)+1)
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--header %q: want key=value", kv)
		}
		if k == "content-length" || k == "receipt" || k == "destination" {
			return nil, usageErrorf("--header %q: %s is set by herald itself", kv, k)
		}
		hdrs = append(hdrs, stomp.Header{Key: k, Value: v})
	}
	return hdrs, nil
}

// sender sends messages, keeping at most sendWindow receipts outstanding
// and checking them in the order the messages were sent.
type sender struct {
	c       *client.Conn
	dest    string
	hdrs    []stomp.Header
	receipt bool
	timeout time.Duration
	server  string

	sent    int
	pending []pendingSend
}

type pendingSend struct {
	n  int // 1-based message number
	ch <-chan client.Result
}

func (s *sender) send(body []byte) error { return s.sendMore(body, false) }

// sendMore sends one message; more says another is already at hand (a whole line read), so
// without --receipt the frame may wait in the connection's buffer for it.
func (s *sender) sendMore(body []byte, more bool) error {
	s.sent++
	if !s.receipt {
		send := s.c.Send
		if more {
			send = s.c.SendBuffered
		}
		if err := send(s.dest, body, s.hdrs...); err != nil {
			return s.fail(fmt.Sprintf("send message %d to %s", s.sent, s.dest), err)
		}
		return nil
	}
	if len(s.pending) == sendWindow {
		if err := s.waitOldest(); err != nil {
			return err
		}
	}
	ch, err := s.c.SendAsync(s.dest, body, s.hdrs...)
	if err != nil {
		return s.fail(fmt.Sprintf("send message %d to %s", s.sent, s.dest), err)
	}
	s.pending = append(s.pending, pendingSend{n: s.sent, ch: ch})
	return nil
}

func (s *sender) waitOldest() error {
	p := s.pending[0]
	s.pending = s.pending[1:]
	var expired <-chan time.Time
	if s.timeout > 0 {
		t := time.NewTimer(s.timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-p.ch:
		if r.Err != nil {
			return s.fail(fmt.Sprintf("message %d to %s not accepted", p.n, s.dest), r.Err)
		}
		return nil
	case <-expired:
		return &exitError{code: exitTimeout, err: fmt.Errorf(
			"no receipt for message %d to %s within %v; the server may be overloaded or stalled (see heraldd's log), or raise --timeout",
			p.n, s.dest, s.timeout)}
	}
}

// fail classifies err, preferring the server's ERROR when the connection
// ended with one: a write that failed because the server had refused an
// earlier frame and closed is reported as that refusal.
func (s *sender) fail(doing string, err error) error {
	return failure(s.server, doing, serverCause(s.c, err))
}

// drain waits for every outstanding receipt.
func (s *sender) drain() error {
	for len(s.pending) > 0 {
		if err := s.waitOldest(); err != nil {
			return err
		}
	}
	return nil
}

// sendLines sends each line of r, without its LF or CRLF, as a message.
// lineBuffered reports whether br holds a whole line already read: the next message is at hand,
// and reading it will not wait.
func lineBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := br.Peek(n)
	return bytes.IndexByte(b, '\n') >= 0
}

func (s *sender) sendLines(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			s.c.Flush() // what was sent before goes out; the read error is what is reported
			return &exitError{code: exitOther, err: fmt.Errorf("read stdin: %w", err)}
		}
		if len(line) > 0 {
			body := strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r")
			if serr := s.sendMore([]byte(body), err == nil && lineBuffered(br)); serr != nil {
				return serr
			}
		}
		if err != nil { // io.EOF
			return nil
		}
		line = line[:0]
	}
}
