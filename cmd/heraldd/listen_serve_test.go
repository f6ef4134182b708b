package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestListenServe: `herald listen --serve` on a receiver host re-serves the channel: messages
// published on the appliance host reach a WebSocket STOMP subscriber and an SSE client on the
// receiver host (Go clients, over loopback in its namespace), in order; the receiver loses 10% of
// the datagrams and its NAKs are blocked, so losses are gaps, and each gap reaches both clients as
// a gap (a MESSAGE with gap-from/gap-to, an SSE "gap" event) exactly where herald listen reports it.
func TestListenServe(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace tests skipped in -short mode")
	}
	testenv.RequireRoot(t, "ip", "nft", "go")
	herald := buildHerald(t, t.TempDir())
	nw := newMCNet(t, "app", "r1")
	const group, port = "239.255.78.12:7812", 7812
	nw.dropShare("r1", port)
	ns := nw.NS["r1"]
	mcSh(t, "ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "t", "output", "{ type filter hook output priority 0 ; }")
	mcSh(t, "ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "t", "output", "meta", "l4proto", "udp", "drop") // no NAK leaves r1
	dir := t.TempDir()
	d := nw.startDaemon(t, "app", writeDaemonConfig(t, dir, nw.Addr["app"].String(), mcChannel{group: group, topics: []string{"metrics.>"}}))
	l := nw.startListener(t, herald, "r1", group, "--serve", "127.0.0.1:0")
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(20 * time.Millisecond) {
		if m := regexp.MustCompile(`serving http://([0-9.:]+)/`).FindStringSubmatch(l.stderr.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("herald listen --serve printed no address: %s", l.stderr)
		}
	}
	dial := func() net.Conn { // a TCP connection made in r1's namespace
		var c net.Conn
		if err := nw.in("r1", func() error {
			var err error
			c, err = net.DialTimeout("tcp", addr, 5*time.Second)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// SSE.
	sc := dial()
	defer sc.Close()
	fmt.Fprintf(sc, "GET /events?topic=metrics.%%3E&format=json HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(sc), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /events: %v %v", err, resp)
	}
	sseCov := newCoverage()
	go func() {
		s := bufio.NewScanner(resp.Body)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		typ := ""
		for s.Scan() {
			line := s.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				var m struct {
					Topic, Body, Reason string
					From, To            uint64
				}
				if json.Unmarshal([]byte(line[6:]), &m) != nil {
					continue
				}
				switch typ {
				case "":
					sseCov.msg(m.Topic, m.Body)
				case "gap":
					sseCov.gap(m.Topic, m.From, m.To)
				}
			case line == "":
				typ = ""
			}
		}
	}()
	// WebSocket STOMP.
	wc := dial()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/stomp", &websocket.DialOptions{Subprotocols: []string{"v12.stomp"},
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return wc, nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)
	send := func(f *stomp.Frame) {
		if err := ws.Write(ctx, websocket.MessageText, stomp.Encode(f, stomp.V12)); err != nil {
			t.Fatal(err)
		}
	}
	send(stomp.NewFrame(stomp.CmdConnect, "accept-version", "1.2", "host", "/"))
	send(stomp.NewFrame(stomp.CmdSubscribe, "id", "0", "destination", "/topic/metrics.>", "receipt", "sub"))
	wsCov := newCoverage()
	subscribed := make(chan struct{})
	go func() {
		rd := stomp.NewReader(websocket.NetConn(context.Background(), ws, websocket.MessageText), stomp.Limits{})
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				return
			}
			if f == nil {
				continue
			}
			rd.SetVersion(stomp.V12)
			switch {
			case f.Command == stomp.CmdReceipt:
				close(subscribed)
			case f.Command == stomp.CmdMessage && f.Get("gap-from") != "":
				from, _ := strconv.ParseUint(f.Get("gap-from"), 10, 64)
				to, _ := strconv.ParseUint(f.Get("gap-to"), 10, 64)
				wsCov.gap(strings.TrimPrefix(f.Get("destination"), "/topic/"), from, to)
			case f.Command == stomp.CmdMessage:
				wsCov.msg(strings.TrimPrefix(f.Get("destination"), "/topic/"), string(f.Body))
			}
		}
	}()
	select {
	case <-subscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("no RECEIPT for SUBSCRIBE")
	}
	pub := nw.dialStomp(t, "app", d.stomp)
	count := map[string]uint64{}
	topics := []string{"metrics.cpu", "metrics.mem"}
	publish(t, pub, count, topics, 4000, 5000)
	waitAll(t, 15*time.Second, 1, count, l) // herald listen has every message or its gap
	listenGaps := 0
	for _, e := range l.snapshot() {
		if e.Gap != nil {
			listenGaps += int(e.Gap.To - e.Gap.From + 1)
		}
	}
	if listenGaps == 0 {
		t.Fatal("herald listen reported no gap: the test wants losses (10% dropped, NAKs blocked)")
	}
	for name, cov := range map[string]*coverage{"WebSocket": wsCov, "SSE": sseCov} {
		deadline := time.Now().Add(10 * time.Second)
		for !cov.reached(count) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cov.mu.Lock()
		if cov.err != "" {
			t.Errorf("%s: %s", name, cov.err)
		}
		for topic, n := range count {
			if cov.next[topic] != n+1 {
				t.Errorf("%s: %s at %d, want %d", name, topic, cov.next[topic]-1, n)
			}
		}
		if cov.gapped != listenGaps {
			t.Errorf("%s: %d messages in gaps, herald listen reported %d", name, cov.gapped, listenGaps)
		}
		t.Logf("%s: %d messages, %d in gaps", name, cov.msgs, cov.gapped)
		cov.mu.Unlock()
	}
}

// coverage checks a client's view of a channel: per topic, messages (bodies mcBody) and gaps
// contiguous from 1.
type coverage struct {
	mu           sync.Mutex
	next         map[string]uint64
	msgs, gapped int
	err          string
}

func newCoverage() *coverage { return &coverage{next: map[string]uint64{}} }

func (c *coverage) at(topic string) uint64 {
	if c.next[topic] == 0 {
		c.next[topic] = 1
	}
	return c.next[topic]
}

func (c *coverage) msg(topic, body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.at(topic)
	if body != mcBody(topic, n) && c.err == "" {
		c.err = fmt.Sprintf("%s: got %q, want %q", topic, body, mcBody(topic, n))
	}
	c.next[topic]++
	c.msgs++
}

func (c *coverage) gap(topic string, from, to uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.at(topic); from != n && c.err == "" {
		c.err = fmt.Sprintf("%s: gap %d-%d, want it to start at %d", topic, from, to, n)
	}
	c.next[topic] = to + 1
	c.gapped += int(to - from + 1)
}

func (c *coverage) reached(want map[string]uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, n := range want {
		if c.next[topic] <= n {
			return false
		}
	}
	return true
}
