package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/herald-mq/herald/multicast"
)

// writeListenStats: the text line reads as it always has (scripts parse
// it), and --json gives the same counters as one JSON object.
func TestWriteListenStats(t *testing.T) {
	var st multicast.ReceiverStats
	// A distinct value in every counter, so that a swapped pair shows.
	v := reflect.ValueOf(&st).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(uint64(100 + i))
		case reflect.Int:
			f.SetInt(int64(100 + i))
		}
	}
	want := fmt.Sprintf("datagrams %d messages %d gaps %d (%d messages) naks %d repairs %d kernel-drops %d auth-failures %d rcvbuf %d"+
		" malformed %d ahead %d foreign-source %d other-session %d overflow %d slow-consumer %d reassembled %d forged-fragments %d sealed %d"+
		" fragments %d fragments-dropped %d incomplete %d history-requests %d history-answers %d history-repairs %d history-unanswered %d"+
		" window-expired %d budget-expired %d catalog-conflicts %d streams-evicted %d\n",
		st.Datagrams, st.Messages, st.Gaps, st.GapMessages, st.NAKs, st.Repairs, st.KernelDrops, st.AuthFailures, st.RcvBuf,
		st.Malformed, st.Ahead, st.ForeignSource, st.OtherSession, st.Overflow, st.SlowConsumerDrops, st.Reassembled, st.ForgedFragments, st.Sealed,
		st.Fragments, st.ReassemblyDrops, st.Incomplete, st.HistoryRequests, st.HistoryAnswers, st.HistoryRepairs, st.HistoryUnanswered,
		st.WindowExpired, st.BudgetExpired, st.CatalogConflicts, st.StreamsEvicted)
	var text bytes.Buffer
	writeListenStats(&text, st, false)
	if text.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", text.String(), want)
	}
	var js bytes.Buffer
	writeListenStats(&js, st, true)
	var got map[string]uint64
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatalf("--json stats %q: %v", js.String(), err)
	}
	check := map[string]uint64{"datagrams": st.Datagrams, "gap_messages": st.GapMessages, "naks": st.NAKs, "rcvbuf": uint64(st.RcvBuf),
		"slow_consumer": st.SlowConsumerDrops, "fragments_dropped": st.ReassemblyDrops, "incomplete": uint64(st.Incomplete),
		"streams_evicted": st.StreamsEvicted, "history_unanswered": st.HistoryUnanswered}
	for k, v := range check {
		if got[k] != v {
			t.Errorf("--json stats: %s = %d, want %d (%s)", k, got[k], v, js.String())
		}
	}
	if len(got) != 29 {
		t.Errorf("--json stats has %d counters, want the text line's 29: %s", len(got), js.String())
	}
}
