package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// Defaults applied by Dial to zero Options fields.
const (
	DefaultAcceptVersion      = "1.0,1.1,1.2"
	DefaultSubscriptionBuffer = 1024
	DefaultErrorBuffer        = 16
)

// Options configure Dial. The zero value is usable.
type Options struct {
	Login, Passcode string
	// Host is the CONNECT host header (the virtual host); default: the host
	// part of the address.
	Host string
	// AcceptVersion is offered in CONNECT; default DefaultAcceptVersion.
	AcceptVersion string
	// HeartBeat is the cx,cy pair offered: how often the client can send
	// heart-beats and how often it wants to receive them. 0 means none.
	HeartBeat [2]time.Duration
	// DialTimeout bounds the TCP connect and the CONNECT/CONNECTED exchange
	// together; 0 leaves it to ctx.
	DialTimeout time.Duration
	// Headers are extra CONNECT headers.
	Headers []stomp.Header
	// SubscriptionBuffer is the capacity of each Subscription channel;
	// default DefaultSubscriptionBuffer.
	SubscriptionBuffer int
	// Limits bound the frames accepted from the server; zero fields take the
	// codec's defaults.
	Limits stomp.Limits
	// TLS, when set, runs STOMP over TLS with this configuration (its
	// ServerName defaults to the host part of the address).
	TLS *tls.Config
}

// Result is the outcome of a pipelined request: the RECEIPT frame, or why
// there is none.
type Result struct {
	Receipt *stomp.Frame
	Err     error
}

// Conn is a STOMP connection. Its methods are safe for concurrent use.
type Conn struct {
	nc        net.Conn
	r         *stomp.Reader
	version   string
	connected *stomp.Frame
	subBuf    int

	readTimeout time.Duration // 0: the server sends no heart-beats
	sendEvery   time.Duration // 0: we send no heart-beats

	// write side
	wmu     sync.Mutex
	bw      *bufio.Writer
	wbuf    []byte
	waiting atomic.Int32 // writers queued on wmu
	wrote   atomic.Bool  // a write happened since the last heart-beat tick

	seq atomic.Uint64 // receipt and subscription ids

	mu        sync.Mutex
	pending   map[string]chan<- Result
	subs      map[string]*Subscription
	ended     bool  // the reader loop finished; pending and subs are failed
	err       error // why the connection ended
	serverErr *ServerError

	errs      chan *stomp.Frame
	closing   chan struct{} // closed by Close
	kick      chan struct{} // wakes flushLoop: pipelined writes are buffered
	closeOnce sync.Once
	done      chan struct{} // closed when the reader loop has cleaned up
	wg        sync.WaitGroup
}

// Dial connects to addr, sends CONNECT and waits for CONNECTED. An ERROR
// answer is returned as a *ServerError.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	if opts.DialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.DialTimeout)
		defer cancel()
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stomp client: %w", err)
	}
	if opts.TLS != nil {
		tc := opts.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tlsConn := tls.Client(nc, tc)
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("stomp client: TLS handshake with %s: %w", addr, err)
		}
		nc = tlsConn
	}
	c, err := handshake(ctx, nc, addr, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Handshake runs STOMP over a connection the caller opened (for example a
// WebSocket adapted to a net.Conn): it sends CONNECT and waits for
// CONNECTED, as Dial does. addr is the default CONNECT host. On an error
// nc is the caller's to close.
func Handshake(ctx context.Context, nc net.Conn, addr string, opts Options) (*Conn, error) {
	if opts.DialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.DialTimeout)
		defer cancel()
	}
	return handshake(ctx, nc, addr, opts)
}

func handshake(ctx context.Context, nc net.Conn, addr string, opts Options) (*Conn, error) {
	// Abort the blocking exchange when ctx ends.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}

	c := &Conn{
		nc:      nc,
		r:       stomp.NewReader(nc, opts.Limits),
		bw:      bufio.NewWriterSize(nc, 32<<10),
		subBuf:  opts.SubscriptionBuffer,
		pending: make(map[string]chan<- Result),
		subs:    make(map[string]*Subscription),
		errs:    make(chan *stomp.Frame, DefaultErrorBuffer),
		closing: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	if c.subBuf <= 0 {
		c.subBuf = DefaultSubscriptionBuffer
	}

	host := opts.Host
	if host == "" {
		host = addr
		if h, _, err := net.SplitHostPort(addr); err == nil {
			host = h
		}
	}
	accept := opts.AcceptVersion
	if accept == "" {
		accept = DefaultAcceptVersion
	}
	cf := stomp.NewFrame(stomp.CmdConnect, "accept-version", accept, "host", host)
	if opts.Login != "" {
		cf.Headers.Add("login", opts.Login)
	}
	if opts.Passcode != "" {
		cf.Headers.Add("passcode", opts.Passcode)
	}
	cx, cy := opts.HeartBeat[0].Milliseconds(), opts.HeartBeat[1].Milliseconds()
	if cx > 0 || cy > 0 {
		cf.Headers.Add("heart-beat", strconv.FormatInt(cx, 10)+","+strconv.FormatInt(cy, 10))
	}
	cf.Headers = append(cf.Headers, opts.Headers...)
	if err := c.writeFrame(cf); err != nil {
		return nil, handshakeErr(ctx, addr, err)
	}

	var f *stomp.Frame
	for f == nil {
		var err error
		if f, err = c.r.ReadFrame(); err != nil {
			return nil, handshakeErr(ctx, addr, err)
		}
	}
	switch f.Command {
	case stomp.CmdConnected:
	case stomp.CmdError:
		return nil, &ServerError{Frame: f}
	default:
		return nil, fmt.Errorf("stomp client: connect to %s: got %s frame, want CONNECTED", addr, f.Command)
	}
	c.connected = f
	c.version = f.Get("version")
	if c.version == "" {
		c.version = stomp.V10
	}
	c.r.SetVersion(c.version)

	// heart-beat negotiation (STOMP 1.1 "Heart-beating")
	if c.version != stomp.V10 {
		sx, sy := parseHeartBeat(f.Get("heart-beat"))
		if cx > 0 && sy > 0 {
			c.sendEvery = time.Duration(max(cx, sy)) * time.Millisecond
		}
		if cy > 0 && sx > 0 {
			c.readTimeout = 2 * time.Duration(max(cy, sx)) * time.Millisecond
		}
	}

	if !stop() && ctx.Err() != nil {
		return nil, handshakeErr(ctx, addr, ctx.Err())
	}
	nc.SetDeadline(time.Time{})

	c.wg.Add(2)
	go c.readLoop()
	go c.flushLoop()
	if c.sendEvery > 0 {
		c.wg.Add(1)
		go c.heartBeatLoop()
	}
	return c, nil
}

func handshakeErr(ctx context.Context, addr string, err error) error {
	var ne net.Error
	_, hasDeadline := ctx.Deadline()
	if ctx.Err() != nil {
		err = ctx.Err()
	} else if hasDeadline && errors.As(err, &ne) && ne.Timeout() {
		// The socket deadline, copied from ctx, may fire just before ctx's timer.
		err = context.DeadlineExceeded
	} else if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = ErrConnectionLost
	}
	return fmt.Errorf("stomp client: connect to %s: %w", addr, err)
}

func parseHeartBeat(v string) (int64, int64) {
	a, b, ok := strings.Cut(v, ",")
	if !ok {
		return 0, 0
	}
	x, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	y, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if err1 != nil || err2 != nil || x < 0 || y < 0 {
		return 0, 0
	}
	return x, y
}

// Version returns the negotiated protocol version.
func (c *Conn) Version() string { return c.version }

// Session returns the session header of CONNECTED.
func (c *Conn) Session() string { return c.connected.Get("session") }

// Connected returns the server's CONNECTED frame.
func (c *Conn) Connected() *stomp.Frame { return c.connected }

// Errors delivers ERROR frames from the server. It is buffered
// (DefaultErrorBuffer); frames that find it full are dropped, but the last
// one is also reported by Err once the connection ends.
func (c *Conn) Errors() <-chan *stomp.Frame { return c.errs }

// Done is closed when the connection has ended and every outstanding
// request has been failed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (nil while it is up): ErrClosed after
// Close or Disconnect, a *ServerError after an ERROR frame,
// ErrHeartbeatTimeout, ErrConnectionLost, or the I/O or protocol error.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection without DISCONNECT and waits for its
// goroutines. It is idempotent and always returns nil.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		c.nc.Close()
	})
	c.wg.Wait()
	return nil
}

// Disconnect sends DISCONNECT with a receipt, waits for it (or ctx), then
// closes the connection.
func (c *Conn) Disconnect(ctx context.Context) error {
	_, err := c.Request(ctx, &stomp.Frame{Command: stomp.CmdDisconnect})
	c.Close()
	if err != nil {
		return fmt.Errorf("stomp client: disconnect: %w", err)
	}
	return nil
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	var err error
	for {
		if c.readTimeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.readTimeout))
		}
		var f *stomp.Frame
		f, err = c.r.ReadFrame()
		if err != nil {
			break
		}
		if f != nil {
			c.dispatch(f)
		}
	}
	c.end(err)
}

func (c *Conn) dispatch(f *stomp.Frame) {
	switch f.Command {
	case stomp.CmdMessage:
		c.mu.Lock()
		s := c.subs[f.Get("subscription")]
		if s == nil && len(c.subs) == 1 && f.Get("subscription") == "" {
			for _, only := range c.subs {
				s = only
			}
		}
		c.mu.Unlock()
		if s != nil {
			s.deliver(f, c.r.FrameBuffered(), c.closing)
		}
	case stomp.CmdReceipt:
		c.complete(f.Get("receipt-id"), Result{Receipt: f})
	case stomp.CmdError:
		se := &ServerError{Frame: f}
		c.mu.Lock()
		c.serverErr = se
		c.mu.Unlock()
		if id := f.Get("receipt-id"); id != "" {
			c.complete(id, Result{Err: se})
		}
		select {
		case c.errs <- f:
		default:
		}
	}
}

func (c *Conn) complete(id string, r Result) {
	c.mu.Lock()
	ch := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ch != nil {
		ch <- r // buffered, capacity 1, sent once
	}
}

// end records why the connection ended, fails everything outstanding and
// closes Done.
func (c *Conn) end(readErr error) {
	c.nc.Close()
	var closed bool
	select {
	case <-c.closing:
		closed = true
	default:
	}
	c.mu.Lock()
	var ne net.Error
	switch {
	case closed:
		c.err = ErrClosed
	case c.serverErr != nil:
		c.err = c.serverErr
	case c.readTimeout > 0 && errors.As(readErr, &ne) && ne.Timeout():
		c.err = ErrHeartbeatTimeout
	case errors.Is(readErr, io.EOF) || errors.Is(readErr, io.ErrUnexpectedEOF):
		c.err = ErrConnectionLost
	default:
		c.err = fmt.Errorf("stomp client: read: %w", readErr)
	}
	c.ended = true
	pending, subs := c.pending, c.subs
	c.pending, c.subs = nil, nil
	err := c.err
	c.mu.Unlock()
	for _, ch := range pending {
		ch <- Result{Err: err}
	}
	for _, s := range subs {
		s.close()
	}
	close(c.done)
}

func (c *Conn) heartBeatLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.sendEvery / 2)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-c.closing:
			return
		case <-t.C:
			if !c.wrote.Swap(false) {
				if err := c.writeBytes([]byte{'\n'}); err != nil {
					return
				}
				c.wrote.Store(false)
			}
		}
	}
}
