package bridge

import (
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

// inHeaders are the headers of a message of the peer (direction in) that
// go into its local SEND. Dropped and counted: a transaction header (any
// NATS publisher may set one; Herald would take it for a STOMP transaction
// not open on the bridge's connection, and keeps none anyway), and a
// header whose value this appliance would refuse
// (appliance.BridgeInHeaderOK: an expires, delay or AMQ_SCHEDULED_DELAY
// that is not a number in range). A SEND refused for a header fails the
// bridge's connection, and the message was sent again at every attempt:
// nothing behind it came in.
func (w *worker) inHeaders(h stomp.Headers) stomp.Headers {
	out := make(stomp.Headers, 0, len(h)+2)
	for _, x := range h {
		if x.Key == "transaction" {
			w.droppedHeader(x.Key, "a STOMP transaction header in the local SEND would name a transaction not open")
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
