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
	s, f, err := c.newSubscription(dest, ack, hdrs)
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
	s, f, err := c.newSubscription(dest, ack, hdrs)
	if err != nil {
		return nil, err
	}
	if _, err := c.Request(ctx, f); err != nil {
		c.dropSubscription(s)
		return nil, fmt.Errorf("stomp client: subscribe to %s: %w", dest, err)
	}
	return s, nil
}

func (c *Conn) newSubscription(dest, ack string, hdrs []stomp.Header) (*Subscription, *stomp.Frame, error) {
	if ack == "" {
		ack = "auto"
	}
	s := &Subscription{
		c:    c,
		id:   "sub-" + strconv.FormatUint(c.seq.Add(1), 10),
		ch:   make(chan *stomp.Frame, c.subBuf),
		stop: make(chan struct{}),
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
// subscription or the connection is closing.
func (s *Subscription) deliver(f *stomp.Frame, closing <-chan struct{}) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.closed {
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
