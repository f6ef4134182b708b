package appliance_test

import (
	"strconv"
	"strings"
	"testing"
)

// TestQueue_NackReason: a NACK with requeue:false may say why in a reason
// header; the dead letter's dlq-reason is then "nack: " and the reason
// (control characters made spaces, cut to 200 bytes), the broker's word
// first. Without one it stays "nack".
//
// Before: the reason header was ignored (dlq-reason: nack), and a bridge
// dead-lettering a message NATS refuses could not say so where the message
// is.
func TestQueue_NackReason(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	c := tb.Dial(t)
	for i, tc := range []struct{ reason, want string }{
		{"too large for NATS", "nack: too large for NATS"},
		{"line\none", "nack: line one"},
		{strings.Repeat("é", 150), "nack: " + strings.Repeat("é", 100)},
		{"", "nack"},
	} {
		q := "nr" + strconv.Itoa(i)
		sendN(t, p, "/queue/"+q, 1, "x")
		s, _ := c.Subscribe("/queue/"+q, "client-individual")
		m := recv(t, s)
		if tc.reason != "" {
			c.Nack(m, hdr("requeue", "false"), hdr("reason", tc.reason))
		} else {
			c.Nack(m, hdr("requeue", "false"))
		}
		ds, _ := c.Subscribe("/queue/DLQ."+q, "auto")
		if d := recv(t, ds); d.Get("dlq-reason") != tc.want {
			t.Errorf("NACK reason %q: dlq-reason %q, want %q", tc.reason, d.Get("dlq-reason"), tc.want)
		}
	}
}
