package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/natstest"
)

// The test binary also runs NATS nodes, as child processes
// (natstest.StartProcs), for kill -9.
func init() { natstest.RunChildIfAsked() }

func writeBridgeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "herald.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// streamInOrder reads the stream HERALD's messages on subject from the
// first and checks that the first n are "0".."n-1", in stream order: each
// message once, in order. It reads 100 messages a Fetch of an ordered
// consumer, each Fetch (and each Next) of which deletes its consumer and
// creates another through the cluster's meta leader: read with Next, one
// message a call, TestBridgeKillNine's 1500 were 1500 consumers, and under
// a 25 % CPU quota three runs of 3 were answered "no responders" (from
// message 879, 736, 626 on) until their 90 s were up (fcc2a4c). A failed
// read is tried again, the ordered consumer starting after the last
// message it gave (the cluster may still be electing after a node's
// restart), for up to within.
func streamInOrder(t *testing.T, js jetstream.JetStream, subject string, n int, within time.Duration) {
	t.Helper()
	var oc jetstream.Consumer
	var err error
	// Making the consumer is tried for as long as 13 tries of 5 s took at
	// most (65 s), a quarter second apart: tried 13 times back to back, a
	// quick refusal (503 "JetStream system temporarily unavailable" while
	// the cluster elects after a node's restart) used them all up within
	// milliseconds, and failed a TestBridgeKillNine run under load.
	makeBy := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		oc, err = js.OrderedConsumer(ctx, "HERALD", jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(makeBy) {
			t.Fatalf("reading the stream: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	readDeadline := time.Now().Add(within)
	for i := 0; i < n; {
		from := i
		batch, err := oc.Fetch(min(100, n-i), jetstream.FetchMaxWait(5*time.Second))
		if err == nil {
			for m := range batch.Messages() {
				if got := string(m.Data()); got != strconv.Itoa(i) {
					md, _ := m.Metadata()
					var seq uint64
					if md != nil {
						seq = md.Sequence.Stream
					}
					t.Fatalf("stream message %d (sequence %d): got %q (a duplicate, loss or reordering in the stream)", i, seq, got)
				}
				i++
			}
			err = batch.Error()
		}
		if (err != nil || i == from) && i < n {
			if time.Now().After(readDeadline) {
				t.Fatalf("stream message %d: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

const bridgeTuning = `
max_in_flight = 32
reconnect_min = "50ms"
reconnect_max = "1s"
ack_timeout = "1s"
log_interval = "5s"
`

// TestBridgeKillNine: heraldd A bridges /queue/orders out to a 3-node
// JetStream cluster (child processes, replicas 3), heraldd B brings it in
// to /queue/from-a. While a producer sends to A: A is killed with SIGKILL
// and restarted, one NATS node is killed with SIGKILL and restarted, and B
// is killed with SIGKILL and restarted. Every message A receipted is in
// the stream once, in order, and arrives at B exactly once and in order;
// both directions run with 32 messages in flight (bridgeTuning).
func TestBridgeKillNine(t *testing.T) {
	cl := natstest.StartProcs(t, 3)
	urls := quoteList(cl.URLs())
	dirA, dirB := t.TempDir(), t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	cfgA := writeBridgeConfig(t, t.TempDir(), fmt.Sprintf(`
[journal]
sync = "normal"
[[bridge]]
name = "backbone"
kind = "jetstream"
direction = "out"
urls = %s
stream = "HERALD"
create_stream = true
replicas = 3
stream_subjects = ["sites.a.orders"]
appliance_id = "site-a"
%s
[[bridge.map]]
local = "/queue/orders"
remote = "sites.a.orders"
`, urls, bridgeTuning))
	cfgB := writeBridgeConfig(t, t.TempDir(), fmt.Sprintf(`
[journal]
sync = "normal"
[[bridge]]
name = "backbone"
kind = "jetstream"
direction = "in"
urls = %s
stream = "HERALD"
create_stream = true
replicas = 3
stream_subjects = ["sites.a.orders"]
appliance_id = "site-b"
%s
[[bridge.map]]
local = "/queue/from-a"
remote = "sites.a.orders"
`, urls, bridgeTuning))
	a := startChild(t, dirA, addrA, "--config", cfgA)
	b := startChild(t, dirB, addrB, "--config", cfgB)

	const n = 1500
	var sent atomic.Int64
	prodDone := make(chan error, 1)
	go func() {
		// The producer retries a message until it is receipted; its
		// dedup-id makes A keep one copy when a receipt was lost.
		c := dial2(t, addrA)
		for i := 0; i < n; {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := c.SendReceipt(ctx, "/queue/orders", []byte(strconv.Itoa(i)), stomp.Header{Key: "dedup-id", Value: "p-" + strconv.Itoa(i)})
			cancel()
			if err != nil {
				c.Close()
				deadline := time.Now().Add(30 * time.Second)
				for {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					c, err = client.Dial(ctx, addrA, client.Options{})
					cancel()
					if err == nil {
						break
					}
					if time.Now().After(deadline) {
						prodDone <- fmt.Errorf("producer: cannot reconnect to A: %v", err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				continue
			}
			i++
			sent.Store(int64(i))
		}
		c.Close()
		prodDone <- nil
	}()
	waitSent := func(k int64) {
		deadline := time.Now().Add(60 * time.Second)
		for sent.Load() < k {
			if time.Now().After(deadline) {
				t.Fatalf("producer stuck at %d, waiting for %d", sent.Load(), k)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitSent(300)
	a.kill()
	a = startChild(t, dirA, addrA, "--config", cfgA)
	waitSent(600)
	cl.Kill(1)
	waitSent(900)
	b.kill()
	b = startChild(t, dirB, addrB, "--config", cfgB)
	waitSent(1100)
	cl.Start(1)
	if err := <-prodDone; err != nil {
		t.Fatal(err)
	}

	// The stream: each message once, in order.
	_, js := natstest.Connect(t, cl.URLs())
	streamInOrder(t, js, "sites.a.orders", n, 90*time.Second)

	cb := dial2(t, addrB)
	defer cb.Close()
	sub, err := cb.SubscribeReceipt(context.Background(), "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	// A liveness bound, not a speed claim: one clean-clone run had only 471
	// of 1500 at B after 120 s (B restarted by kill -9 and a NATS node
	// restarted; the stream itself was complete and in order), so the
	// bound is 300 s, and how long B took is logged.
	// A local run of four packages in parallel once had B stop at 597 of
	// 1500 with no bridge log line for 4 minutes: 90 s without a message,
	// B prints its goroutines' stacks (where the in direction waits)
	// before the test fails. The cause, reproduced here under CPU load (2
	// stalls in about 100 runs, with the report below) and against one
	// NATS server: B's sequencer waited forever, without a log line, for
	// a message the killed B had acknowledged above the consumer's ack
	// floor (an earlier acknowledgement lost, say with the killed NATS
	// node), which the server never delivers again; fixed in the bridge
	// (TestBridgeInAckedAheadByEarlierRun, TestSequencerAckedByEarlierRun;
	// 613 runs under the same load after it, no stall).
	bStart := time.Now()
	deadline := time.After(300 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case f := <-sub.C():
			if got := string(f.Body); got != strconv.Itoa(i) {
				t.Fatalf("message %d at B: got %q (a duplicate, loss or reordering)", i, got)
			}
			cb.Ack(f)
		case <-time.After(90 * time.Second):
			killNineStallReport(t, js, filepath.Join(dirB, "admin.sock"))
			b.dumpStacks()
			t.Fatalf("only %d of %d messages arrived at B in %v, none in the last 90 s (B's goroutines above)", i, n, time.Since(bStart).Round(time.Second))
		case <-deadline:
			killNineStallReport(t, js, filepath.Join(dirB, "admin.sock"))
			b.dumpStacks()
			t.Fatalf("only %d of %d messages arrived at B in %v (B's goroutines above)", i, n, time.Since(bStart).Round(time.Second))
		}
	}
	t.Logf("all %d at B %v after the stream was read", n, time.Since(bStart).Round(time.Millisecond))
	select {
	case f := <-sub.C():
		t.Fatalf("a message more than the %d sent: %q", n, f.Body)
	case <-time.After(3 * time.Second):
	}
}

// killNineStallReport logs, when B stalls, B's in direction as its admin
// socket shows it (held back, gaps, reconnects, missed heartbeats) and
// the bridge's consumer at the server (ack floor, pending): a sequencer
// waiting for a message the server does not deliver again shows as
// messages held back while the consumer's max ack pending is reached.
// Failures to read are logged, not fatal (the stacks come next).
func killNineStallReport(t *testing.T, js jetstream.JetStream, sock string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if resp, err := hc.Get("http://admin/v1/bridges"); err != nil {
		t.Logf("B's bridges: %v", err)
	} else {
		var l admin.BridgeList
		err := json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil {
			t.Logf("B's bridges: %v", err)
		}
		for _, br := range l.Bridges {
			for _, d := range br.Directions {
				t.Logf("B's bridge %s %s: %+v", br.Name, d.Direction, d)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, "HERALD", "herald-site-b-backbone")
	if err != nil {
		t.Logf("B's consumer: %v", err)
		return
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Logf("B's consumer: %v", err)
		return
	}
	t.Logf("B's consumer: ack floor %d, delivered %d, ack pending %d (max %d), pending %d, redelivered %d, waiting pulls %d",
		ci.AckFloor.Stream, ci.Delivered.Stream, ci.NumAckPending, ci.Config.MaxAckPending, ci.NumPending, ci.NumRedelivered, ci.NumWaiting)
}
