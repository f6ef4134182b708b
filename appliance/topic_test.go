package appliance_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
)

func TestMatchTopic(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.*.c", "a.b.c", true},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c.d", true},
		{"a.>", "a", false},
		{">", "x", true},
		{"*", "x.y", false},
		{"*.*", "x.y", true},
	} {
		if got := appliance.MatchTopic(tc.pattern, tc.name); got != tc.want {
			t.Errorf("MatchTopic(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestTopic_FanOutAndWildcards(t *testing.T) {
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	exact, _ := c.SubscribeReceipt(ctxT(t), "/topic/metrics.cpu", "auto")
	star, _ := c.SubscribeReceipt(ctxT(t), "/topic/metrics.*", "auto")
	rest, _ := c.SubscribeReceipt(ctxT(t), "/topic/metrics.>", "auto")
	other := tb.Dial(t)
	none, _ := other.SubscribeReceipt(ctxT(t), "/topic/logs.>", "auto")
	p := tb.Dial(t)
	p.SendReceipt(ctxT(t), "/topic/metrics.cpu", []byte("cpu 1"), hdr("x-h", "v"))
	p.SendReceipt(ctxT(t), "/topic/metrics.disk.sda", []byte("disk 2"))
	if m := recv(t, exact); string(m.Body) != "cpu 1" || m.Get("x-h") != "v" || m.Get("destination") != "/topic/metrics.cpu" {
		t.Fatalf("exact got %q %v", m.Body, m.Headers)
	}
	if m := recv(t, star); string(m.Body) != "cpu 1" {
		t.Fatalf("star got %q", m.Body)
	}
	eq(t, bodies(t, rest, 2), []string{"cpu 1", "disk 2"})
	expectNone(t, star, 100*time.Millisecond)
	expectNone(t, none, 50*time.Millisecond)
}

func TestTopic_NoSubscriberIsGone(t *testing.T) {
	tb := mustStartBroker(t, nil)
	p := tb.Dial(t)
	p.SendReceipt(ctxT(t), "/topic/void", []byte("lost"))
	c := tb.Dial(t)
	sub, _ := c.SubscribeReceipt(ctxT(t), "/topic/void", "auto")
	p.SendReceipt(ctxT(t), "/topic/void", []byte("seen"))
	if m := recv(t, sub); string(m.Body) != "seen" {
		t.Fatalf("got %q, want seen", m.Body)
	}
}

func TestTopic_SlowSubscriberDropped(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Topics.SubscriberBuffer = 64 })
	dropsBefore := tb.B.Stats().SlowDrops
	// A subscriber that never reads its socket.
	slow := dialRaw(t, tb)
	slow.connect("1.2")
	slow.write("SUBSCRIBE\nid:1\ndestination:/topic/firehose\nreceipt:ok\n\n\x00")
	if f := slow.frame(); f.Command != "RECEIPT" {
		t.Fatalf("got %s", f.Command)
	}
	fast := tb.Dial(t)
	sub, _ := fast.SubscribeReceipt(ctxT(t), "/topic/firehose", "auto")
	p := tb.Dial(t)
	body := []byte(strings.Repeat("x", 8192))
	const n = 2000
	// Paced in bursts of 16 so that the fast subscriber never lags more than
	// its buffer; the slow one falls behind for good.
	for i := 0; i < n; i += 16 {
		for j := i; j < i+16; j++ {
			p.Send("/topic/firehose", append([]byte(strconv.Itoa(j)+" "), body...))
		}
		for j := i; j < i+16; j++ {
			if m := recv(t, sub); !strings.HasPrefix(string(m.Body), strconv.Itoa(j)+" ") {
				t.Fatalf("fast subscriber got %.10q, want %d", m.Body, j)
			}
		}
	}
	// The slow one: an ERROR naming the reason arrives among its messages,
	// then the connection closes.
	slow.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := slow.r.ReadFrame()
		if err != nil {
			t.Fatalf("slow subscriber closed without ERROR: %v", err)
		}
		if f != nil && f.Command == stomp.CmdError {
			if !strings.Contains(f.Get("message"), "slow consumer") {
				t.Fatalf("ERROR %q, want slow consumer", f.Get("message"))
			}
			break
		}
	}
	slow.closed()
	// Counted once: one slow subscriber dropped.
	if got := tb.B.Stats().SlowDrops - dropsBefore; got != 1 {
		t.Fatalf("slow_subscriber_drops_total rose by %d, want 1", got)
	}
	if v := topicView(tb, "firehose"); v.Dropped < 1 || v.In != n {
		t.Fatalf("topic firehose: got in %d, dropped %d; want in %d, dropped at least 1", v.In, v.Dropped, n)
	}
}

// topicView returns the view of topic name (zero if it has none).
func topicView(tb *testBroker, name string) appliance.TopicView {
	for _, v := range tb.B.Topics() {
		if v.Name == name {
			return v
		}
	}
	return appliance.TopicView{Name: name}
}

func TestTopic_LastValue(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) { c.Topics.LastValue = true })
	p := tb.Dial(t)
	p.SendReceipt(ctxT(t), "/topic/temp.kitchen", []byte("20"))
	p.SendReceipt(ctxT(t), "/topic/temp.kitchen", []byte("21"), hdr("unit", "C"))
	p.SendReceipt(ctxT(t), "/topic/temp.hall", []byte("18"))
	c := tb.Dial(t)
	exact, _ := c.SubscribeReceipt(ctxT(t), "/topic/temp.kitchen", "auto")
	if m := recv(t, exact); string(m.Body) != "21" || m.Get("last-value") != "true" || m.Get("unit") != "C" {
		t.Fatalf("got %q %v, want the last value 21 marked last-value", m.Body, m.Headers)
	}
	wild, _ := c.SubscribeReceipt(ctxT(t), "/topic/temp.*", "auto")
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		got[string(recv(t, wild).Body)] = true
	}
	if !got["21"] || !got["18"] {
		t.Fatalf("wildcard subscriber got %v, want the last value of both topics", got)
	}
	p.SendReceipt(ctxT(t), "/topic/temp.kitchen", []byte("22"))
	if m := recv(t, exact); string(m.Body) != "22" || m.Get("last-value") != "" {
		t.Fatalf("live message %q %v", m.Body, m.Headers)
	}
}

func TestTopic_DropOldestAnnounced(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.SubscriberBuffer = 16
		c.Topics.SlowSubscriber = "drop-oldest"
	})
	dropsBefore := tb.B.Stats().SlowDrops
	slow := dialRaw(t, tb)
	slow.connect("1.2")
	slow.write("SUBSCRIBE\nid:1\ndestination:/topic/burst\nreceipt:ok\n\n\x00")
	if f := slow.frame(); f.Command != "RECEIPT" {
		t.Fatalf("got %s", f.Command)
	}
	p := tb.Dial(t)
	body := strings.Repeat("y", 32<<10)
	const n = 600 // ~19 MB: far more than socket buffers hold
	for i := 0; i < n; i++ {
		p.Send("/topic/burst", []byte(strconv.Itoa(i)+" "+body))
	}
	p.SendReceipt(ctxT(t), "/topic/burst", []byte("end"))
	// Read everything: every missing message is announced by the
	// dropped-before header of the next one.
	next, announced, lost := 0, 0, 0
	slow.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		f := slow.frame()
		if d := f.Get("dropped-before"); d != "" {
			k, _ := strconv.Atoi(d)
			announced += k
		}
		if string(f.Body) == "end" {
			lost += n - next
			break
		}
		i, _ := strconv.Atoi(strings.SplitN(string(f.Body), " ", 2)[0])
		if i < next {
			t.Fatalf("message %d after %d: out of order", i, next-1)
		}
		lost += i - next
		next = i + 1
	}
	if lost == 0 {
		t.Fatal("nothing was dropped: the test did not fill the buffer")
	}
	if announced != lost {
		t.Fatalf("lost %d messages, announced %d", lost, announced)
	}
	// Every drop counted once: broker-wide and on the connection.
	if got := tb.B.Stats().SlowDrops - dropsBefore; got != uint64(lost) {
		t.Fatalf("slow_subscriber_drops_total rose by %d, want %d (the messages lost)", got, lost)
	}
	peer := slow.c.LocalAddr().String()
	var conn *appliance.ConnView
	for _, v := range tb.B.Connections() {
		if v.Peer == peer {
			conn = &v
		}
	}
	if conn == nil {
		t.Fatalf("connection from %s not listed", peer)
	}
	if conn.SlowDrops != uint64(lost) {
		t.Fatalf("connection from %s: got slow_drops %d, want %d", peer, conn.SlowDrops, lost)
	}
	if v := topicView(tb, "burst"); v.Dropped != uint64(lost) {
		t.Fatalf("topic burst: got dropped_total %d, want %d (the messages lost)", v.Dropped, lost)
	}
}

// Two topic subscriptions on one slow connection: a dropped message of one
// must be announced even when the message that pushed it out belongs to the
// other and its own subscription has nothing else queued. Per subscription,
// the messages received plus the dropped-before counts equal the messages
// published.
func TestTopic_DropOldestAnnouncedPerSubscription(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.SubscriberBuffer = 16
		c.Topics.SlowSubscriber = "drop-oldest"
	})
	slow := dialRaw(t, tb)
	slow.connect("1.2")
	slow.write("SUBSCRIBE\nid:a\ndestination:/topic/rare\n\n\x00" +
		"SUBSCRIBE\nid:b\ndestination:/topic/busy\nreceipt:ok\n\n\x00")
	if f := slow.frame(); f.Command != "RECEIPT" {
		t.Fatalf("got %s", f.Command)
	}
	p := tb.Dial(t)
	body := strings.Repeat("z", 32<<10)
	// Each round: one message of a, then more than the buffer holds of b,
	// so that once the socket is full every message of a is pushed out by
	// messages of b with no later message of a queued.
	const rounds, perRound = 40, 20 // ~27 MB: far more than socket buffers hold
	published := map[string]int{}
	for r := 0; r < rounds; r++ {
		p.Send("/topic/rare", []byte("a "+body))
		published["a"]++
		for i := 0; i < perRound; i++ {
			p.Send("/topic/busy", []byte("b "+body))
			published["b"]++
		}
	}
	// The last message is never dropped (nothing comes after it), nor is
	// the last of b (the end message drops an older one of b).
	if _, err := p.SendReceipt(ctxT(t), "/topic/rare", []byte("end")); err != nil {
		t.Fatal(err)
	}
	published["a"]++
	received, announced := map[string]int{}, map[string]int{}
	slow.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		f := slow.frame()
		if f.Command != stomp.CmdMessage {
			t.Fatalf("got %s %v", f.Command, f.Headers)
		}
		sub := f.Get("subscription")
		received[sub]++
		if d := f.Get("dropped-before"); d != "" {
			k, err := strconv.Atoi(d)
			if err != nil || k < 1 {
				t.Fatalf("dropped-before %q", d)
			}
			announced[sub] += k
		}
		if string(f.Body) == "end" {
			break
		}
	}
	if received["b"] == published["b"] || received["a"] == published["a"] {
		t.Fatalf("received %v of %v: nothing of one subscription was dropped; the test did not fill the buffer", received, published)
	}
	for _, sub := range []string{"a", "b"} {
		if got := received[sub] + announced[sub]; got != published[sub] {
			t.Errorf("subscription %s: %d received + %d announced as dropped = %d, want %d published", sub, received[sub], announced[sub], got, published[sub])
		}
	}
}

// dropped-before is the broker's to set: a publisher's header of that name
// is not passed on, or a subscriber would count drops that never happened.
func TestTopic_PublisherCannotFakeDrops(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.SlowSubscriber = "drop-oldest"
	})
	c := tb.Dial(t)
	sub, err := c.SubscribeReceipt(ctxT(t), "/topic/fake", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendReceipt(ctxT(t), "/topic/fake", []byte("x"), hdr("dropped-before", "5"), hdr("kept", "yes"),
		hdr("history", "true"), hdr("history-gap", "true"), hdr("last-value", "true"), hdr("timestamp", "1")); err != nil {
		t.Fatal(err)
	}
	m := recv(t, sub)
	// The same for the other headers only the broker sets.
	for _, k := range []string{"dropped-before", "history", "history-gap", "last-value"} {
		if v, ok := m.Headers.Lookup(k); ok {
			t.Fatalf("subscriber got %s:%s from the publisher", k, v)
		}
	}
	if ts, err := strconv.ParseInt(m.Get("timestamp"), 10, 64); err != nil || time.Since(time.UnixMilli(ts)).Abs() > time.Minute {
		t.Fatalf("timestamp %q, want the broker's (ms since the epoch, now), not the publisher's", m.Get("timestamp"))
	}
	if m.Get("kept") != "yes" {
		t.Fatalf("other headers lost: %v", m.Headers)
	}
}
