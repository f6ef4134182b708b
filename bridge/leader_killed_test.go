package bridge_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/internal/natstest"
	"github.com/herald-mq/herald/internal/testbroker"
)

// The test binary also runs NATS nodes, as child processes
// (natstest.StartProcs), for SIGKILL.
func init() { natstest.RunChildIfAsked() }

// warnLine is a line logged at Warn, with its attributes (those of the
// logger's With included).
type warnLine struct {
	at    time.Time
	msg   string
	attrs map[string]string
}

// warnRecorder keeps what is logged at Warn.
type warnRecorder struct {
	mu    *sync.Mutex
	lines *[]warnLine
	with  []slog.Attr
}

func newWarnRecorder() *warnRecorder {
	return &warnRecorder{mu: &sync.Mutex{}, lines: &[]warnLine{}}
}

func (h *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	l := warnLine{at: r.Time, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.with {
		l.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, l)
	h.mu.Unlock()
	return nil
}
func (h *warnRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &warnRecorder{mu: h.mu, lines: h.lines, with: append(append([]slog.Attr(nil), h.with...), as...)}
}
func (h *warnRecorder) WithGroup(string) slog.Handler { return h }

// matching returns the lines whose message contains sub.
func (h *warnRecorder) matching(sub string) []warnLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []warnLine
	for _, l := range *h.lines {
		if strings.Contains(l.msg, sub) {
			out = append(out, l)
		}
	}
	return out
}

// TestBridgeInHeartbeatsMissedWarns: while messages flow into a 3-node
// stream (child processes, replicas 3) and an in direction brings them
// into a local queue, the node that leads the bridge's consumer is killed
// with SIGKILL; the bridge is connected to the other two. Its pull
// requests died with the leader and nats.go reports heartbeats missed
// (jetstream.ErrNoHeartbeat). That must show: a Warn line naming the
// bridge and the count since the last line, at most one per 30 s, and
// heartbeats_missed_total > 0 in the view. Before, the error went to a
// Debug line only, and this test failed: no Warn line, no counter. The
// bridge recovers: every message, those published after the warning
// included, is in the local queue exactly once (a message taken twice
// from JetStream around the kill is absorbed by its dedup id), in stream
// order.
func TestBridgeInHeartbeatsMissedWarns(t *testing.T) {
	const durable = "herald-site-b-backbone" // the bridge's default: herald-APPLIANCE_ID-NAME
	cl := natstest.StartProcs(t, 3)
	// The consumer is made here to learn its leader before the bridge
	// starts; the bridge updates it to its own settings.
	leader, others := natstest.ConsumerLeaderOf(t, cl, "HERALD", "sites.a.orders", durable)
	// The bridge and this test talk only to the nodes that survive.
	_, js := natstest.Connect(t, others)

	b := testbroker.Start(t, nil)
	cfg := jsBridge("backbone", "site-b", "in", others, appliance.BridgeMap{Local: "/queue/from-a", Remote: "sites.a.orders"})
	cfg.StreamSubjects = []string{"sites.a.orders"}
	rec := newWarnRecorder()
	br, err := bridge.New(bridge.Options{Config: appliance.BridgeDefaults(cfg), LocalAddr: b.Addr, Logger: slog.New(rec), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	br.Start()
	t.Cleanup(br.Close)
	waitUp(t, br)

	// publish stores messages from..to-1 in the stream, as fast as it
	// is answered, each retried (a stream leader election) for up to 90 s.
	publish := func(from, to int) error {
		for i := from; i < to; i++ {
			deadline := time.Now().Add(90 * time.Second)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := js.Publish(ctx, "sites.a.orders", []byte(strconv.Itoa(i)), jetstream.WithMsgID("m-"+strconv.Itoa(i)))
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("publish %d: %v", i, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		return nil
	}
	queued := func() int64 {
		q, _ := b.Queue("from-a")
		return int64(q.Messages)
	}
	// waitQueued waits until the local queue holds at least k messages.
	waitQueued := func(k int64, within time.Duration, what string) {
		t.Helper()
		deadline := time.Now().Add(within)
		for queued() < k {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the local queue holds %d messages, want %d; view %+v", what, queued(), k, br.View().Directions[0])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Messages flow (no pause between publishes, the bridge with up to
	// 32 in flight) when the consumer leader is killed: what it delivered
	// and had not yet been told was acknowledged comes again from the new
	// leader.
	const before, after = 1000, 200
	const n = before + after
	pubDone := make(chan error, 1)
	go func() { pubDone <- publish(0, before) }()
	waitQueued(300, 60*time.Second, "before the kill")
	if got := br.View().Directions[0].HeartbeatsMissed; got != 0 {
		t.Fatalf("heartbeats_missed_total %d before any fault", got)
	}
	cl.Kill(leader)
	killed := time.Now()
	t.Logf("consumer leader %s killed; %d in the local queue", cl.Opts[leader].ServerName, queued())

	const warning = "pull heartbeats missed"
	deadline := killed.Add(60 * time.Second)
	for len(rec.matching(warning)) == 0 || br.View().Directions[0].HeartbeatsMissed == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the consumer leader was killed: %d Warn lines about missed heartbeats, heartbeats_missed_total %d; every Warn line: %+v",
				len(rec.matching(warning)), br.View().Directions[0].HeartbeatsMissed, rec.matching(""))
		}
		time.Sleep(20 * time.Millisecond)
	}
	warned := time.Now()
	t.Logf("warned %v after the kill; %d in the local queue", warned.Sub(killed).Round(time.Millisecond), queued())

	// Recovery: the messages published after the warning come in too.
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	if err := publish(before, n); err != nil {
		t.Fatal(err)
	}
	waitQueued(n, 60*time.Second, "after the kill")
	t.Logf("all %d in the local queue %v after the warning", n, time.Since(warned).Round(time.Millisecond))

	// Exactly once: the queue holds n once the server's redeliveries of
	// what was in flight at the kill (after its ack wait, 3 s) are past,
	// and they are 0..n-1 in order, nothing more.
	time.Sleep(8 * time.Second)
	if got := queued(); got != n {
		t.Fatalf("the local queue holds %d messages, want %d: a message taken twice from JetStream was not absorbed by its dedup id", got, n)
	}
	cb := b.Dial(t)
	sub, err := cb.SubscribeReceipt(context.Background(), "/queue/from-a", "client-individual")
	if err != nil {
		t.Fatal(err)
	}
	receiveExactly(t, cb, sub, n, 30*time.Second, 2*time.Second)

	d := br.View().Directions[0]
	t.Logf("taken from JetStream %d times for %d messages, %d refused as copies by the local queue's dedup", d.Taken, n, b.B.Stats().DedupHits)
	lines := rec.matching(warning)
	t.Logf("heartbeats_missed_total %d, Warn lines %d: %+v", d.HeartbeatsMissed, len(lines), lines)
	var logged uint64
	for i, l := range lines {
		if l.attrs["bridge"] != "backbone" || l.attrs["direction"] != "in" || l.attrs["consumer"] != durable {
			t.Errorf("Warn line %d does not name the bridge, direction and consumer: %+v", i, l)
		}
		m, err := strconv.ParseUint(l.attrs["missed"], 10, 64)
		if err != nil || m == 0 {
			t.Errorf("Warn line %d: missed %q, want the count (>= 1) since the last line", i, l.attrs["missed"])
		}
		logged += m
		if i > 0 && l.at.Sub(lines[i-1].at) < 30*time.Second {
			t.Errorf("Warn lines %d and %d %v apart: want at most one per 30 s", i-1, i, l.at.Sub(lines[i-1].at))
		}
	}
	if logged > d.HeartbeatsMissed {
		t.Errorf("the Warn lines count %d missed heartbeats, heartbeats_missed_total only %d", logged, d.HeartbeatsMissed)
	}
}
