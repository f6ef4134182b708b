package bridge

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/herald-mq/herald/appliance/stomp"
)

// TestNATSHeadersRoundTrip: any STOMP headers (keys and values of any
// bytes) go into NATS headers that nats.go takes and carries unchanged
// (keys of printable ASCII but its forbidden characters; values without
// CR, LF or white space at either end), and come back from them as they
// were.
func TestNATSHeadersRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(alphabet string, n int) string {
		var b strings.Builder
		for range n {
			if rng.IntN(4) == 0 {
				b.WriteByte(byte(rng.IntN(256)))
			} else {
				b.WriteByte(alphabet[rng.IntN(len(alphabet))])
			}
		}
		return b.String()
	}
	const alpha = "abcXYZ09-_%/:@=., \t\r\n"
	for round := range 2000 {
		seen := map[string]bool{}
		var h stomp.Headers
		for range 1 + rng.IntN(6) {
			k := pick(alpha, rng.IntN(8))
			if rng.IntN(10) == 0 {
				k = HeaderPct + k
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			h = append(h, stomp.Header{Key: k, Value: pick(alpha, rng.IntN(10))})
		}
		n := natsHeaders(h)
		for k, vs := range n {
			if k == "" || (!strings.HasPrefix(k, HeaderPct) && !natsKeyOK(k)) {
				t.Fatalf("round %d: NATS key %q", round, k)
			}
			for i := 0; i < len(k); i++ {
				if !natsKeyByte(k[i]) {
					t.Fatalf("round %d: NATS key %q has %q", round, k, k[i])
				}
			}
			for _, v := range vs {
				if !natsValueOK(v) {
					t.Fatalf("round %d: NATS value %q", round, v)
				}
			}
		}
		back := stompHeaders(n, func(string) bool { return false })
		sort.Slice(h, func(i, j int) bool { return h[i].Key < h[j].Key })
		sort.Slice(back, func(i, j int) bool { return back[i].Key < back[j].Key })
		if fmt.Sprint(back) != fmt.Sprint(h) {
			t.Fatalf("round %d: %q became %q and came back as %q", round, h, n, back)
		}
	}
}

// TestStompHeadersFromNATS: what a NATS publisher sets comes in as it is,
// several values of one key joined with commas, keys in order; a
// herald-bridge-pct- key that is not percent-encoded stays as it is; skip
// applies to the decoded key.
func TestStompHeadersFromNATS(t *testing.T) {
	n := nats.Header{
		"route":                     {"eu", "us"},
		"plain":                     {"v"},
		HeaderPct + "bad%zz":        {"x"},
		HeaderPct + "receipt":       {"r-1"},
		HeaderPct + "trace%2Fid":    {"a%0Ab"},
		"Nats-Expected-Last-Msg-Id": {"x"},
	}
	got := stompHeaders(n, skipIn)
	want := stomp.Headers{
		{Key: "plain", Value: "v"},
		{Key: "route", Value: "eu,us"},
		{Key: HeaderPct + "bad%zz", Value: "x"},
		{Key: "trace/id", Value: "a\nb"},
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Key < got[j].Key })
	sort.Slice(want, func(i, j int) bool { return want[i].Key < want[j].Key })
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
