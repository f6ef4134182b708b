package appliance_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

func historyConfig(keep int) func(*appliance.Config) {
	return func(c *appliance.Config) {
		c.Topics.History = []appliance.TopicHistoryRule{{Match: "h.>", Keep: keep}}
	}
}

func seqOf(t *testing.T, id string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(strings.TrimPrefix(id, "t"), 10, 64)
	if err != nil || !strings.HasPrefix(id, "t") {
		t.Fatalf("message-id %q: want t<sequence>", id)
	}
	return n
}

func TestTopicHistory_LastNThenLive(t *testing.T) {
	tb := mustStartBroker(t, historyConfig(5))
	p := tb.Dial(t)
	ctx := ctxT(t)
	for i := 0; i < 8; i++ {
		p.SendReceipt(ctx, "/topic/h.temp", []byte(strconv.Itoa(i)), hdr("timestamp", "1"))
	}
	p.SendReceipt(ctx, "/topic/other", []byte("not kept"))
	c := tb.Dial(t)
	sub, err := c.SubscribeReceipt(ctx, "/topic/h.temp", "auto", hdr("history", "3"))
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().UnixMilli()
	for i := 5; i < 8; i++ {
		m := recv(t, sub)
		if string(m.Body) != strconv.Itoa(i) || m.Get("history") != "true" {
			t.Fatalf("history %d: got %q %v", i, m.Body, m.Headers)
		}
		// The broker's timestamp, not the publisher's.
		if ts, err := strconv.ParseInt(m.Get("timestamp"), 10, 64); err != nil || ts < before-60_000 || ts > before {
			t.Fatalf("timestamp %q, want the broker's (about %d)", m.Get("timestamp"), before)
		}
	}
	p.SendReceipt(ctx, "/topic/h.temp", []byte("live"))
	if m := recv(t, sub); string(m.Body) != "live" || m.Get("history") != "" || m.Get("timestamp") == "" {
		t.Fatalf("live: got %q %v", m.Body, m.Headers)
	}
	// More than kept: the 5 kept. A topic no rule keeps: nothing.
	all, _ := c.SubscribeReceipt(ctx, "/topic/h.*", "auto", hdr("history", "100"))
	var got []string
	for i := 0; i < 5; i++ {
		got = append(got, string(recv(t, all).Body))
	}
	if strings.Join(got, ",") != "4,5,6,7,live" {
		t.Fatalf("history of h.*: %v, want the 5 kept", got)
	}
	other, _ := c.SubscribeReceipt(ctx, "/topic/other", "auto", hdr("history", "10"))
	expectNone(t, other, 200*time.Millisecond)
	expectNone(t, sub, 10*time.Millisecond)

	// Bad headers: a clear ERROR.
	for _, h := range []stomp.Header{hdr("history", "-1"), hdr("history", "x"), hdr("history", "99999999"), hdr("history-after", "42")} {
		c2 := tb.Dial(t)
		_, err := c2.SubscribeReceipt(ctx, "/topic/h.temp", "auto", h)
		if err == nil || !strings.Contains(err.Error(), "invalid "+h.Key) {
			t.Fatalf("%s:%s: got %v, want an invalid %s ERROR", h.Key, h.Value, err, h.Key)
		}
	}
}

// checkContiguous checks one subscriber's stream of a single topic: some
// history messages (marked), then live ones, message-ids consecutive (the
// broker's sequence counts only this topic's messages in the test), the
// history at most n long and exactly n when the first id says more were
// published before, and the last id the last published.
func checkContiguous(t *testing.T, who string, ids []uint64, hist []bool, n int, total uint64) {
	t.Helper()
	if len(ids) == 0 {
		t.Fatalf("%s: got nothing", who)
	}
	h := 0
	for h < len(hist) && hist[h] {
		h++
	}
	for i := h; i < len(hist); i++ {
		if hist[i] {
			t.Fatalf("%s: a history message at %d after a live one at %d", who, i, h)
		}
	}
	if h > n || (ids[0] > 1 && h != n) {
		t.Fatalf("%s: %d history messages starting at t%d, want %d", who, h, ids[0], n)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			t.Fatalf("%s: t%d after t%d (message %d, history %v): a gap or a duplicate", who, ids[i], ids[i-1], i, hist[i])
		}
	}
	if ids[len(ids)-1] != total {
		t.Fatalf("%s: last t%d, want t%d", who, ids[len(ids)-1], total)
	}
}

// History then live under concurrent publishing, over TCP, WebSocket and
// SSE: subscribers join while four publishers send, and each must see a
// contiguous run of the topic's sequence.
func TestTopicHistory_ConcurrentHandover(t *testing.T) {
	const (
		keep       = 64
		n          = 20
		publishers = 4
		perPub     = 1500
	)
	tb := mustStartBroker(t, historyConfig(keep))
	addr := startWeb(t, tb, nil)
	total := uint64(publishers * perPub)
	var published atomic.Uint64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for p := 0; p < publishers; p++ {
		c := tb.Dial(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < perPub-1; i++ {
				if err := c.Send("/topic/h.conc", []byte(strconv.Itoa(i))); err != nil {
					t.Error(err)
					return
				}
				published.Add(1)
				if i%50 == 0 {
					time.Sleep(time.Millisecond) // spread over the joins
				}
			}
			if _, err := c.SendReceipt(ctxT(t), "/topic/h.conc", []byte("last")); err != nil {
				t.Error(err)
			}
			published.Add(1)
		}()
	}
	type result struct {
		who  string
		ids  []uint64
		hist []bool
	}
	results := make(chan result, 16)
	collect := func(who string, next func() (string, bool, bool)) {
		var r result
		r.who = who
		for {
			id, h, ok := next()
			if !ok {
				break
			}
			s := seqOf(t, id)
			r.ids = append(r.ids, s)
			r.hist = append(r.hist, h)
			if s == total {
				break
			}
		}
		results <- r
	}
	close(start)
	joinAt := []uint64{0, 200, 1500, 3000, 4500}
	var subs sync.WaitGroup
	for k, at := range joinAt {
		for published.Load() < at {
			time.Sleep(100 * time.Microsecond)
		}
		// TCP. Each client buffers every message the test sends: its
		// reader must not stall on a full subscription channel before
		// the RECEIPT arrives (the collector starts after it).
		c := tb.Dial(t, func(o *client.Options) { o.SubscriptionBuffer = 1 << 16 })
		sub, err := c.SubscribeReceipt(ctxT(t), "/topic/h.conc", "auto", hdr("history", strconv.Itoa(n)))
		if err != nil {
			t.Fatal(err)
		}
		subs.Add(3)
		go func() {
			defer subs.Done()
			collect(fmt.Sprintf("tcp%d", k), frameNext(sub))
		}()
		// WebSocket
		wc, err := wsClient(t, addr, client.Options{SubscriptionBuffer: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		wsub, err := wc.SubscribeReceipt(ctxT(t), "/topic/h.conc", "auto", hdr("history", strconv.Itoa(n)))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer subs.Done()
			collect(fmt.Sprintf("ws%d", k), frameNext(wsub))
		}()
		// SSE
		_, s := openSSE(t, addr, "topic=h.conc&format=json&history="+strconv.Itoa(n), nil, nil)
		go func() {
			defer subs.Done()
			collect(fmt.Sprintf("sse%d", k), func() (string, bool, bool) {
				ev := s.nextEvent(t)
				var j struct {
					ID      string
					History bool
				}
				if err := json.Unmarshal([]byte(ev.data), &j); err != nil || j.ID != ev.id {
					t.Errorf("event %+v: %v", ev, err)
					return "", false, false
				}
				return j.ID, j.History, true
			})
		}()
	}
	wg.Wait()
	subs.Wait()
	close(results)
	seen := 0
	for r := range results {
		checkContiguous(t, r.who, r.ids, r.hist, n, total)
		seen++
	}
	if seen != 3*len(joinAt) {
		t.Fatalf("%d subscribers finished, want %d", seen, 3*len(joinAt))
	}
}

func frameNext(sub *client.Subscription) func() (string, bool, bool) {
	return func() (string, bool, bool) {
		select {
		case f, ok := <-sub.C():
			if !ok {
				return "", false, false
			}
			return f.Get("message-id"), f.Get("history") == "true", true
		case <-time.After(10 * time.Second):
			return "", false, false
		}
	}
}

// Last-Event-ID resumes an SSE stream from history, and says when some of
// what it missed is gone.
func TestTopicHistory_SSEResume(t *testing.T) {
	tb := mustStartBroker(t, historyConfig(4))
	addr := startWeb(t, tb, nil)
	p := tb.Dial(t)
	ctx := ctxT(t)
	var ids []string
	for i := 0; i < 6; i++ {
		f, err := p.SendReceipt(ctx, "/topic/h.r", []byte(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		_ = f
	}
	_, s := openSSE(t, addr, "topic=h.r&history=4", nil, nil)
	for i := 2; i < 6; i++ {
		ev := s.nextEvent(t)
		if ev.data != strconv.Itoa(i) {
			t.Fatalf("history event %+v, want %d", ev, i)
		}
		ids = append(ids, ev.id)
	}
	// Resume after the second kept: the two after it.
	h := http.Header{"Last-Event-Id": {ids[1]}}
	_, r := openSSEComment(t, addr, "topic=h.r", h, "resuming after "+ids[1])
	for i := 4; i < 6; i++ {
		if ev := r.nextEvent(t); ev.data != strconv.Itoa(i) || ev.id != ids[i-2] {
			t.Fatalf("resumed event %+v, want %d (%s)", ev, i, ids[i-2])
		}
	}
	p.SendReceipt(ctx, "/topic/h.r", []byte("6"))
	if ev := r.nextEvent(t); ev.data != "6" {
		t.Fatalf("live after resume: %+v", ev)
	}
	// Resume from before what is kept: a comment says messages were lost,
	// then the kept ones.
	first := seqOf(t, ids[0])
	h = http.Header{"Last-Event-Id": {"t" + strconv.FormatUint(first-2, 10)}}
	_, g := openSSEComment(t, addr, "topic=h.r", h, "resuming after")
	ev := g.next(t)
	if !strings.Contains(ev.comment, "history gap") {
		t.Fatalf("got %+v, want a history gap comment", ev)
	}
	if ev := g.nextEvent(t); ev.data != "3" {
		t.Fatalf("after the gap: %+v, want 3 (the oldest kept)", ev)
	}
}

// openSSEComment opens a stream whose opening comment must contain want.
func openSSEComment(t *testing.T, addr, query string, h http.Header, want string) (*http.Response, *sseStream) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/events?"+query, nil)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := newSSEStream(resp)
	if ev := s.next(t); !strings.Contains(ev.comment, want) {
		t.Fatalf("opening comment %q, want %q", ev.comment, want)
	}
	return resp, s
}

// The byte bound: history never holds more than topics.history_max_bytes,
// the oldest of any topic go first, and what it holds is charged to the
// memory budget.
func TestTopicHistory_ByteBound(t *testing.T) {
	tb := mustStartBroker(t, func(c *appliance.Config) {
		c.Topics.History = []appliance.TopicHistoryRule{{Match: "h.>", Keep: 1000}}
		c.Topics.HistoryMaxBytes = 64 << 10
	})
	p := tb.Dial(t)
	ctx := ctxT(t)
	body := strings.Repeat("x", 1000)
	for i := 0; i < 200; i++ {
		p.SendReceipt(ctx, fmt.Sprintf("/topic/h.t%d", i%3), []byte(body))
	}
	st := tb.B.Stats()
	if st.HistoryBytes > 64<<10 || st.HistoryBytes < 50<<10 || st.HistoryDropped == 0 {
		t.Fatalf("history bytes %d, dropped %d: want near and under 65536, some dropped", st.HistoryBytes, st.HistoryDropped)
	}
	if st.MemoryUsed < st.HistoryBytes {
		t.Fatalf("memory used %d < history bytes %d: not charged", st.MemoryUsed, st.HistoryBytes)
	}
	// A reload that removes the rule frees it all.
	cfg := *tb.B.Config()
	cfg.Topics.History = nil
	if _, err := tb.B.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if st := tb.B.Stats(); st.HistoryBytes != 0 || st.HistoryMessages != 0 {
		t.Fatalf("after the reload: %d bytes, %d messages kept", st.HistoryBytes, st.HistoryMessages)
	}
}

func TestTopicHistory_ConfigValidate(t *testing.T) {
	for _, c := range []struct {
		rule appliance.TopicHistoryRule
		max  int64
		want string
	}{
		{appliance.TopicHistoryRule{Match: "", Keep: 1}, 1 << 20, "topics.history[0].match"},
		{appliance.TopicHistoryRule{Match: "a..b", Keep: 1}, 1 << 20, "topics.history[0].match"},
		{appliance.TopicHistoryRule{Match: "a", Keep: 0}, 1 << 20, "topics.history[0].keep"},
		{appliance.TopicHistoryRule{Match: "a", Keep: 1, MaxAge: appliance.Duration{Duration: -time.Second}}, 1 << 20, "topics.history[0].max_age"},
		{appliance.TopicHistoryRule{Match: "a", Keep: 1}, 10, "topics.history_max_bytes"},
	} {
		cfg := appliance.DefaultConfig()
		cfg.Topics.History = []appliance.TopicHistoryRule{c.rule}
		cfg.Topics.HistoryMaxBytes = c.max
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: got %v, want an error naming %s", c.rule, err, c.want)
		}
	}
}

func newSSEStream(resp *http.Response) *sseStream {
	return &sseStream{resp: resp, r: bufio.NewReader(resp.Body)}
}
