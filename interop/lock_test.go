package interop_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Three stomp.py clients take one advisory lock in turn and, holding it,
// change two keys in one fenced transaction: every token is distinct and
// grows per client (together exactly 1..3N), every fenced commit passed,
// and a Go watcher sees each transaction whole (both keys, consecutive
// revisions, the last one marked).
func TestStompPy_LockFencedTransactions(t *testing.T) {
	py := stompPython(t)
	tb := startBroker(t, nil)
	w := tb.dial(t)
	watch, err := w.SubscribeReceipt(ctxT(t), "/kv/cfg.>", "auto")
	if err != nil {
		t.Fatal(err)
	}
	recv(t, watch) // marker
	const clients, each = 3, 8
	procs := make([]*proc, clients)
	for i := range procs {
		procs[i] = start(t, nil, nil, py, "-u", testdata(t, "stomppy_lock.py"), "locked-txn", tb.Addr, "ops.config", strconv.Itoa(each))
	}
	var tokens []uint64
	for _, p := range procs {
		p.wait(t, 90*time.Second)
		var r struct {
			Tokens    []uint64 `json:"tokens"`
			Revisions []uint64 `json:"revisions"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(p.stdout.String())), &r); err != nil {
			t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", p.name, err, p.stdout.String(), p.stderr.String())
		}
		if len(r.Tokens) != each || !slices.IsSorted(r.Tokens) || len(r.Revisions) != each {
			t.Fatalf("%s: %+v", p.name, r)
		}
		tokens = append(tokens, r.Tokens...)
	}
	slices.Sort(tokens)
	for i, tok := range tokens {
		if tok != uint64(i+1) {
			t.Fatalf("tokens %v: want each of 1..%d once", tokens, clients*each)
		}
	}
	for n := 0; n < clients*each; n++ {
		a, b := recv(t, watch), recv(t, watch)
		ra, _ := strconv.ParseUint(a.Get("revision"), 10, 64)
		if a.Get("kv-transaction") != a.Get("revision") || b.Get("kv-transaction") != a.Get("revision") ||
			b.Get("revision") != strconv.FormatUint(ra+1, 10) || b.Get("kv-transaction-last") != "true" || a.Get("kv-transaction-last") != "" ||
			string(a.Body) != string(b.Body) {
			t.Fatalf("set %d not whole: %v %q / %v %q", n, a.Headers, a.Body, b.Headers, b.Body)
		}
	}
}
