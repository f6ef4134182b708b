package client

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/herald-mq/herald/appliance/stomp"
)

// Subscription receives the MESSAGE frames of one SUBSCRIBE.
type Subscription struct {
	c  *Conn
	id string
	ch chan *stomp.Frame
	fn func(f *stomp.Frame, more bool) // SubscribeFunc: called instead of sending on ch

	stop     chan struct{} // closed first when the subscription ends: unblocks deliver
	stopOnce sync.Once
	sendMu   sync.Mutex // held by deliver while it may send on ch
	closed   bool       // ch is closed; guarded by sendMu
}

// ID returns the subscription id.
func (s *Subscription) ID() string { return s.id }

// C delivers the subscription's MESSAGE frames. It is bounded and must be
// drained (see the package documentation); it is closed when the
// subscription or the connection ends.
func (s *Subscription) C() <-chan *stomp.Frame { return s.ch }

// Subscribe subscribes to dest with ack mode ack ("" means auto) and extra
// headers, without waiting for the server: messages may start arriving at
// once, and a refusal arrives as an ERROR frame. The id is generated.
func (c *Conn) Subscribe(dest, ack string, hdrs ...stomp.Header) (*Subscription, error) {
	return c.subscribe(dest, ack, hdrs, nil)
}

// subscribe writes the SUBSCRIBE of a new subscription (fn: SubscribeFunc's).
func (c *Conn) subscribe(dest, ack string, hdrs []stomp.Header, fn func(*stomp.Frame, bool)) (*Subscription, error) {
	s, f, err := c.newSubscription(dest, ack, hdrs, fn)
	if err != nil {
		return nil, err
	}
	if err := c.Write(f); err != nil {
		c.dropSubscription(s)
		return nil, fmt.Errorf("stomp client: subscribe to %s: %w", dest, err)
	}
	return s, nil
}

// SubscribeReceipt is Subscribe, but also waits for the server's RECEIPT, so
// that the subscription is known to be in place (for topics, where messages
// sent before it are not delivered).
func (c *Conn) SubscribeReceipt(ctx context.Context, dest, ack string, hdrs ...stomp.Header) (*Subscription, error) {
	s, f, err := c.newSubscription(dest, ack, hdrs, nil)
	if err != nil {
		return nil, err
	}
	if _, err := c.Request(ctx, f); err != nil {
		c.dropSubscription(s)
		return nil, fmt.Errorf("stomp client: subscribe to %s: %w", dest, err)
	}
	return s, nil
}

// SubscribeFunc is Subscribe with a function instead of a channel: fn is
// called with each MESSAGE on the connection's reading goroutine, in order,
// with more set when another whole frame is already buffered (a consumer
// that acknowledges with AckBuffered flushes once more is false). No
// goroutine hand-over per message, as nats.go's callback subscriptions.
// fn must return promptly: while it runs the connection reads nothing (no
// RECEIPT, no other subscription's MESSAGE). It may Ack, AckBuffered,
// Flush, Send and Write, but must not wait for a RECEIPT or call
// Unsubscribe or Close. C is closed when the subscription ends and
// receives nothing.
func (c *Conn) SubscribeFunc(dest, ack string, fn func(f *stomp.Frame, more bool), hdrs ...stomp.Header) (*Subscription, error) {
	return c.subscribe(dest, ack, hdrs, fn)
}

func (c *Conn) newSubscription(dest, ack string, hdrs []stomp.Header, fn func(*stomp.Frame, bool)) (*Subscription, *stomp.Frame, error) {
	if ack == "" {
		ack = "auto"
	}
	s := &Subscription{
		c:    c,
		id:   "sub-" + strconv.FormatUint(c.seq.Add(1), 10),
		ch:   make(chan *stomp.Frame, c.subBuf),
		fn:   fn,
		stop: make(chan struct{}),
	}
	if fn != nil {
		s.ch = make(chan *stomp.Frame) // closed at the end, never sent on
	}
	f := &stomp.Frame{Command: stomp.CmdSubscribe, Headers: make(stomp.Headers, 0, len(hdrs)+3)}
	f.Headers = append(f.Headers,
		stomp.Header{Key: "id", Value: s.id},
		stomp.Header{Key: "destination", Value: dest},
		stomp.Header{Key: "ack", Value: ack})
	f.Headers = append(f.Headers, hdrs...)

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return nil, nil, fmt.Errorf("stomp client: subscribe to %s: %w", dest, c.err)
	}
	c.subs[s.id] = s
	return s, f, nil
}

func (c *Conn) dropSubscription(s *Subscription) {
	c.mu.Lock()
	if c.subs != nil {
		delete(c.subs, s.id)
	}
	c.mu.Unlock()
	s.close()
}

// Unsubscribe stops delivery at once (C is closed; messages still in flight
// are dropped, and the server returns unacknowledged ones to the queue),
// then sends UNSUBSCRIBE and waits for its receipt.
func (s *Subscription) Unsubscribe(ctx context.Context) error {
	s.c.dropSubscription(s)
	f := stomp.NewFrame(stomp.CmdUnsubscribe, "id", s.id)
	if _, err := s.c.Request(ctx, f); err != nil {
		return fmt.Errorf("stomp client: unsubscribe %s: %w", s.id, err)
	}
	return nil
}

// deliver hands f to the consumer, waiting while C is full, unless the
// subscription or the connection is closing; or calls the SubscribeFunc
// function (more: another whole frame is buffered).
func (s *Subscription) deliver(f *stomp.Frame, more bool, closing <-chan struct{}) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.closed {
		return
	}
	if s.fn != nil {
		s.fn(f, more)
		return
	}
	select {
	case s.ch <- f:
		return
	default:
	}
	// The read deadline is set again before the next read, so time spent
	// waiting here for the consumer is not taken for the server's silence.
	select {
	case s.ch <- f:
	case <-s.stop:
	case <-closing:
	}
}

// close ends the subscription: it unblocks deliver, then closes C.
func (s *Subscription) close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
}
