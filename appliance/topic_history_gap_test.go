package appliance_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// A reader resuming with history-after past messages that left the
// history is told so by history-gap:true on the first message of the topic
// (README, "Topic history"), also when nothing of the topic is left to
// carry the mark: the byte bound evicted its whole ring (and the ring was
// forgotten), or max_age aged it all out. The mark then goes on the
// topic's next live message, for an exact and for a pattern subscription;
// no other message carries it.
func TestTopicHistory_ResumeGapWithNothingLeft(t *testing.T) {
	cases := []struct {
		name, pattern string
		maxAge        time.Duration
	}{
		{"evicted exact", "g.a", 0},
		{"evicted pattern", "g.>", 0},
		{"aged exact", "g.a", 50 * time.Millisecond},
		{"aged pattern", "g.>", 50 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := mustStartBroker(t, func(c *appliance.Config) {
				c.Topics.History = []appliance.TopicHistoryRule{{Match: "g.a", Keep: 10, MaxAge: appliance.Duration{Duration: tc.maxAge}}, {Match: "g.>", Keep: 10}}
				c.Topics.HistoryMaxBytes = 1024
			})
			ctx := ctxT(t)
			p := tb.Dial(t)
			c := tb.Dial(t)
			live, err := c.SubscribeReceipt(ctx, "/topic/g.a", "auto")
			if err != nil {
				t.Fatal(err)
			}
			p.SendReceipt(ctx, "/topic/g.a", []byte("1"))
			seen := recv(t, live).Get("message-id")
			if err := live.Unsubscribe(ctx); err != nil {
				t.Fatal(err)
			}
			// Missed by the reader while it is away.
			p.SendReceipt(ctx, "/topic/g.a", []byte("2"))
			p.SendReceipt(ctx, "/topic/g.a", []byte("3"))
			if tc.maxAge > 0 {
				time.Sleep(3 * tc.maxAge)
			} else {
				// Another topic's message evicts all of g.a's for the byte bound.
				p.SendReceipt(ctx, "/topic/g.b", []byte(strings.Repeat("b", 600)))
			}
			sub, err := c.SubscribeReceipt(ctx, "/topic/"+tc.pattern, "auto", hdr("history", "10"), hdr("history-after", seen))
			if err != nil {
				t.Fatal(err)
			}
			p.SendReceipt(ctx, "/topic/g.a", []byte("4"))
			p.SendReceipt(ctx, "/topic/g.a", []byte("5"))
			var got []string
			for len(got) < 2 {
				m := recv(t, sub)
				gap := m.Get("history-gap") == "true"
				if m.Get("destination") != "/topic/g.a" {
					if gap {
						t.Fatalf("g.b's message %s marked history-gap:true: it lost nothing after %s", m.Get("message-id"), seen)
					}
					continue // g.b's history
				}
				if want := len(got) == 0; gap != want {
					t.Fatalf("resumed after %s (message 1) on %s: g.a's message %q (%s, history %q) has history-gap %v, want %v: messages 2 and 3 were lost from history", seen, tc.pattern, m.Body, m.Get("message-id"), m.Get("history"), gap, want)
				}
				got = append(got, string(m.Body))
			}
			if got[0] != "4" || got[1] != "5" {
				t.Fatalf("g.a after the resume: %q, want [4 5]", got)
			}
		})
	}
}
