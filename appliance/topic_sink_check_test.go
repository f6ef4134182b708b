package appliance_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// sizeSink is a TopicSink with a size limit (like a multicast channel: one datagram).
type sizeSink struct {
	max int
	mu  sync.Mutex
	got []string
}

func (s *sizeSink) Name() string              { return "limited" }
func (s *sizeSink) Matches(topic string) bool { return strings.HasPrefix(topic, "m.") }
func (s *sizeSink) Check(topic string, _ stomp.Headers, body []byte) error {
	if len(body) > s.max {
		return fmt.Errorf("%d bytes on %s: over the sink's %d", len(body), topic, s.max)
	}
	return nil
}
func (s *sizeSink) Publish(topic string, _ stomp.Headers, body []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, string(body))
	return nil
}

// TestTopicSinkCheck: a message a sink refuses (TopicSinkChecker) gets the publisher an ERROR and
// reaches no one, alone or in a transaction; what the sink accepts goes to everyone.
func TestTopicSinkCheck(t *testing.T) {
	sink := &sizeSink{max: 50}
	tb := startWrapped(t, nil, nil, sink)
	sub := dialRaw(t, tb)
	sub.connect("1.2")
	sub.write("SUBSCRIBE\nid:1\ndestination:/topic/m.>\nreceipt:s\n\n\x00")
	if f := sub.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("got %s, want RECEIPT", f.Command)
	}
	big := strings.Repeat("x", 100)

	p := dialRaw(t, tb)
	p.connect("1.2")
	p.write("SEND\ndestination:/topic/m.big\n\n" + big + "\x00")
	if f := p.frame(); f.Command != stomp.CmdError || f.Get("message") != "message not sent" || !strings.Contains(string(f.Body), "over the sink's 50") {
		t.Errorf("a message the sink refuses: got %s %v %q, want ERROR naming the sink's reason", f.Command, f.Headers, f.Body)
	}
	p.closed()

	tx := dialRaw(t, tb)
	tx.connect("1.2")
	tx.write("BEGIN\ntransaction:t1\n\n\x00SEND\ndestination:/topic/m.small\ntransaction:t1\n\nsmall\x00" +
		"SEND\ndestination:/topic/m.big\ntransaction:t1\n\n" + big + "\x00COMMIT\ntransaction:t1\nreceipt:c\n\n\x00")
	if f := tx.frame(); f.Command != stomp.CmdError || f.Get("message") != "transaction not committed" {
		t.Errorf("a transaction with a message the sink refuses: got %s %v %q, want ERROR", f.Command, f.Headers, f.Body)
	}

	ok := dialRaw(t, tb)
	ok.connect("1.2")
	ok.write("SEND\ndestination:/topic/m.fine\nreceipt:r\n\nfine\x00")
	if f := ok.frame(); f.Command != stomp.CmdReceipt {
		t.Fatalf("a message the sink accepts: got %s %v %q, want RECEIPT", f.Command, f.Headers, f.Body)
	}
	// The subscriber's next message is the accepted one: nothing refused reached it.
	if f := sub.frame(); f.Command != stomp.CmdMessage || string(f.Body) != "fine" {
		t.Errorf("subscriber got %s %q, want MESSAGE \"fine\" (and nothing before it)", f.Command, f.Body)
	}
	// The sink is called before the receipt is sent.
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.got) != 1 || sink.got[0] != "fine" {
		t.Errorf("sink got %q, want only \"fine\"", sink.got)
	}
}
