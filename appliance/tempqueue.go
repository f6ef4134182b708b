package appliance

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// Temporary queues, for request/reply: /temp-queue/NAME names a queue
// private to the connection that uses it. Herald maps it to the queue
// "#tmp.SESSION.NAME" and rewrites a reply-to header naming /temp-queue/NAME
// to /queue/#tmp.SESSION.NAME, so that a responder anywhere can SEND the
// reply there. Only the owner may subscribe; the queue and its messages go
// when the owner's connection ends, and replies sent after that are dropped
// (with a RECEIPT when asked for, and counted).
const (
	prefixTempQueue = "/temp-queue/"
	tempPrefix      = "#tmp."
)

// tempName is the queue behind /temp-queue/name for this session.
func (s *session) tempName(name string) string {
	return tempPrefix + strconv.FormatUint(s.id, 10) + "." + name
}

// dest resolves a destination header, mapping /temp-queue/ names to this
// session's private queues.
func (s *session) dest(d string, subscribing bool) (destKind, string, error) {
	if rest, ok := strings.CutPrefix(d, prefixTempQueue); ok {
		kind, name, err := parseDest(prefixQueue+rest, subscribing)
		if err != nil {
			return 0, "", fmt.Errorf("%w (in %s)", err, d)
		}
		full := s.tempName(name)
		s.b.claimTemp(full, s)
		return kind, full, nil
	}
	kind, name, err := s.parseDest(d, subscribing)
	if err == nil && kind == destQueue && strings.HasPrefix(name, tempPrefix) && subscribing && s.b.tempOwner(name) != s {
		return 0, "", fmt.Errorf("%w %q: a temporary queue is read only by the connection that made it", ErrBadDest, d)
	}
	return kind, name, err
}

// rewriteReplyTo turns a reply-to of /temp-queue/NAME into the queue a
// responder can send to.
func (s *session) rewriteReplyTo(h stomp.Headers) {
	for i, kv := range h {
		if kv.Key == "reply-to" {
			if rest, ok := strings.CutPrefix(kv.Value, prefixTempQueue); ok && rest != "" {
				full := s.tempName(rest)
				s.b.claimTemp(full, s)
				h[i].Value = prefixQueue + full
			}
			return
		}
	}
}

// tempRoom checks that the temporary queues a SEND or SUBSCRIBE names (its
// destination, a reply-to) fit in the bounds: each name is remembered
// until the connection ends, so a name is at most maxTempName bytes (as a
// destination's; a reply-to was otherwise bounded only by
// stomp.max_header_line), and at most queues.max_queues names are
// remembered per connection and for all connections together. False: the
// session was failed with an ERROR naming the bound.
func (s *session) tempRoom(f *stomp.Frame) bool {
	max := s.b.cfg().Queues.MaxQueues
	for _, k := range []string{"destination", "reply-to"} {
		rest, ok := strings.CutPrefix(f.Get(k), prefixTempQueue)
		if !ok || rest == "" {
			continue
		}
		if len(rest) > maxTempName {
			s.fail(f, "invalid "+k, fmt.Sprintf("%s names a temporary queue of %d bytes (%s%.40s…); a queue's name must be 1 to %d bytes.", k, len(rest), prefixTempQueue, rest, maxTempName))
			return false
		}
		full := s.tempName(rest)
		s.b.mu.Lock()
		_, known := s.b.temps[full]
		n, all := len(s.temps), len(s.b.temps)
		s.b.mu.Unlock()
		if known {
			continue
		}
		if n >= max {
			s.fail(f, "too many temporary queues", fmt.Sprintf("This connection has named %d temporary queues (/temp-queue/…, in destination or reply-to headers), the most one connection may (queues.max_queues); %s is refused. Reuse the names, or reconnect to start afresh.", n, f.Get(k)))
			return false
		}
		if all >= max {
			s.fail(f, "too many temporary queues", fmt.Sprintf("The connections to this server have named %d temporary queues (/temp-queue/…, in destination or reply-to headers), the most they may together (queues.max_queues); %s is refused. Names are freed when the connections that made them end.", all, f.Get(k)))
			return false
		}
	}
	return true
}

// maxTempName is the most bytes of a /temp-queue/ name, as of any queue's
// (parseDest).
const maxTempName = 255

func (b *Broker) claimTemp(name string, s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.temps == nil {
		b.temps = map[string]*session{}
	}
	if _, ok := b.temps[name]; !ok {
		b.temps[name] = s
		s.temps = append(s.temps, name)
	}
}

func (b *Broker) tempOwner(name string) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.temps[name]
}

// tempGone reports whether name is a temporary queue whose owner is gone.
func (b *Broker) tempGone(name string) bool {
	return strings.HasPrefix(name, tempPrefix) && b.tempOwner(name) == nil
}

// dropTemps deletes the session's temporary queues and their messages.
func (s *session) dropTemps() {
	if len(s.temps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range s.temps {
		s.b.mu.Lock()
		delete(s.b.temps, name)
		s.b.mu.Unlock()
		// The queue and its dead letters: both are the owner's alone.
		for _, qn := range []string{name, s.b.cfg().Queues.DeadLetterQueue + name} {
			if s.b.lookupQueue(qn) == nil {
				continue
			}
			if _, err := s.b.DeleteQueue(ctx, qn); err != nil {
				s.log.Warn("temporary queue not deleted", "queue", qn, "err", err)
			}
		}
	}
	s.temps = nil
}
