package bridge

import (
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// HeaderPct starts the NATS key of a header that cannot cross to NATS as
// it is: "herald-bridge-pct-" + the key, percent-encoded, with the value
// percent-encoded too (natsHeaders). The in direction decodes it
// (stompHeaders), so a message carried through NATS from one Herald to
// another arrives with its headers as sent.
const HeaderPct = "herald-bridge-pct-"

// natsKeyOK reports whether NATS takes k as a header key as it is:
// printable ASCII (33 to 126) but for "()/,:;<=>?@[\]{} (nats.go refuses
// the whole message otherwise: ErrBadHeaderMsg), and not starting with
// HeaderPct (which the in direction would decode).
func natsKeyOK(k string) bool {
	if k == "" || strings.HasPrefix(k, HeaderPct) {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !natsKeyByte(k[i]) {
			return false
		}
	}
	return true
}

func natsKeyByte(b byte) bool {
	return b >= 33 && b <= 126 && strings.IndexByte("\"()/,:;<=>?@[\\]{}", b) < 0
}

// natsValueOK reports whether a header value crosses NATS unchanged:
// nats.go trims leading and trailing white space (space, tab, CR, LF) and
// turns CR and LF into spaces, and the wire format has no way to carry
// them.
func natsValueOK(v string) bool {
	if strings.ContainsAny(v, "\r\n") {
		return false
	}
	if v != "" && (isSpace(v[0]) || isSpace(v[len(v)-1])) {
		return false
	}
	return true
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

const hexDigits = "0123456789ABCDEF"

// pctEncode writes every byte of s that keep refuses, and '%', as %XX.
func pctEncode(s string, keep func(byte) bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' && keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// pctDecode undoes pctEncode; false if s is not percent-encoded.
func pctDecode(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), true
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// valueByte: what an encoded value keeps as it is (not white space or a
// control character).
func valueByte(c byte) bool { return c > ' ' && c != 0x7f }

// natsHeaders are a local message's headers as a NATS message carries
// them (direction out to JetStream). A header whose key NATS refuses
// ('/', ':', '@', '=', non-ASCII...: nats.go refused the whole publish,
// which failed the link at every attempt and held up everything behind
// it) or whose value NATS would alter (leading or trailing white space,
// CR, LF) goes as HeaderPct + key: value, both percent-encoded.
func natsHeaders(h stomp.Headers) nats.Header {
	out := make(nats.Header, len(h))
	for _, x := range h {
		if natsKeyOK(x.Key) && natsValueOK(x.Value) {
			out[x.Key] = append(out[x.Key], x.Value)
			continue
		}
		k := HeaderPct + pctEncode(x.Key, natsKeyByte)
		out[k] = append(out[k], pctEncode(x.Value, valueByte))
	}
	return out
}

// stompHeaders are a NATS message's headers as the local SEND carries them
// (direction in from JetStream), but for those skip names: HeaderPct keys
// decoded (natsHeaders), keys in order, and the values of a key NATS
// carries several times joined with commas (Herald keeps one value per
// key: the first of repeated STOMP headers).
func stompHeaders(h nats.Header, skip func(string) bool) stomp.Headers {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(stomp.Headers, 0, len(keys)+2)
	for _, k := range keys {
		vs := h[k]
		if len(vs) == 0 {
			continue
		}
		if rest, ok := strings.CutPrefix(k, HeaderPct); ok {
			dk, ok1 := pctDecode(rest)
			dvs := make([]string, len(vs))
			ok2 := true
			for i, v := range vs {
				if dvs[i], ok = pctDecode(v); !ok {
					ok2 = false
				}
			}
			if ok1 && ok2 {
				k, vs = dk, dvs
			}
		}
		if skip(k) {
			continue
		}
		out = append(out, stomp.Header{Key: k, Value: strings.Join(vs, ",")})
	}
	return out
}

// inHeaders are the headers of a message of the peer (direction in) that
// go into its local SEND. Dropped and counted: a transaction header (any
// NATS publisher may set one; Herald would take it for a STOMP transaction
// not open on the bridge's connection, and keeps none anyway), and a
// header whose value this appliance would refuse
// (appliance.BridgeInHeaderOK: an expires, delay or AMQ_SCHEDULED_DELAY
// that is not a number in range). A SEND refused for a header fails the
// bridge's connection, and the message was sent again at every attempt:
// nothing behind it came in. Dropped too: a reply-to naming a temporary
// queue of the other side (tempReplyTo).
func (w *worker) inHeaders(h stomp.Headers) stomp.Headers {
	out := make(stomp.Headers, 0, len(h)+2)
	for _, x := range h {
		if x.Key == "transaction" {
			w.droppedHeader(x.Key, "a STOMP transaction header in the local SEND would name a transaction not open")
			continue
		}
		if w.tempReplyTo(x) {
			continue
		}
		if !appliance.BridgeInHeaderOK(x.Key, x.Value) {
			w.droppedHeader(x.Key, "its value is not one this appliance accepts: "+x.Value)
			continue
		}
		out = append(out, x)
	}
	return out
}

// droppedHeader counts a header dropped from a message crossing the link,
// logging it at most once per log_interval.
func (w *worker) droppedHeader(key, why string) {
	w.headersDropped.Add(1)
	now := time.Now()
	if now.Sub(w.lastHdrLogAt) >= w.cfg().LogInterval.Duration {
		w.lastHdrLogAt = now
		w.b.log.Warn("bridge: a header dropped from a message crossing the link (the message goes on without it; herald_bridge_headers_dropped_total counts them)", "direction", w.dir, "header", key, "reason", why)
	}
}

// outHeaders drops from the headers of a local message going out
// (carried) a reply-to naming a temporary queue of this appliance
// (tempReplyTo).
func (w *worker) outHeaders(h stomp.Headers) stomp.Headers {
	out := h[:0]
	for _, x := range h {
		if !w.tempReplyTo(x) {
			out = append(out, x)
		}
	}
	return out
}

// tempReplyTo reports whether x is a reply-to naming a temporary queue
// (appliance.BridgeTempReplyTo), counting and logging it as a header
// dropped. Such a queue is private to one connection of the broker the
// message was sent to: replies sent to it across the link reach nobody.
// Coming in, the local SEND would rewrite /temp-queue/NAME into a
// temporary queue of the bridge's own connection (read by nobody, and
// more distinct names than queues.max_queues failed the bridge's
// connection); /queue/#tmp.SESSION.NAME, a Herald peer's rewriting, names
// here the temporary queue of whichever local connection has that session
// number, and going out, the same at a Herald peer. Request/reply across
// a bridge takes a named reply queue, mapped back over a bridge.
func (w *worker) tempReplyTo(x stomp.Header) bool {
	if x.Key != "reply-to" || !appliance.BridgeTempReplyTo(x.Value) {
		return false
	}
	w.droppedHeader(x.Key, "it names a temporary queue, private to a connection of the broker the message was sent to, which replies across the bridge cannot reach (use a named reply queue, mapped back over a bridge): "+x.Value)
	return true
}
