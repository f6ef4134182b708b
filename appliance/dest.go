package appliance

import (
	"fmt"
	"strings"

	"github.com/herald-mq/herald/appliance/lockcore"
)

// Destination kinds.
const (
	prefixQueue = "/queue/"
	prefixTopic = "/topic/"
	// prefixStream: retained, ordered logs with offsets (stream.go).
	prefixStream = "/stream/"
	prefixKV     = "/kv/"   // key-value buckets (kv.go)
	prefixLock   = "/lock/" // advisory locks (lock.go)
)

type destKind int

const (
	destQueue destKind = iota + 1
	destTopic
	destStream
	destKV
	destLock
)

// parseDest splits a STOMP destination into its kind and name, and checks
// the name: non-empty, at most 255 bytes, no control characters; topics may
// use the wildcards * and > only as whole dot-separated segments (and only
// when subscribing).
func parseDest(d string, subscribing bool) (destKind, string, error) {
	var kind destKind
	var name string
	switch {
	case strings.HasPrefix(d, prefixQueue):
		kind, name = destQueue, d[len(prefixQueue):]
	case strings.HasPrefix(d, prefixTopic):
		kind, name = destTopic, d[len(prefixTopic):]
	case strings.HasPrefix(d, prefixStream):
		kind, name = destStream, d[len(prefixStream):]
	case strings.HasPrefix(d, prefixKV):
		kind, name = destKV, d[len(prefixKV):]
	case strings.HasPrefix(d, prefixLock):
		kind, name = destLock, d[len(prefixLock):]
		if err := lockcore.CheckName(name); err != nil {
			return 0, "", fmt.Errorf("%w %q: %v", ErrBadDest, d, err)
		}
	default:
		return 0, "", fmt.Errorf("%w %q: use /queue/NAME, /topic/NAME, /stream/NAME, /kv/BUCKET.KEY or /lock/NAME", ErrBadDest, d)
	}
	if name == "" || len(name) > 255 {
		return 0, "", fmt.Errorf("%w %q: the name must be 1 to 255 bytes", ErrBadDest, d)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return 0, "", fmt.Errorf("%w %q: control characters are not allowed", ErrBadDest, d)
		}
	}
	if kind != destTopic && kind != destKV && strings.ContainsAny(name, "*>") {
		return 0, "", fmt.Errorf("%w %q: wildcards are for topics only", ErrBadDest, d)
	}
	if kind == destKV {
		bucket, key, _ := strings.Cut(name, ".")
		if err := checkBucketName(bucket); err != nil {
			return 0, "", fmt.Errorf("%w %q: %v (wildcards are for keys, not buckets)", ErrBadDest, d, err)
		}
		if key == "" {
			return 0, "", fmt.Errorf("%w %q: name a key after the bucket: /kv/BUCKET.KEY (a watch of every key: /kv/BUCKET.>)", ErrBadDest, d)
		}
	}
	if kind == destTopic || kind == destKV {
		// Segment by segment, without allocating (every SEND comes here).
		for rest, more := name, true; more; {
			var s string
			s, rest, more = strings.Cut(rest, ".")
			if s == "" {
				return 0, "", fmt.Errorf("%w %q: empty segment between dots", ErrBadDest, d)
			}
			wild := s == "*" || s == ">"
			if strings.ContainsAny(s, "*>") && !wild {
				return 0, "", fmt.Errorf("%w %q: * and > must be whole segments", ErrBadDest, d)
			}
			if wild && !subscribing {
				return 0, "", fmt.Errorf("%w %q: wildcards are only allowed in SUBSCRIBE", ErrBadDest, d)
			}
			if s == ">" && more {
				return 0, "", fmt.Errorf("%w %q: > must be the last segment", ErrBadDest, d)
			}
		}
	}
	return kind, name, nil
}

// parseDest is parseDest for s's frames (reader goroutine): the last
// destination sent to is remembered, since a publisher sends to the same
// one again and again and every SEND is parsed twice (authorize, then its
// handler).
func (s *session) parseDest(d string, subscribing bool) (destKind, string, error) {
	if !subscribing && d != "" && d == s.lastDest.d {
		return s.lastDest.kind, s.lastDest.name, nil
	}
	kind, name, err := parseDest(d, subscribing)
	if err == nil && !subscribing {
		s.lastDest = parsedDest{d, kind, name}
	}
	return kind, name, err
}

// parsedDest is a destination and what parseDest made of it.
type parsedDest struct {
	d    string
	kind destKind
	name string
}

// MatchTopic reports whether topic name matches pattern: * matches one
// dot-separated segment, > one or more trailing segments.
func MatchTopic(pattern, name string) bool {
	for {
		var p, n string
		pi := strings.IndexByte(pattern, '.')
		if pi < 0 {
			p = pattern
		} else {
			p = pattern[:pi]
		}
		if p == ">" {
			return name != ""
		}
		ni := strings.IndexByte(name, '.')
		if ni < 0 {
			n = name
		} else {
			n = name[:ni]
		}
		if p != "*" && p != n {
			return false
		}
		if pi < 0 || ni < 0 {
			return pi < 0 && ni < 0
		}
		pattern, name = pattern[pi+1:], name[ni+1:]
	}
}

func hasWildcard(name string) bool { return strings.ContainsAny(name, "*>") }
