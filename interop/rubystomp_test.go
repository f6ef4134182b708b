package interop_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Tests with ruby-stomp (Debian ruby-stomp): its stompcat and catstomp
// tools, which speak STOMP 1.0 (no accept-version, SUBSCRIBE ack:client,
// ACK by message-id only, catstomp closes its socket without DISCONNECT),
// and the stomp gem used directly at 1.2.

// rubyEnv points stompcat/catstomp at the test broker.
func rubyEnv(tb *broker) []string {
	host, port := tb.hostPort()
	return []string{"STOMP_HOST=" + host, "STOMP_PORT=" + port, "STOMP_USER=", "STOMP_PASSWORD="}
}

func lines(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// received splits a stompcat's stdout into lines (each MESSAGE body is one
// line with its newline).
func received(p *proc) []string {
	s := p.stdout.String()
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// catstompSend pipes lines into catstomp DEST and waits for it to exit.
func catstompSend(t *testing.T, tb *broker, catstomp, dest string, msgs []string) {
	t.Helper()
	p := start(t, rubyEnv(tb), strings.NewReader(strings.Join(msgs, "\n")+"\n"), catstomp, dest)
	p.wait(t, 20*time.Second)
	// catstomp swallows every exception (bare rescue) and exits 0; its
	// stderr must show it connected and sent.
	if !strings.Contains(p.stderr.String(), "Sending input to "+dest) {
		t.Fatalf("catstomp did not get to sending: %s", p.stderr.String())
	}
}

func startStompcats(t *testing.T, tb *broker, stompcat, dest string, n int) []*proc {
	t.Helper()
	var ps []*proc
	for i := 0; i < n; i++ {
		ps = append(ps, start(t, rubyEnv(tb), nil, stompcat, dest))
	}
	return ps
}

func describe(ps []*proc) string {
	var b strings.Builder
	for i, p := range ps {
		fmt.Fprintf(&b, "\n[%d] exited=%v lines=%d stderr=%q", i, p.exited(), len(received(p)), p.stderr.String())
	}
	return b.String()
}

// A topic fans out to three stompcat subscribers: each receives every
// line catstomp sent, in order, exactly once.
func TestRubyStomp_TopicThreeSubscribers(t *testing.T) {
	stompcat, catstomp := rubyStomp(t)
	tb := startBroker(t, nil)
	cats := startStompcats(t, tb, stompcat, "/topic/x", 3)
	// Topic messages are not stored: send only once all three are subscribed.
	waitUntil(t, 15*time.Second, "3 subscribers on topic x",
		func() bool { return tb.topic("x").Subscribers == 3 },
		func() string { return fmt.Sprintf("%+v%s", tb.B.Topics(), describe(cats)) })
	want := lines("topic", 50)
	catstompSend(t, tb, catstomp, "/topic/x", want)
	for i, c := range cats {
		waitUntil(t, 10*time.Second, fmt.Sprintf("stompcat %d to print %d lines", i, len(want)),
			func() bool { return len(received(c)) >= len(want) },
			func() string { return fmt.Sprintf("%+v%s", tb.topic("x"), describe(cats)) })
	}
	time.Sleep(200 * time.Millisecond) // proves absence: room for duplicates to show
	for i, c := range cats {
		if got := received(c); !slices.Equal(got, want) {
			t.Errorf("stompcat %d received %d lines %q..., want the %d lines in order", i, len(got), head(got), len(want))
		}
	}
	if v := tb.topic("x"); v.In != uint64(len(want)) || v.Out != uint64(3*len(want)) || v.Dropped != 0 {
		t.Errorf("topic view %+v, want in=%d out=%d dropped=0", v, len(want), 3*len(want))
	}
}

// A queue shared by three stompcat consumers: every line is received
// exactly once across them, each consumer sees its share in queue order,
// the load is shared, and the 1.0 ACKs (message-id only, ack:client) empty
// the queue.
func TestRubyStomp_QueueThreeConsumers(t *testing.T) {
	stompcat, catstomp := rubyStomp(t)
	tb := startBroker(t, nil)
	cats := startStompcats(t, tb, stompcat, "/queue/work", 3)
	waitUntil(t, 15*time.Second, "3 consumers on queue work",
		func() bool { return tb.queue("work").Consumers == 3 },
		func() string { return fmt.Sprintf("%+v%s", tb.queue("work"), describe(cats)) })
	want := lines("work", 30)
	catstompSend(t, tb, catstomp, "/queue/work", want)
	total := func() int {
		n := 0
		for _, c := range cats {
			n += len(received(c))
		}
		return n
	}
	waitUntil(t, 10*time.Second, "30 lines across the stompcats",
		func() bool { return total() >= len(want) },
		func() string { return fmt.Sprintf("%+v%s", tb.queue("work"), describe(cats)) })
	waitUntil(t, 10*time.Second, "queue work empty (every message ACKed)",
		func() bool { q := tb.queue("work"); return q.Messages == 0 && q.InFlight == 0 },
		func() string { return fmt.Sprintf("%+v", tb.queue("work")) })
	time.Sleep(200 * time.Millisecond) // proves absence: room for duplicates to show

	seen := map[string]int{}
	for i, c := range cats {
		got := received(c)
		t.Logf("stompcat %d received %d lines", i, len(got))
		if len(got) == 0 {
			t.Errorf("stompcat %d received nothing: a queue with three consumers must share the load", i)
		}
		if !slices.IsSorted(got) {
			t.Errorf("stompcat %d received its share out of queue order: %q", i, got)
		}
		for _, l := range got {
			seen[l]++
		}
	}
	for _, l := range want {
		if seen[l] != 1 {
			t.Errorf("line %q received %d times, want exactly once", l, seen[l])
		}
		delete(seen, l)
	}
	for l, n := range seen {
		t.Errorf("unexpected line %q received %d times", l, n)
	}
	if q := tb.queue("work"); q.Enqueued != uint64(len(want)) || q.Acked != uint64(len(want)) || q.Redelivered != 0 {
		t.Errorf("queue view %+v, want enqueued=acked=%d redelivered=0", q, len(want))
	}
}

// A queue keeps what catstomp sent while nobody listened. catstomp ends
// without DISCONNECT (it just exits and the socket closes) and asks for no
// receipts: the broker must still store every SEND that reached it. A
// stompcat started afterwards receives them all, in order.
func TestRubyStomp_QueueKeptWithoutSubscribers(t *testing.T) {
	stompcat, catstomp := rubyStomp(t)
	tb := startBroker(t, nil)
	want := lines("kept", 200)
	catstompSend(t, tb, catstomp, "/queue/kept", want)
	waitUntil(t, 10*time.Second, "200 messages stored in queue kept after catstomp exited",
		func() bool { return tb.queue("kept").Messages == len(want) },
		func() string { return fmt.Sprintf("%+v", tb.queue("kept")) })
	waitUntil(t, 5*time.Second, "catstomp's connection gone",
		func() bool { return tb.B.Stats().Connections == 0 },
		func() string { return strconv.Itoa(tb.B.Stats().Connections) })

	cats := startStompcats(t, tb, stompcat, "/queue/kept", 1)
	waitUntil(t, 15*time.Second, "stompcat to print 200 lines",
		func() bool { return len(received(cats[0])) >= len(want) },
		func() string { return fmt.Sprintf("%+v%s", tb.queue("kept"), describe(cats)) })
	waitUntil(t, 10*time.Second, "queue kept empty (every message ACKed)",
		func() bool { return tb.queue("kept").Messages == 0 },
		func() string { return fmt.Sprintf("%+v", tb.queue("kept")) })
	time.Sleep(200 * time.Millisecond) // proves absence: room for duplicates to show
	if got := received(cats[0]); !slices.Equal(got, want) {
		t.Errorf("stompcat received %d lines %q..., want the %d lines in order", len(got), head(got), len(want))
	}
}

// The same through a broker restart: what catstomp sent (no receipts, no
// DISCONNECT, persistent:false, which Herald does not act on) is in the
// journal, and a stompcat connecting to the restarted broker gets it all.
func TestRubyStomp_QueueKeptAcrossRestart(t *testing.T) {
	stompcat, catstomp := rubyStomp(t)
	tb := startBroker(t, nil)
	want := lines("restart", 50)
	catstompSend(t, tb, catstomp, "/queue/kept.restart", want)
	waitUntil(t, 10*time.Second, "50 messages stored in queue kept.restart",
		func() bool { return tb.queue("kept.restart").Messages == len(want) },
		func() string { return fmt.Sprintf("%+v", tb.queue("kept.restart")) })
	tb.Restart()
	cats := startStompcats(t, tb, stompcat, "/queue/kept.restart", 1)
	waitUntil(t, 15*time.Second, "stompcat to print 50 lines after the restart",
		func() bool { return len(received(cats[0])) >= len(want) },
		func() string { return fmt.Sprintf("%+v%s", tb.queue("kept.restart"), describe(cats)) })
	time.Sleep(200 * time.Millisecond) // proves absence: room for duplicates to show
	if got := received(cats[0]); !slices.Equal(got, want) {
		t.Errorf("stompcat received %d lines %q..., want the %d lines in order", len(got), head(got), len(want))
	}
}

// The stomp gem at STOMP 1.2: publish with receipts, SUBSCRIBE
// client-individual, ACK two, NACK one; only the NACKed one comes back,
// with redelivered:true, and the queue ends empty.
func TestRubyStomp_Gem12ClientIndividual(t *testing.T) {
	rb := rubyGem(t)
	tb := startBroker(t, nil)
	var res struct {
		Protocol  string            `json:"protocol"`
		Connected map[string]string `json:"connected"`
		First     []pyMsg           `json:"first"`
		Again     []pyMsg           `json:"again"`
		Version   string            `json:"stomp_gem_version"`
	}
	runJSON(t, 30*time.Second, &res, rb, testdata(t, "rubystomp_ack.rb"), tb.Addr, "/queue/rb.ack")
	t.Logf("stomp gem %s, protocol %s, CONNECTED %v", res.Version, res.Protocol, res.Connected)
	if res.Protocol != "1.2" || res.Connected["version"] != "1.2" {
		t.Errorf("negotiated %q (CONNECTED %v), want 1.2", res.Protocol, res.Connected)
	}
	if len(res.First) != 3 {
		t.Fatalf("first deliveries %+v, want 3", res.First)
	}
	for i, m := range res.First {
		if want := "rb-" + strconv.Itoa(i); m.Body != want || m.Headers["redelivered"] == "true" {
			t.Errorf("first delivery %d: %q %v, want %q not redelivered", i, m.Body, m.Headers, want)
		}
	}
	if len(res.Again) != 1 || res.Again[0].Body != "rb-1" || res.Again[0].Headers["redelivered"] != "true" {
		t.Errorf("redeliveries %+v, want exactly rb-1 with redelivered:true", res.Again)
	}
	if q := tb.queue("rb.ack"); q.Messages != 0 || q.Acked != 3 {
		t.Errorf("queue view %+v, want messages=0 acked=3", q)
	}
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
