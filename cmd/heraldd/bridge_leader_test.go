package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/internal/natstest"
)

// TestBridgeInConsumerLeaderKilled: while messages flow into the stream
// and heraldd B brings them in, the node that leads B's consumer is killed
// with SIGKILL. B is connected to another node. Its pull requests lived only
// at the leader and died with it; B's connection stays up and nothing tells
// it. nats.go pulls again once it misses two of the pull's idle heartbeats:
// with its defaults (a 30 s pull, a heartbeat every 15 s) B brought nothing
// in for 30 s after the kill (30.0 s, 30.2 s and 30.0 s between two
// messages at B in three runs, the new leader elected after 6 to 8 s), and
// this test failed: no message at B 12 s after the new leader was elected.
// The bridge's pull heartbeat follows ack_timeout (1 s here): once a new
// leader leads the consumer and the stream takes messages again, B must
// have every message stored by then within 12 s. Every message arrives at
// B once, in order. The missed heartbeats show in B's /metrics
// (herald_bridge_heartbeats_missed_total > 0) and in its log (one Warn line
// per 30 s at most).
func TestBridgeInConsumerLeaderKilled(t *testing.T) {
	const durable = "herald-site-b-backbone"
	cl := natstest.StartProcs(t, 3)
	// The consumer is made here to learn its leader before B starts; B's
	// bridge updates it to its own settings.
	leader, others := natstest.ConsumerLeaderOf(t, cl, "HERALD", "sites.a.orders", durable)

	// B and this test talk only to the nodes that survive.
	_, js := natstest.Connect(t, others)
	dirB, addrB, metricsB := t.TempDir(), freeAddr(t), freeAddr(t)
	cfgB := writeBridgeConfig(t, t.TempDir(), fmt.Sprintf(`
[journal]
sync = "normal"
[admin]
metrics_listen = %q
[[bridge]]
name = "backbone"
kind = "jetstream"
direction = "in"
urls = %s
stream = "HERALD"
replicas = 3
appliance_id = "site-b"
%s
[[bridge.map]]
local = "/queue/from-a"
remote = "sites.a.orders"
`, metricsB, quoteList(others), bridgeTuning))
	logB := &logBuf{}
	startChildLog(t, dirB, addrB, logB, "--config", cfgB)
	cb := dial2(t, addrB)
	defer cb.Close()
	sub, err := cb.SubscribeReceipt(context.Background(), "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(i int, within time.Duration) error {
		deadline := time.Now().Add(within)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.Publish(ctx, "sites.a.orders", []byte(strconv.Itoa(i)), jetstream.WithMsgID("m-"+strconv.Itoa(i)))
			cancel()
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("publish %d: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	const n = 1000
	var stored atomic.Int64 // messages 0..stored-1 are in the stream
	pubDone := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if err := publish(i, 90*time.Second); err != nil {
				pubDone <- err
				return
			}
			stored.Store(int64(i + 1))
			time.Sleep(20 * time.Millisecond)
		}
		pubDone <- nil
	}()
	next := 0
	var last time.Time
	take := func(body []byte) {
		t.Helper()
		if got := string(body); got != strconv.Itoa(next) {
			t.Fatalf("message %d at B: got %q (a duplicate, loss or reordering)", next, got)
		}
		next++
		last = time.Now()
	}
	// receive waits for the next message at B until deadline.
	receive := func(deadline time.Time) {
		t.Helper()
		select {
		case f := <-sub.C():
			take(f.Body)
			cb.Ack(f)
			return
		default:
		}
		select {
		case f := <-sub.C():
			take(f.Body)
			cb.Ack(f)
		case err := <-pubDone:
			if err != nil {
				t.Fatal(err)
			}
			pubDone = nil
		case <-time.After(time.Until(deadline)):
			t.Fatalf("message %d did not arrive at B by %v", next, deadline.Format("15:04:05.000"))
		}
	}
	for next < 200 {
		receive(time.Now().Add(60 * time.Second))
	}
	cl.Kill(leader)
	killed := time.Now()
	t.Logf("consumer leader %s killed; %d messages at B", cl.Opts[leader].ServerName, next)

	// Ready: a new leader leads the consumer, and the stream took a
	// message since. B keeps receiving what it was given meanwhile.
	newLeader := make(chan time.Time, 1)
	go func() {
		for time.Since(killed) < 90*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c, err := js.Consumer(ctx, "HERALD", durable)
			if err == nil {
				var ci *jetstream.ConsumerInfo
				ci, err = c.Info(ctx)
				if err == nil && ci.Cluster != nil && ci.Cluster.Leader != "" && ci.Cluster.Leader != cl.Opts[leader].ServerName {
					cancel()
					newLeader <- time.Now()
					return
				}
			}
			cancel()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	var elected time.Time
	var mark int64
	waitUntil := killed.Add(90 * time.Second)
	for elected.IsZero() || stored.Load() <= mark {
		select {
		case elected = <-newLeader:
			mark = stored.Load()
		default:
		}
		if time.Now().After(waitUntil) {
			t.Fatalf("90 s after the kill: new leader at %v, stored %d (%d at the election)", elected, stored.Load(), mark)
		}
		select {
		case f := <-sub.C():
			take(f.Body)
			cb.Ack(f)
		case <-time.After(10 * time.Millisecond):
		}
	}
	ready, readyIdx := time.Now(), int(stored.Load())
	t.Logf("new consumer leader %v after the kill, stream taking messages %v after (%d stored, %d at B)",
		elected.Sub(killed).Round(time.Millisecond), ready.Sub(killed).Round(time.Millisecond), readyIdx, next)
	for next < readyIdx {
		receive(ready.Add(12 * time.Second))
	}
	t.Logf("message %d at B %v after the stream was ready", readyIdx-1, last.Sub(ready).Round(time.Millisecond))
	for next < n {
		receive(time.Now().Add(30 * time.Second))
	}
	if pubDone != nil {
		if err := <-pubDone; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case f := <-sub.C():
		t.Fatalf("a message more than the %d sent: %q", n, f.Body)
	case <-time.After(3 * time.Second):
	}

	// B's queue held each message once: all n came, in order, nothing
	// more; and none is left in it (a copy waiting, delayed or in flight)
	// once the acknowledgements are in.
	scrape := func() string {
		resp, err := http.Get("http://" + metricsB + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	const emptyQueue = `herald_queue_messages{queue="from-a"} 0`
	deadline := time.Now().Add(10 * time.Second)
	body := scrape()
	for !slices.Contains(strings.Split(body, "\n"), emptyQueue) {
		if time.Now().After(deadline) {
			t.Fatalf("B's queue from-a is not empty after all %d were received and acknowledged:\n%s", n, grepLines(body, `queue="from-a"`))
		}
		time.Sleep(50 * time.Millisecond)
		body = scrape()
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "herald_dedup_hits_total ") {
			t.Logf("B: %s (SENDs refused as copies by their dedup id)", l)
		}
	}

	// The missed pull heartbeats showed: in /metrics and in B's log, at
	// most one line per 30 s.
	const missed = `herald_bridge_heartbeats_missed_total{bridge="backbone",direction="in"}`
	if !metricPositive(body, missed) {
		t.Errorf("B missed pull heartbeats after the consumer leader was killed, but /metrics has:\n%s", grepLines(body, "herald_bridge_heartbeats_missed_total"))
	}
	lines := strings.Count(logB.String(), "pull heartbeats missed")
	if most := 1 + int(time.Since(killed)/(30*time.Second)); lines == 0 || lines > most {
		t.Errorf("%d log lines about missed pull heartbeats %v after the kill, want 1 to %d", lines, time.Since(killed).Round(time.Second), most)
	}
	t.Logf("B: %s; %d log lines", grepLines(body, missed), lines)
}
