package main

import (
	"context"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/bridge/bridgeview"
)

type testBridges []*bridge.Bridge

func (bs testBridges) Bridges() []bridgeview.View {
	var out []bridgeview.View
	for _, b := range bs {
		out = append(out, b.View())
	}
	return out
}

// TestAdminCLI_Bridges: herald bridges lists a bridge whose peer is gone as
// failing, with its error, in the table and in --json; herald status names
// it.
func TestAdminCLI_Bridges(t *testing.T) {
	d := admintest.Start(t, nil)
	s := d.Socket
	out, _ := runAdmin(t, s, exitOK, "bridges")
	mustContain(t, "bridges", out, "BRIDGE", "(no bridges)")

	dead := admintest.Start(t, nil)
	deadAddr := dead.STOMP
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dead.Broker.Close(ctx)
	b, err := bridge.New(bridge.Options{
		Config: appliance.BridgeConfig{Name: "to-site-b", Kind: "stomp", Host: deadAddr, ApplianceID: "a", Direction: "out",
			ReconnectMin: appliance.Duration{Duration: 10 * time.Millisecond}, ReconnectMax: appliance.Duration{Duration: 50 * time.Millisecond},
			Map: []appliance.BridgeMap{{Local: "/queue/orders", Remote: "/queue/orders"}}},
		LocalAddr: d.STOMP,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	defer b.Close()
	d.Server.SetBridges(testBridges{b})
	deadline := time.Now().Add(10 * time.Second)
	for !b.View().Failing() {
		if time.Now().After(deadline) {
			t.Fatalf("bridge not failing: %+v", b.View())
		}
		time.Sleep(10 * time.Millisecond)
	}
	out, _ = runAdmin(t, s, exitOK, "bridges")
	mustContain(t, "bridges", out, "to-site-b", "stomp", "out", "(failing)", deadAddr)
	bl := decode[admin.BridgeList](t, first(runAdmin(t, s, exitOK, "bridges", "--json")))
	if len(bl.Bridges) != 1 || bl.Bridges[0].Name != "to-site-b" || !bl.Bridges[0].Directions[0].Failing {
		t.Errorf("bridges --json: %+v", bl)
	}
	out, _ = runAdmin(t, s, exitOK, "status")
	mustContain(t, "status", out, "bridge failing:", "to-site-b", deadAddr)
}
