package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

func testLogger() *slog.Logger {
	if os.Getenv("HERALD_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

func startBridge(t *testing.T, b *testbroker.Broker, cfg appliance.BridgeConfig) *bridge.Bridge {
	return startBridgeB(t, b, cfg)
}

func startBridgeB(t testing.TB, b *testbroker.Broker, cfg appliance.BridgeConfig) *bridge.Bridge {
	t.Helper()
	cfg = appliance.BridgeDefaults(cfg)
	c := appliance.DefaultConfig()
	c.Bridges = []appliance.BridgeConfig{cfg}
	if err := c.Validate(); err != nil {
		t.Fatalf("bridge config: %v", err)
	}
	br, err := bridge.New(bridge.Options{
		Config: cfg, LocalAddr: b.Addr, Logger: testLogger(), Seed: 1,
		QueueDepth: func(name string) (int64, int64, bool) {
			q, ok := b.Queue(name) // the test may be restarting b

			return int64(q.Messages), q.Bytes, ok
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	br.Start()
	t.Cleanup(br.Close)
	return br
}

func jsBridge(name, id, dir string, urls []string, maps ...appliance.BridgeMap) appliance.BridgeConfig {
	return appliance.BridgeConfig{
		Name: name, Kind: "jetstream", Direction: dir, URLs: urls, Stream: "HERALD", CreateStream: true,
		StreamSubjects: []string{"sites.>", "mesh.>"}, Replicas: 3, ApplianceID: id, MaxInFlight: 32,
		ReconnectMin: appliance.Duration{Duration: 50 * time.Millisecond}, ReconnectMax: appliance.Duration{Duration: time.Second},
		AckTimeout: appliance.Duration{Duration: time.Second}, Map: maps,
	}
}

// sendAll sends n messages to dest with receipts, calling at(i) before
// message i; it returns once every RECEIPT arrived.
func sendAll(t *testing.T, c *client.Conn, dest string, from, n int, at func(i int)) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if at != nil {
			at(i)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.SendReceipt(ctx, dest, []byte(strconv.Itoa(i)), stomp.Header{Key: "seq", Value: strconv.Itoa(i)})
		cancel()
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// receiveExactly reads n messages from sub, acknowledging each, and checks
// they are 0..n-1 in order, then that nothing more comes for quiet.
func receiveExactly(t *testing.T, c *client.Conn, sub *client.Subscription, n int, within, quiet time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for i := 0; i < n; i++ {
		select {
		case f, ok := <-sub.C():
			if !ok {
				t.Fatalf("subscription ended after %d of %d", i, n)
			}
			if got := string(f.Body); got != strconv.Itoa(i) {
				t.Fatalf("message %d: got %q (duplicate, loss or reordering)", i, got)
			}
			if f.Get("ack") != "" {
				if err := c.Ack(f); err != nil {
					t.Fatal(err)
				}
			}
		case <-deadline:
			t.Fatalf("only %d of %d messages arrived within %s", i, n, within)
		}
	}
	select {
	case f := <-sub.C():
		t.Fatalf("a message more than the %d sent: %q", n, f.Body)
	case <-time.After(quiet):
	}
}

// streamSubjectCount counts the messages of the stream on subject.
func streamSubjectCount(t *testing.T, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var info *jetstream.StreamInfo
	var err error
	for range 50 {
		s, e := js.Stream(ctx, "HERALD")
		if e == nil {
			info, err = s.Info(ctx, jetstream.WithSubjectFilter(subject))
			if err == nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info == nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Subjects[subject]
}

// upTo is "0".."n-1": the bodies the tests send.
func upTo(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// streamHolds reads the stream HERALD's messages on subject from the first
// and checks that the first len(want) are want, in stream order: stored
// once each, in the order sent. It reads 100 messages a Fetch of an
// ordered consumer, which creates a consumer per call (and deletes the
// last): one message a Next was one consumer a message, which crawls on a
// loaded cluster (fcc2a4c). A failed read is tried again, the ordered
// consumer starting after the last message it gave (the cluster may still
// be electing after faults), for up to within in all.
func streamHolds(t *testing.T, js jetstream.JetStream, subject string, want []string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, "HERALD", jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	n := len(want)
	for i := 0; i < n; {
		from := i
		batch, err := c.Fetch(min(100, n-i), jetstream.FetchMaxWait(5*time.Second))
		if err == nil {
			for m := range batch.Messages() {
				if i >= n {
					// Not asked for (Fetch asks for at most n-i):
					// left for a later check.
					continue
				}
				if got := string(m.Data()); got != want[i] {
					md, _ := m.Metadata()
					var seq uint64
					if md != nil {
						seq = md.Sequence.Stream
					}
					t.Fatalf("stream message %d on %s is %q (stream sequence %d), want %q: stored out of order, twice or not at all", i, subject, got, seq, want[i])
				}
				i++
			}
			err = batch.Error()
		}
		if (err != nil || i == from) && i < n {
			if ctx.Err() != nil {
				t.Fatalf("stream message %d of %d on %s: %v (read for %s)", i, n, subject, err, within)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// TestBridgeJetStreamExactlyOnce: site A's queue goes out to a 3-node
// JetStream cluster (replicas 3) and into site B's queue, while one NATS
// node is stopped and started, and then the whole cluster is down for a
// while (store and forward) and comes back. Every receipted message
// arrives at B exactly once and in order, and is in the stream once.
func TestBridgeJetStreamExactlyOnce(t *testing.T) {
	cl := natstest.Start(t, 3)
	a := testbroker.Start(t, nil)
	b := testbroker.Start(t, nil)
	// A window of 32 each way: order holds across stream leader changes
	// (Nats-Expected-Last-Sequence) and reconnections (the sequencer). The
	// stream takes A's subject only, so A's out direction keeps its window.
	own := func(c appliance.BridgeConfig) appliance.BridgeConfig {
		c.StreamSubjects = []string{"sites.a.orders"}
		return c
	}
	outA := startBridge(t, a, own(jsBridge("backbone", "site-a", "out", cl.URLs(), appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"})))
	inB := startBridge(t, b, own(jsBridge("backbone", "site-b", "in", cl.URLs(), appliance.BridgeMap{Local: "/queue/from-a", Remote: "sites.a.orders"})))

	waitUp(t, outA, inB)
	pa := a.Dial(t)
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(context.Background(), "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	sendAll(t, pa, "/queue/orders", 0, n, func(i int) {
		// Slow enough that the bridges live through each fault.
		if i >= 150 && i < 300 || i >= 400 && i < 500 {
			time.Sleep(10 * time.Millisecond)
		}
		switch i {
		case 150:
			cl.StopNode(0)
		case 300:
			cl.StartNode(0)
		case 400:
			// The whole backbone down: A keeps accepting (store and
			// forward), B has nothing to take.
			cl.Shutdown()
		case 500:
			for k := range 3 {
				go cl.StartNode(k)
			}
		}
	})
	receiveExactly(t, cb, sub, n, 90*time.Second, 2*time.Second)
	_, js := natstest.Connect(t, cl.URLs())
	if got := streamSubjectCount(t, js, "sites.a.orders"); got != n {
		t.Errorf("stream holds %d messages on sites.a.orders, want %d (each once)", got, n)
	}
	streamHolds(t, js, "sites.a.orders", upTo(n), 2*time.Minute)
	va, vb := outA.View(), inB.View()
	t.Logf("A out: %+v", va.Directions[0])
	t.Logf("B in: %+v", vb.Directions[0])
	if d := va.Directions[0]; d.Confirmed < n || d.Failures == 0 || d.Reconnects == 0 {
		t.Errorf("A out: confirmed %d, failures %d, reconnects %d: want >= %d confirmed and the outage counted", d.Confirmed, d.Failures, d.Reconnects, n)
	}
	if q, _ := a.B.Queue("orders"); q.Messages != 0 {
		t.Errorf("A's queue still holds %d messages", q.Messages)
	}
}

// TestBridgeOutDetectsAnotherWriter: the out direction with 32 in flight
// into a stream that takes subjects beyond its maps (sites.>), while
// another publisher writes into it and the stream's leader is made to step
// down again and again (each change can answer a publish "no responders"
// while the next one reaches the new leader). The bridge sends one at a
// time from the start (shared_stream), so its subject holds every message
// once, in the order sent. Before that rule, with a window until it
// noticed the other writer, a clean-clone run stored messages 1..3 as 2, 3,
// 1: the other writer's message took 1's predicted place, 1 was refused and
// the conditions of 2 and 3 held by coincidence. (Written first with
// Nats-Expected-Last-Msg-Id as the condition: the first refusal stopped
// the whole stream, nats-server 2.15.2.)
func TestBridgeOutDetectsAnotherWriter(t *testing.T) {
	cl := natstest.Start(t, 3)
	a := testbroker.Start(t, nil)
	outA := startBridge(t, a, jsBridge("backbone", "site-a", "out", cl.URLs(), appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"}))
	waitUp(t, outA)
	nc, js := natstest.Connect(t, cl.URLs())

	stop := make(chan struct{})
	var other sync.WaitGroup
	var otherN atomic.Int64
	other.Add(1)
	go func() {
		defer other.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f, err := js.PublishAsync("sites.other", []byte("x"))
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			select {
			case <-f.Ok():
				otherN.Add(1)
			case <-f.Err():
			case <-time.After(5 * time.Second):
			}
		}
	}()
	pa := a.Dial(t)
	const n = 1500
	stepdowns := 0
	sendAll(t, pa, "/queue/orders", 0, n, func(i int) {
		if i > 0 && i%250 == 0 {
			if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.HERALD", nil, 5*time.Second); err == nil {
				stepdowns++
			} else {
				t.Logf("step down at %d: %v", i, err)
			}
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for outA.View().Directions[0].Confirmed < n {
		if time.Now().After(deadline) {
			t.Fatalf("A out confirmed %d of %d (the other writer stored %d): %+v", outA.View().Directions[0].Confirmed, n, otherN.Load(), outA.View().Directions[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	other.Wait()
	if got := streamSubjectCount(t, js, "sites.a.orders"); got != n {
		t.Errorf("stream holds %d messages on sites.a.orders, want %d (each once)", got, n)
	}
	streamHolds(t, js, "sites.a.orders", upTo(n), 2*time.Minute)
	d := outA.View().Directions[0]
	t.Logf("A out: %d stepdowns, %d messages of the other writer; confirmed %d, refused %d, resent %d, failures %d, shared %v", stepdowns, otherN.Load(), d.Confirmed, d.Refused, d.Resent, d.Failures, d.SharedStream)
	if stepdowns == 0 || otherN.Load() == 0 {
		t.Fatalf("%d stepdowns, %d messages of the other writer: the test did not exercise them", stepdowns, otherN.Load())
	}
	if !d.SharedStream {
		t.Errorf("a stream open to other writers, but shared_stream false")
	}
}

// TestBridgeNoLoop: two appliances bridged both ways on the same subjects
// (a topic and a queue) do not send a message around: each message is in
// the stream once and reaches the other side once.
func TestBridgeNoLoop(t *testing.T) {
	cl := natstest.Start(t, 3)
	a := testbroker.Start(t, nil)
	b := testbroker.Start(t, nil)
	news := appliance.BridgeMap{Local: "/topic/news.>", Remote: "mesh.news.>"}
	ba := startBridge(t, a, jsBridge("mesh", "site-a", "both", cl.URLs(), news,
		appliance.BridgeMap{Local: "/queue/outbox", Remote: "mesh.work", Direction: "out"},
		appliance.BridgeMap{Local: "/queue/inbox", Remote: "mesh.work", Direction: "in"}))
	bb := startBridge(t, b, jsBridge("mesh", "site-b", "both", cl.URLs(), news))
	// B relays mesh.work back on to mesh.work through two bridges of its
	// own: only the origin header stops the message going round.
	relayIn := startBridge(t, b, jsBridge("relay-in", "site-b", "in", cl.URLs(), appliance.BridgeMap{Local: "/queue/relay", Remote: "mesh.work"}))
	relayOut := startBridge(t, b, jsBridge("relay-out", "site-b", "out", cl.URLs(), appliance.BridgeMap{Local: "/queue/relay", Remote: "mesh.work"}))
	waitUp(t, ba, bb, relayIn, relayOut)

	ca, cb := a.Dial(t), b.Dial(t)
	subA, _ := ca.SubscribeReceipt(context.Background(), "/topic/news.>", "auto")
	subB, _ := cb.SubscribeReceipt(context.Background(), "/topic/news.>", "auto")
	const n = 20
	sendAll(t, ca, "/topic/news.eu", 0, n, nil)
	receiveExactly(t, cb, subB, n, 30*time.Second, 2*time.Second)
	receiveExactly(t, ca, subA, n, 5*time.Second, 0) // its own, not echoed back
	_, js := natstest.Connect(t, cl.URLs())
	if got := streamSubjectCount(t, js, "mesh.news.eu"); got != n {
		t.Errorf("stream holds %d messages on mesh.news.eu, want %d: a loop", got, n)
	}

	// A queue message from A: in the stream once from A and once relayed
	// by B (origin site-a,site-b), then refused by both: A's inbox gets
	// none (it left A), B's relay takes none twice.
	sendAll(t, ca, "/queue/outbox", 0, n, nil)
	deadline := time.Now().Add(30 * time.Second)
	for streamSubjectCount(t, js, "mesh.work") < 2*n && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // room for a loop to show
	if got := streamSubjectCount(t, js, "mesh.work"); got != 2*n {
		t.Errorf("stream holds %d messages on mesh.work, want %d (A's and B's relay): a loop or a loss", got, 2*n)
	}
	qa, _ := a.B.Queue("inbox")
	qr, _ := b.B.Queue("relay")
	if qa.Messages != 0 || qr.Messages != 0 {
		t.Errorf("A's inbox holds %d, B's relay %d: want 0 (refused as loops); relay out %+v", qa.Messages, qr.Messages, relayOut.View().Directions[0])
	}
	var skipped uint64
	for _, br := range []*bridge.Bridge{ba, relayIn} {
		for _, d := range br.View().Directions {
			skipped += d.Skipped
		}
	}
	if skipped < 2*n {
		t.Errorf("%d messages refused as loops, want at least %d", skipped, 2*n)
	}
}

func waitUp(t *testing.T, bs ...*bridge.Bridge) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, b := range bs {
		for {
			all := true
			for _, d := range b.View().Directions {
				if d.State != "up" {
					all = false
				}
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("bridge %s not up: %+v", b.Name(), b.View())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

var _ = fmt.Sprint

func stompBridge(name, id, dir, host string, maps ...appliance.BridgeMap) appliance.BridgeConfig {
	return appliance.BridgeConfig{
		Name: name, Kind: "stomp", Direction: dir, Host: host, ApplianceID: id, MaxInFlight: 16,
		ReconnectMin: appliance.Duration{Duration: 20 * time.Millisecond}, ReconnectMax: appliance.Duration{Duration: 500 * time.Millisecond},
		AckTimeout: appliance.Duration{Duration: 2 * time.Second}, Map: maps,
	}
}

// TestBridgeStompBetweenHeralds: a STOMP bridge pushes A's /queue/orders
// to B's /queue/from-a, and another pulls A's /queue/outbox into B's
// /queue/inbox, across a restart of B and then of A (each on its data
// directory and address). Each queue at B gets every message once, in
// order.
func TestBridgeStompBetweenHeralds(t *testing.T) {
	addrA := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	addrB := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	a := testbroker.Start(t, func(c *appliance.Config) { c.Stomp.Listen = addrA })
	b := testbroker.Start(t, func(c *appliance.Config) { c.Stomp.Listen = addrB })
	t.Cleanup(a.Stop)
	t.Cleanup(b.Stop)
	push := startBridge(t, a, stompBridge("push-b", "site-a", "out", addrB, appliance.BridgeMap{Local: "/queue/orders", Remote: "/queue/from-a"}))
	pull := startBridge(t, b, stompBridge("pull-a", "site-b", "in", addrA, appliance.BridgeMap{Local: "/queue/inbox", Remote: "/queue/outbox"}))
	waitUp(t, push, pull)

	const n = 300
	send := func(i int) {
		for {
			c, err := client.Dial(context.Background(), addrA, client.Options{DialTimeout: time.Second})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err1 := c.SendReceipt(ctx, "/queue/orders", []byte(strconv.Itoa(i)), stomp.Header{Key: "dedup-id", Value: "o-" + strconv.Itoa(i)})
				_, err2 := c.SendReceipt(ctx, "/queue/outbox", []byte(strconv.Itoa(i)), stomp.Header{Key: "dedup-id", Value: "x-" + strconv.Itoa(i)})
				cancel()
				c.Close()
				if err1 == nil && err2 == nil {
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range n {
		switch i {
		case 100:
			b.Restart()
		case 200:
			a.Restart()
		}
		send(i)
	}
	cb := b.Dial(t)
	for _, q := range []string{"/queue/from-a", "/queue/inbox"} {
		sub, err := cb.SubscribeReceipt(context.Background(), q, "client-individual")
		if err != nil {
			t.Fatal(err)
		}
		t.Run(q, func(t *testing.T) { receiveExactly(t, cb, sub, n, 60*time.Second, time.Second) })
	}
	if v := push.View().Directions[0]; v.Reconnects == 0 {
		t.Errorf("push bridge: no reconnect counted across B's restart: %+v", v)
	}
}

// countingHandler counts the warnings logged, and keeps the last.
type countingHandler struct {
	mu   sync.Mutex
	n    int
	last string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		h.mu.Lock()
		h.n++
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				h.last = a.Value.String()
			}
			return true
		})
		h.mu.Unlock()
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestBridgeFailingLogsOncePerInterval: a bridge whose peer is gone retries
// many times but logs its reason once per log_interval.
func TestBridgeFailingLogsOncePerInterval(t *testing.T) {
	a := testbroker.Start(t, nil)
	deadAddr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	h := &countingHandler{}
	cfg := stompBridge("to-nowhere", "site-a", "out", deadAddr, appliance.BridgeMap{Local: "/queue/orders", Remote: "/queue/orders"})
	cfg.ReconnectMin = appliance.Duration{Duration: 5 * time.Millisecond}
	cfg.ReconnectMax = appliance.Duration{Duration: 20 * time.Millisecond}
	cfg.LogInterval = appliance.Duration{Duration: time.Second}
	br, err := bridge.New(bridge.Options{Config: appliance.BridgeDefaults(cfg), LocalAddr: a.Addr, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	br.Start()
	time.Sleep(2500 * time.Millisecond)
	br.Close()
	v := br.View().Directions[0]
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n < 2 || h.n > 3 {
		t.Errorf("%d warnings in 2.5s with log_interval 1s, want 2 or 3", h.n)
	}
	if !strings.Contains(h.last, deadAddr) {
		t.Errorf("the warning's reason %q does not name the peer %s", h.last, deadAddr)
	}
	if !v.Failing || v.LastError == "" {
		t.Errorf("view: %+v: want failing with its error", v)
	}
}

// TestBridgeStreamMustExist: without create_stream, a missing stream is a
// failing bridge whose error says what to do; once the stream exists the
// bridge comes up and carries messages.
func TestBridgeStreamMustExist(t *testing.T) {
	cl := natstest.Start(t, 1)
	a := testbroker.Start(t, nil)
	cfg := jsBridge("backbone", "site-a", "out", cl.URLs(), appliance.BridgeMap{Local: "/queue/orders", Remote: "sites.a.orders"})
	cfg.CreateStream = false
	cfg.Replicas = 1
	br := startBridge(t, a, cfg)
	deadline := time.Now().Add(20 * time.Second)
	for !br.View().Failing() {
		if time.Now().After(deadline) {
			t.Fatalf("not failing without its stream: %+v", br.View())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e := br.View().Directions[0].LastError; !strings.Contains(e, "stream HERALD does not exist") || !strings.Contains(e, "create_stream = true") {
		t.Errorf("error %q: want it to name the stream and create_stream", e)
	}
	sendAll(t, a.Dial(t), "/queue/orders", 0, 5, nil)
	_, js := natstest.Connect(t, cl.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HERALD", Subjects: []string{"sites.>"}}); err != nil {
		t.Fatal(err)
	}
	waitUp(t, br)
	for streamSubjectCount(t, js, "sites.a.orders") != 5 {
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatalf("the 5 messages kept while the stream was missing did not arrive")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
