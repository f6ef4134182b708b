package interop_test

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
)

// freeAddr reserves a loopback port for a broker that must keep its
// address across restarts (a bridge dials it again).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The seed scenario across two sites: catstomp feeds site A's /queue/feed,
// a STOMP bridge on A carries it to site B, stompcat reads it at B. Site B
// restarts after the first third and site A after the second; every line
// arrives at B once, in order, and A's queue ends empty (each line ACKed at
// A only after B's RECEIPT).
func TestRubyStomp_BridgeBetweenSitesAcrossRestarts(t *testing.T) {
	stompcat, catstomp := rubyStomp(t)
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := startBroker(t, func(c *appliance.Config) { c.Stomp.Listen = addrA })
	b := startBroker(t, func(c *appliance.Config) { c.Stomp.Listen = addrB })

	cfg := appliance.BridgeDefaults(appliance.BridgeConfig{
		Name: "to-b", Kind: "stomp", Direction: "out", Host: addrB, ApplianceID: "site-a", MaxInFlight: 16,
		ReconnectMin: appliance.Duration{Duration: 20 * time.Millisecond},
		ReconnectMax: appliance.Duration{Duration: 500 * time.Millisecond},
		AckTimeout:   appliance.Duration{Duration: 2 * time.Second},
		Map:          []appliance.BridgeMap{{Local: "/queue/feed", Remote: "/queue/feed"}},
	})
	whole := appliance.DefaultConfig()
	whole.Bridges = []appliance.BridgeConfig{cfg}
	if err := whole.Validate(); err != nil {
		t.Fatalf("bridge config: %v", err)
	}
	br, err := bridge.New(bridge.Options{Config: cfg, LocalAddr: addrA, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	br.Start()
	t.Cleanup(br.Close)

	want := lines("feed", 90)
	// catstomp sends without receipts and exits once its lines are
	// written to the socket: only a line site A has enqueued is promised.
	// A restarted before reading them would lose them rightly (this test
	// lost 12 of 30 so on a loaded CI machine).
	enqueued := func(n uint64) {
		t.Helper()
		waitUntil(t, 20*time.Second, fmt.Sprintf("site A to enqueue %d lines", n),
			func() bool { return a.queue("feed").Enqueued >= n },
			func() string { return fmt.Sprintf("A %+v", a.queue("feed")) })
	}
	catstompSend(t, a, catstomp, "/queue/feed", want[:30])
	b.Restart()
	catstompSend(t, a, catstomp, "/queue/feed", want[30:60])
	enqueued(60)
	a.Restart()
	catstompSend(t, a, catstomp, "/queue/feed", want[60:])

	cat := start(t, rubyEnv(b), nil, stompcat, "/queue/feed")
	waitUntil(t, 60*time.Second, "stompcat at site B to print 90 lines",
		func() bool { return len(received(cat)) >= len(want) },
		func() string {
			return fmt.Sprintf("A %+v, B %+v, bridge %+v%s", a.queue("feed"), b.queue("feed"), br.View(), describe([]*proc{cat}))
		})
	waitUntil(t, 10*time.Second, "site A's queue empty (every line ACKed after B's RECEIPT)",
		func() bool { q := a.queue("feed"); return q.Messages == 0 && q.InFlight == 0 },
		func() string { return fmt.Sprintf("A %+v", a.queue("feed")) })
	time.Sleep(300 * time.Millisecond) // room for a duplicate to show
	if got := received(cat); !slices.Equal(got, want) {
		t.Errorf("site B printed %d lines, want the %d lines once each, in order; got %q", len(got), len(want), got)
	}
	if v := br.View().Directions[0]; v.Reconnects == 0 {
		t.Errorf("no reconnect counted across both restarts: %+v", v)
	}
}
