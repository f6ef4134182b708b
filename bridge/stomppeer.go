package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

func stompDial(ctx context.Context, w *worker) (*client.Conn, error) {
	c := w.cfg()
	var tc = w.tls
	if tc != nil {
		tc = tc.Clone()
	}
	conn, err := client.Dial(ctx, c.Host, client.Options{
		Login: c.User, Passcode: c.Password, TLS: tc,
		DialTimeout: 5 * time.Second, HeartBeat: [2]time.Duration{10 * time.Second, 10 * time.Second},
		SubscriptionBuffer: c.MaxInFlight + 16,
		// What this appliance accepts: a peer's message within it is
		// read and sent here (direction in).
		Limits: w.o.limits(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to the STOMP peer %s: %w", c.Host, err)
	}
	return conn, nil
}

func connAlive(c *client.Conn) bool {
	if c == nil {
		return false
	}
	select {
	case <-c.Done():
		return false
	default:
		return true
	}
}

// stompOut sends to a STOMP peer (direction out), each SEND with a
// receipt and the dedup-id header.
type stompOut struct {
	w    *worker
	conn *client.Conn
}

func (s *stompOut) ok() bool { return connAlive(s.conn) }

func (s *stompOut) close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

func (s *stompOut) connect(ctx context.Context) error {
	if s.ok() {
		return nil
	}
	s.close()
	c, err := stompDial(ctx, s.w)
	if err != nil {
		return err
	}
	s.conn = c
	return nil
}

func (s *stompOut) publish(key, gen, _ uint64, h handle) error {
	if s.conn == nil {
		return errors.New("not connected to the STOMP peer")
	}
	hdrs := append(append(stomp.Headers(nil), h.headers...), stomp.Header{Key: "dedup-id", Value: h.id}, stomp.Header{Key: "persistent", Value: "true"})
	c := s.conn
	var ch <-chan client.Result
	err := s.w.guarded(c, func() (err error) {
		ch, err = c.SendAsync(h.dest, h.body, hdrs...)
		return err
	})
	if err != nil {
		return fmt.Errorf("send to %s at the peer: %w", h.dest, err)
	}
	w := s.w
	go func() {
		r := <-ch
		if r.Err != nil {
			w.report(result{key: key, gen: gen, err: fmt.Errorf("send to %s at the peer: %w", h.dest, r.Err)})
			return
		}
		w.report(result{key: key, gen: gen})
	}()
	return nil
}

// stompIn subscribes at a STOMP peer with client-individual acks
// (direction in).
type stompIn struct {
	w    *worker
	conn *client.Conn
}

func (s *stompIn) ok() bool { return connAlive(s.conn) }

func (s *stompIn) close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

func (s *stompIn) connect(ctx context.Context) error {
	if s.ok() {
		return nil
	}
	if s.conn != nil {
		s.close()
		// Its unacked messages go back to the peer's queues.
		s.w.core.SourceLost(time.Now().UnixNano())
		s.w.dropDeadHandles()
	}
	c, err := stompDial(ctx, s.w)
	if err != nil {
		return err
	}
	w := s.w
	for _, m := range w.maps {
		sub, err := c.SubscribeReceipt(ctx, m.Remote, "client-individual",
			stomp.Header{Key: "prefetch-count", Value: strconv.Itoa(w.cfg().MaxInFlight)})
		if err != nil {
			c.Close()
			return fmt.Errorf("subscribe to %s at the peer: %w", m.Remote, err)
		}
		in := w.remoteIn
		name := w.cfg().Name
		go func() {
			for f := range sub.C() {
				dest := f.Get("destination")
				mm, rest, ok := matchRemote(w.maps, dest)
				if !ok {
					mm, rest = m, ""
				}
				msg := inMsg{
					id:      "stomp:" + name + ":" + f.Get("message-id"),
					dest:    mapName(mm.Local, rest),
					headers: carried(f.Headers, true),
					body:    f.Body,
					ack:     func() error { return w.guarded(c, func() error { return c.Ack(f) }) },
				}
				select {
				case in <- msg:
				case <-c.Done():
					return
				}
			}
		}()
	}
	s.conn = c
	return nil
}
