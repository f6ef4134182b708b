package admin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/bridge"
	"github.com/herald-mq/herald/bridge/bridgeview"
)

type bridges []*bridge.Bridge

func (bs bridges) Bridges() []bridgeview.View {
	var out []bridgeview.View
	for _, b := range bs {
		out = append(out, b.View())
	}
	return out
}

// TestAPI_Bridges: GET /v1/bridges is [] without bridges; a bridge whose
// peer refuses connections is listed as failing, with its error.
func TestAPI_Bridges(t *testing.T) {
	d := admintest.Start(t, nil)
	c := admin.NewClient(d.Socket)
	defer c.Close()
	bl, err := c.Bridges(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if bl.Bridges == nil || len(bl.Bridges) != 0 {
		t.Fatalf("without bridges: %+v, want []", bl.Bridges)
	}
	// A STOMP peer that is not there: a port just closed.
	dead := admintest.Start(t, nil)
	deadAddr := dead.STOMP
	dead.Broker.Close(ctxT(t))
	b, err := bridge.New(bridge.Options{
		Config: appliance.BridgeConfig{Name: "to-nowhere", Kind: "stomp", Host: deadAddr, ApplianceID: "a", Direction: "out",
			ReconnectMin: appliance.Duration{Duration: 10 * time.Millisecond}, ReconnectMax: appliance.Duration{Duration: 50 * time.Millisecond},
			Map: []appliance.BridgeMap{{Local: "/queue/orders", Remote: "/queue/orders"}}},
		LocalAddr: d.STOMP,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	defer b.Close()
	d.Server.SetBridges(bridges{b})
	deadline := time.Now().Add(10 * time.Second)
	for {
		bl, err = c.Bridges(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(bl.Bridges) == 1 && len(bl.Bridges[0].Directions) == 1 && bl.Bridges[0].Directions[0].Failing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge not shown failing: %+v", bl.Bridges)
		}
		time.Sleep(20 * time.Millisecond)
	}
	dv := bl.Bridges[0].Directions[0]
	if bl.Bridges[0].Name != "to-nowhere" || dv.Direction != "out" || dv.State == "up" || !strings.Contains(dv.LastError, deadAddr) {
		t.Errorf("view: %+v %+v: want to-nowhere, out, not up, an error naming %s", bl.Bridges[0], dv, deadAddr)
	}
}
