package client

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// writeFrame encodes f and writes it. The buffer is flushed unless another
// writer is queued, in which case the last writer of the batch flushes.
func (c *Conn) writeFrame(f *stomp.Frame) error {
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
	defer c.wmu.Unlock()
	c.wbuf = stomp.AppendFrame(c.wbuf[:0], f, c.version)
	return c.writeLocked(c.wbuf, f.Command)
}

// writeFrameLater encodes f into the buffer and leaves the flush to
// flushLoop, so that a burst of pipelined frames (SendAsync) goes out in few
// writes instead of one syscall per frame.
func (c *Conn) writeFrameLater(f *stomp.Frame) error {
	if err := c.bufferFrame(f); err != nil {
		return err
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

// bufferFrame encodes f into the write buffer without flushing it (the
// buffer writes itself out when full).
func (c *Conn) bufferFrame(f *stomp.Frame) error {
	c.wmu.Lock()
	c.wbuf = stomp.AppendFrame(c.wbuf[:0], f, c.version)
	return c.bufferWbufAndUnlock(f.Command)
}

// bufferWbufAndUnlock puts the frame encoded in c.wbuf (a what) in the
// write buffer, then releases wmu, which the caller took to encode it.
func (c *Conn) bufferWbufAndUnlock(what string) error {
	_, err := c.bw.Write(c.wbuf)
	c.wmu.Unlock()
	if err != nil {
		return c.writeFailed(what, err)
	}
	c.wrote.Store(true)
	return nil
}

// flushLoop flushes what writeFrameLater buffered.
func (c *Conn) flushLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.kick:
		case <-c.closing:
			return
		case <-c.done:
			return
		}
		c.wmu.Lock()
		err := c.bw.Flush()
		c.wmu.Unlock()
		if err != nil {
			c.writeFailed("flush", err)
			return
		}
	}
}

// writeBytes writes raw bytes (a heart-beat) with the same batching.
func (c *Conn) writeBytes(b []byte) error {
	c.waiting.Add(1)
	c.wmu.Lock()
	c.waiting.Add(-1)
	defer c.wmu.Unlock()
	return c.writeLocked(b, "heart-beat")
}

func (c *Conn) writeLocked(b []byte, what string) error {
	if _, err := c.bw.Write(b); err != nil {
		return c.writeFailed(what, err)
	}
	if c.waiting.Load() == 0 {
		if err := c.bw.Flush(); err != nil {
			return c.writeFailed(what, err)
		}
	}
	c.wrote.Store(true)
	return nil
}

// writeFailed closes the socket (the reader loop then ends the connection)
// and reports why the connection ended when the reader says so in time: a
// write that fails because the server sent ERROR and closed must report the
// ERROR, not the broken socket. The reader never writes, so waiting for it
// cannot deadlock; the bound only covers a reader stuck handing a MESSAGE to
// a subscriber that is not reading.
func (c *Conn) writeFailed(what string, err error) error {
	c.nc.Close()
	select {
	case <-c.done:
	case <-time.After(2 * time.Second):
	}
	if e := c.Err(); e != nil {
		return fmt.Errorf("stomp client: write %s: %w", what, e)
	}
	return fmt.Errorf("stomp client: write %s: %w", what, err)
}

// Write writes f as is, without waiting for anything.
func (c *Conn) Write(f *stomp.Frame) error {
	if err := c.Err(); err != nil {
		return fmt.Errorf("stomp client: write %s: %w", f.Command, err)
	}
	return c.writeFrame(f)
}

func sendFrame(dest string, body []byte, hdrs []stomp.Header) *stomp.Frame {
	f := &stomp.Frame{Command: stomp.CmdSend, Body: body, Headers: make(stomp.Headers, 0, len(hdrs)+2)}
	f.Headers = append(f.Headers, stomp.Header{Key: "destination", Value: dest})
	f.Headers = append(f.Headers, hdrs...)
	return f
}

// Send sends a message to dest without asking for a receipt.
func (c *Conn) Send(dest string, body []byte, hdrs ...stomp.Header) error {
	return c.Write(sendFrame(dest, body, hdrs))
}

// SendBuffered is Send for a publisher with more messages already at hand: the frame is left in
// the connection's write buffer (written when the buffer fills) for the next Send, Write or Flush
// to write with it, so that a burst costs few system calls instead of one per message. The caller
// must Flush (or Send) once it has nothing more at hand.
func (c *Conn) SendBuffered(dest string, body []byte, hdrs ...stomp.Header) error {
	if err := c.Err(); err != nil {
		return fmt.Errorf("stomp client: write %s: %w", stomp.CmdSend, err)
	}
	return c.bufferFrame(sendFrame(dest, body, hdrs))
}

// Flush writes what SendBuffered and AckBuffered left in the buffer.
func (c *Conn) Flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.bw.Flush(); err != nil {
		return c.writeFailed("flush", err)
	}
	return nil
}

// SendReceipt sends a message to dest and waits for its RECEIPT.
func (c *Conn) SendReceipt(ctx context.Context, dest string, body []byte, hdrs ...stomp.Header) (*stomp.Frame, error) {
	return c.Request(ctx, sendFrame(dest, body, hdrs))
}

// SendAsync sends a message to dest with a receipt header and returns at once.
// The channel receives exactly one Result: the RECEIPT, or the *ServerError
// or connection error that prevents it. Any number may be outstanding; a
// caller that wants a bounded window keeps its own count.
func (c *Conn) SendAsync(dest string, body []byte, hdrs ...stomp.Header) (<-chan Result, error) {
	ch := make(chan Result, 1)
	if _, err := c.startWith(sendFrame(dest, body, hdrs), ch, c.writeFrameLater); err != nil {
		return nil, err
	}
	return ch, nil
}

// Request adds a receipt header to a copy of f (replacing any), writes it and
// waits for the matching RECEIPT, which it returns. An ERROR frame naming
// the receipt fails it with a *ServerError; so does the end of the
// connection after an ERROR frame.
func (c *Conn) Request(ctx context.Context, f *stomp.Frame) (*stomp.Frame, error) {
	ch := make(chan Result, 1)
	id, err := c.start(f, ch)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, fmt.Errorf("stomp client: %s: %w", f.Command, r.Err)
		}
		return r.Receipt, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, fmt.Errorf("stomp client: %s: waiting for receipt %s: %w", f.Command, id, ctx.Err())
	}
}

// start registers ch for a fresh receipt id, then writes a copy of f carrying it.
func (c *Conn) start(f *stomp.Frame, ch chan<- Result) (string, error) {
	return c.startWith(f, ch, c.writeFrame)
}

func (c *Conn) startWith(f *stomp.Frame, ch chan<- Result, write func(*stomp.Frame) error) (string, error) {
	id := strconv.FormatUint(c.seq.Add(1), 10)
	g := *f
	g.Headers = make(stomp.Headers, 0, len(f.Headers)+1)
	for _, h := range f.Headers {
		if h.Key != "receipt" {
			g.Headers = append(g.Headers, h)
		}
	}
	g.Headers = append(g.Headers, stomp.Header{Key: "receipt", Value: id})

	c.mu.Lock()
	if c.ended {
		err := c.err
		c.mu.Unlock()
		return "", fmt.Errorf("stomp client: %s: %w", f.Command, err)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	if err := write(&g); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return "", err
	}
	return id, nil
}

// Ack acknowledges msg: with its ack header as id in STOMP 1.2, with
// message-id and subscription in 1.0 and 1.1.
func (c *Conn) Ack(msg *stomp.Frame, hdrs ...stomp.Header) error {
	return c.ackFrame(stomp.CmdAck, msg, hdrs)
}

// Nack rejects msg (STOMP 1.1 and later), in the same forms as Ack.
func (c *Conn) Nack(msg *stomp.Frame, hdrs ...stomp.Header) error {
	if c.version == stomp.V10 {
		return fmt.Errorf("stomp client: NACK needs STOMP 1.1 or later, the server speaks 1.0")
	}
	return c.ackFrame(stomp.CmdNack, msg, hdrs)
}

// AckBuffered is Ack for a consumer with more messages already at hand:
// the ACK is left in the connection's write buffer, as SendBuffered leaves
// a SEND, so that acknowledging a burst costs few system calls (and the
// server reads the ACKs together). The caller must Flush once it has
// nothing more at hand.
func (c *Conn) AckBuffered(msg *stomp.Frame, hdrs ...stomp.Header) error {
	if c.version == stomp.V12 && len(hdrs) == 0 {
		// The common case, encoded straight into the buffer: the same
		// octets as the frame ackFrameOf makes, without making it.
		id := msg.Get("ack")
		if id == "" {
			return fmt.Errorf("stomp client: %s: %w", stomp.CmdAck, ErrNoAck)
		}
		h := stomp.Header{Key: "id", Value: id}
		if !stomp.Writable(h, stomp.V12, stomp.CmdAck) {
			return unwritableAck(stomp.CmdAck, h, stomp.V12)
		}
		if err := c.Err(); err != nil {
			return fmt.Errorf("stomp client: write %s: %w", stomp.CmdAck, err)
		}
		c.wmu.Lock()
		c.wbuf = append(c.wbuf[:0], "ACK\n"...)
		c.wbuf = stomp.AppendHeader(c.wbuf, stomp.CmdAck, stomp.V12, h)
		c.wbuf = append(c.wbuf, '\n', 0)
		return c.bufferWbufAndUnlock(stomp.CmdAck)
	}
	f, err := c.ackFrameOf(stomp.CmdAck, msg, hdrs)
	if err != nil {
		return err
	}
	if err := c.Err(); err != nil {
		return fmt.Errorf("stomp client: write %s: %w", f.Command, err)
	}
	return c.bufferFrame(f)
}

func (c *Conn) ackFrame(cmd string, msg *stomp.Frame, hdrs []stomp.Header) error {
	f, err := c.ackFrameOf(cmd, msg, hdrs)
	if err != nil {
		return err
	}
	return c.Write(f)
}

// ackFrameOf makes the ACK or NACK (cmd) of msg in the connection's STOMP
// version.
func (c *Conn) ackFrameOf(cmd string, msg *stomp.Frame, hdrs []stomp.Header) (*stomp.Frame, error) {
	f := &stomp.Frame{Command: cmd, Headers: make(stomp.Headers, 0, len(hdrs)+2)}
	if c.version == stomp.V12 {
		id := msg.Get("ack")
		if id == "" {
			return nil, fmt.Errorf("stomp client: %s: %w", cmd, ErrNoAck)
		}
		f.Headers = append(f.Headers, stomp.Header{Key: "id", Value: id})
	} else {
		id := msg.Get("message-id")
		if id == "" {
			return nil, fmt.Errorf("stomp client: %s: %w", cmd, ErrNoAck)
		}
		f.Headers = append(f.Headers, stomp.Header{Key: "message-id", Value: id})
		if sub, ok := msg.Headers.Lookup("subscription"); ok {
			f.Headers = append(f.Headers, stomp.Header{Key: "subscription", Value: sub})
		}
	}
	for _, h := range f.Headers {
		if !stomp.Writable(h, c.version, cmd) {
			// Left out by the encoder, the ACK would name no message.
			return nil, unwritableAck(cmd, h, c.version)
		}
	}
	f.Headers = append(f.Headers, hdrs...)
	return f, nil
}

func unwritableAck(cmd string, h stomp.Header, v string) error {
	return fmt.Errorf("stomp client: %s: header %s %q cannot be written in STOMP %s (a NUL, or a line break where the version has no escape)", cmd, h.Key, h.Value, v)
}

// Begin starts transaction tx.
func (c *Conn) Begin(tx string) error {
	return c.Write(stomp.NewFrame(stomp.CmdBegin, "transaction", tx))
}

// Commit commits transaction tx.
func (c *Conn) Commit(tx string) error {
	return c.Write(stomp.NewFrame(stomp.CmdCommit, "transaction", tx))
}

// Abort rolls transaction tx back.
func (c *Conn) Abort(tx string) error {
	return c.Write(stomp.NewFrame(stomp.CmdAbort, "transaction", tx))
}
