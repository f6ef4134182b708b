package interop_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
)

// Three stomp.py clients increment one counter key by compare-and-set
// loops, each watching the key: no update is lost (the final value is the
// number of successful writes), every successful write got a distinct
// revision, together exactly 3..N+2 (after the counter's and the start
// gate's), and the losers of each race (at least the stale first attempts
// of all but one client) were
// answered with kv-conflict RECEIPTs and went on over the same connection.
func TestStompPy_KVCompareAndSetCounter(t *testing.T) {
	py := stompPython(t)
	tb := startBroker(t, nil)
	c := tb.dial(t)
	if r, err := c.SendReceipt(ctxT(t), "/kv/ctr.hits", []byte("0")); err != nil || r.Get("revision") != "1" {
		t.Fatalf("initial put: %v %v", r, err)
	}
	const clients, each = 3, 15
	type result struct {
		Revisions []uint64 `json:"revisions"`
		Conflicts int      `json:"conflicts"`
		Marker    *uint64  `json:"marker"`
	}
	res := make([]result, clients)
	procs := make([]*proc, clients)
	for i := range procs {
		procs[i] = start(t, nil, nil, py, "-u", testdata(t, "stomppy_kv.py"), "cas-increment", tb.Addr, "/kv/ctr.hits", strconv.Itoa(each), "/kv/ctr.start")
	}
	// Start them together: each watches ctr.hits and the gate key.
	waitUntil(t, 30*time.Second, "every client watching", func() bool { return tb.B.KVStats().Watchers == 2*clients },
		func() string { return strconv.Itoa(tb.B.KVStats().Watchers) })
	if _, err := c.SendReceipt(ctxT(t), "/kv/ctr.start", []byte("go")); err != nil {
		t.Fatal(err)
	}
	for i, p := range procs {
		p.wait(t, 60*time.Second)
		if err := json.Unmarshal([]byte(strings.TrimSpace(p.stdout.String())), &res[i]); err != nil {
			t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", p.name, err, p.stdout.String(), p.stderr.String())
		}
	}
	var all []uint64
	conflicts := 0
	for i, r := range res {
		if len(r.Revisions) != each || r.Marker == nil {
			t.Fatalf("client %d: %+v", i, r)
		}
		if !slices.IsSorted(r.Revisions) {
			t.Errorf("client %d revisions not increasing: %v", i, r.Revisions)
		}
		all = append(all, r.Revisions...)
		conflicts += r.Conflicts
	}
	slices.Sort(all)
	// Every client's first attempt carries the revision of the snapshot it
	// saw before the gate opened: one wins, each other one is a conflict.
	if conflicts < clients-1 {
		t.Errorf("%d CAS conflicts in %d racing increments, want at least %d (every first attempt but one is stale)", conflicts, clients*each, clients-1)
	}
	for i, rev := range all {
		if rev != uint64(i+3) {
			t.Fatalf("revisions of the successful writes %v: want exactly 3..%d (1: the counter, 2: the gate)", all, clients*each+2)
		}
	}
	get, err := c.SubscribeReceipt(ctxT(t), "/kv/ctr.hits", "auto", stomp.Header{Key: "kv-get", Value: "true"})
	if err != nil {
		t.Fatal(err)
	}
	m := recv(t, get)
	if string(m.Body) != strconv.Itoa(clients*each) || m.Get("revision") != strconv.Itoa(clients*each+2) {
		t.Fatalf("final counter %q at revision %s, want %d at %d (a lost update)", m.Body, m.Get("revision"), clients*each, clients*each+2)
	}
	t.Logf("%d increments by %d stomp.py clients, %d CAS conflicts answered by RECEIPT", clients*each, clients, conflicts)
}
