package multicast

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Conformance vectors: language-neutral cases in testdata/conformance/*.jsonl that any receiver
// of this protocol must pass (format in docs/multicast-protocol.md, section 9). The checked-in
// files are what TestConformance asserts; `go test -run TestConformance -update ./multicast`
// regenerates them from the cases below, after checking the Go receiver gives exactly the
// expected events written by hand in each case.

var updateConformance = flag.Bool("update", false, "rewrite testdata/conformance from the cases in conformance_test.go")

const conformanceDir = "testdata/conformance"

// confConfig is a case's first line.
type confConfig struct {
	Case        string   `json:"case"`
	Description string   `json:"description"`
	Profile     string   `json:"profile"`
	Mode        string   `json:"mode"`
	Topics      []string `json:"topics,omitempty"`
	KeyHex      string   `json:"key_hex,omitempty"`
	KeyID       uint8    `json:"key_id,omitempty"`
	// Revision 3: more keys accepted (rotation), and sealing required.
	Keys []confKey `json:"keys,omitempty"`
	Seal bool      `json:"seal,omitempty"`
	// Revision 4: late join with history (section 4.10): the last late_join messages per
	// stream, those sent within late_join_age_ms; receiver_id is the receiver's id (HISTORY
	// answers name it).
	LateJoin      int    `json:"late_join,omitempty"`
	LateJoinAgeMs int64  `json:"late_join_age_ms,omitempty"`
	ReceiverID    uint64 `json:"receiver_id,omitempty"`
}

// confKey is one more key a case's receiver accepts.
type confKey struct {
	ID     uint8  `json:"id"`
	KeyHex string `json:"key_hex"`
}

// confInput is a datagram arriving at T microseconds after the start, from an address.
type confInput struct {
	T    int64  `json:"t_us"`
	From string `json:"from"`
	Hex  string `json:"hex"`
	Note string `json:"note,omitempty"`
}

// confEnd is a case's last line: run the clock to End, then the events and counters must be these.
type confEnd struct {
	End      int64             `json:"end_us"`
	Expect   []json.RawMessage `json:"expect"`
	Counters map[string]uint64 `json:"counters"`
}

// confCounters are the counters a vector asserts: the drops the specification names.
func confCounters(c ReceiverCounters) map[string]uint64 {
	return map[string]uint64{"auth_failures": c.AuthFailures, "malformed": c.Malformed, "ahead": c.Ahead,
		"other_session": c.OtherSession, "foreign_source": c.ForeignSource, "messages": c.Messages, "gaps": c.Gaps,
		"forged_fragments": c.ForgedFragments, "sealed": c.Sealed}
}

// eventJSON renders an event as `herald listen --json` prints it.
func eventJSON(e Event) json.RawMessage {
	var v any
	switch e := e.(type) {
	case Message:
		hs := map[string]string{}
		for _, h := range e.Headers {
			if _, dup := hs[h.Key]; !dup {
				hs[h.Key] = h.Value
			}
		}
		m := map[string]any{"topic": e.Topic, "stream": e.Stream, "seq": e.StreamSeq, "headers": hs, "body": string(e.Body)}
		if !utf8.Valid(e.Body) {
			m["body_base64"] = base64.StdEncoding.EncodeToString(e.Body)
		}
		if e.Repaired {
			m["repaired"] = true
		}
		v = m
	case Gap:
		v = map[string]any{"gap": map[string]any{"topic": e.Topic, "stream": e.Stream, "from": e.From, "to": e.To, "reason": e.Reason.String()}}
	case SessionChange:
		v = map[string]any{"session": map[string]any{"old": fmt.Sprintf("%016x", e.Old), "new": fmt.Sprintf("%016x", e.New)}}
	}
	b, _ := json.Marshal(v)
	return b
}

// confCase is one vector as the generator writes it.
type confCase struct {
	cfg    confConfig
	in     []confInput
	end    int64
	expect []string // evStrings of the expected events, written by hand
}

// runConformance runs a vector against a fresh ReceiverCore and returns its events and counters.
func runConformance(t *testing.T, cfg confConfig, in []confInput, end int64) ([]Event, ReceiverCounters) {
	t.Helper()
	rc := ReceiverCoreConfig{Profile: Profile(cfg.Profile), Filter: topicFilter(cfg.Topics), Rand: rand.New(rand.NewPCG(1, 2))}
	if cfg.Mode == "skip" {
		rc.Mode = Skip
	}
	if cfg.KeyHex != "" {
		k, err := hex.DecodeString(cfg.KeyHex)
		if err != nil {
			t.Fatal(err)
		}
		rc.Auth = NewAuth(k, cfg.KeyID)
		if len(cfg.Keys) > 0 || cfg.Seal {
			rc.Keys = []Key{{ID: cfg.KeyID, Secret: k}}
		}
	}
	for _, ck := range cfg.Keys {
		k, err := hex.DecodeString(ck.KeyHex)
		if err != nil {
			t.Fatal(err)
		}
		rc.Keys = append(rc.Keys, Key{ID: ck.ID, Secret: k})
	}
	rc.Seal = cfg.Seal
	rc.LateJoin, rc.LateJoinAge, rc.ID = cfg.LateJoin, time.Duration(cfg.LateJoinAgeMs)*time.Millisecond, cfg.ReceiverID
	rc.Topics = cfg.Topics
	r, err := NewReceiverCore(rc)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 0)
	var evs []Event
	until := func(at time.Time) {
		for d := r.Deadline(); !d.IsZero() && !d.After(at); d = r.Deadline() {
			r.Tick(d)
			e, _ := r.Ready()
			evs = append(evs, e...)
		}
	}
	for _, d := range in {
		at := start.Add(time.Duration(d.T) * time.Microsecond)
		until(at)
		b, err := hex.DecodeString(d.Hex)
		if err != nil {
			t.Fatal(err)
		}
		r.Handle(at, netip.MustParseAddrPort(d.From), b)
		e, _ := r.Ready()
		evs = append(evs, e...)
	}
	until(start.Add(time.Duration(end) * time.Microsecond))
	return evs, r.Counters()
}

func TestConformance(t *testing.T) {
	if *updateConformance {
		writeConformance(t)
	}
	files, _ := filepath.Glob(filepath.Join(conformanceDir, "*.jsonl"))
	if len(files) < 20 {
		t.Fatalf("got %d conformance files in %s, want at least 20", len(files), conformanceDir)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".jsonl"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
			var cfg confConfig
			var end confEnd
			if err := json.Unmarshal(lines[0], &cfg); err != nil || cfg.Case == "" {
				t.Fatalf("first line: %v %s", err, lines[0])
			}
			if err := json.Unmarshal(lines[len(lines)-1], &end); err != nil || end.Expect == nil {
				t.Fatalf("last line: %v %s", err, lines[len(lines)-1])
			}
			var in []confInput
			for _, l := range lines[1 : len(lines)-1] {
				var d confInput
				dec := json.NewDecoder(bytes.NewReader(l))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&d); err != nil {
					t.Fatalf("input line %s: %v", l, err)
				}
				in = append(in, d)
			}
			evs, c := runConformance(t, cfg, in, end.End)
			var got []string
			for _, e := range evs {
				got = append(got, string(eventJSON(e)))
			}
			var want []string
			for _, e := range end.Expect {
				var v any
				json.Unmarshal(e, &v)
				c, _ := json.Marshal(v)
				want = append(want, string(c))
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s\nevents:\n  %s\nwant:\n  %s", cfg.Description, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			for k, v := range end.Counters {
				if confCounters(c)[k] != v {
					t.Errorf("counter %s: got %d, want %d", k, confCounters(c)[k], v)
				}
			}
		})
	}
}

// writeConformance checks every case against the Go receiver and writes the files.
func writeConformance(t *testing.T) {
	os.MkdirAll(conformanceDir, 0o755)
	old, _ := filepath.Glob(filepath.Join(conformanceDir, "*.jsonl"))
	for _, f := range old {
		os.Remove(f)
	}
	for i, c := range conformanceCases() {
		evs, counters := runConformance(t, c.cfg, c.in, c.end)
		if got := evStrings(evs); !slices.Equal(got, c.expect) {
			t.Fatalf("case %s: the Go receiver gives\n  %q\nwant\n  %q", c.cfg.Case, got, c.expect)
		}
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		enc.Encode(c.cfg)
		for _, d := range c.in {
			enc.Encode(d)
		}
		end := confEnd{End: c.end, Expect: []json.RawMessage{}, Counters: confCounters(counters)}
		for _, e := range evs {
			end.Expect = append(end.Expect, eventJSON(e))
		}
		enc.Encode(end)
		w.Flush()
		name := filepath.Join(conformanceDir, fmt.Sprintf("%02d-%s.jsonl", i+1, c.cfg.Case))
		if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// vec builds a case: datagrams at 1 ms steps unless given a time.
type vec struct {
	c   confCase
	t   int64
	src string
}

func newVec(name, desc string) *vec {
	return &vec{c: confCase{cfg: confConfig{Case: name, Description: desc, Profile: string(ProfileLowLatency), Mode: "ordered"}}, src: "198.18.0.1:7400"}
}

// at sets the arrival time (microseconds) of the next datagram.
func (v *vec) at(us int64) *vec { v.t = us; return v }

func (v *vec) send(note string, b []byte) *vec {
	v.c.in = append(v.c.in, confInput{T: v.t, From: v.src, Hex: hex.EncodeToString(b), Note: note})
	v.t += 1000
	return v
}

func (v *vec) end(us int64, expect ...string) confCase {
	v.c.end, v.c.expect = us, expect
	return v.c
}

const (
	cs1 = 0x6567000011112222 // a session started at second 0x65670000
	cs2 = 0x6567000111113333 // a session started a second later
)

func conformanceCases() []confCase {
	g, g2 := dgb{session: cs1}, dgb{session: cs2}
	catAB := g.cat(1, 1, CatalogEntry{1, 1, "px.eu"}, CatalogEntry{2, 1, "px.us"})
	pxeu := func(seq uint64, body string) Record { return rec(1, seq, body) }
	pxus := func(seq uint64, body string) Record { return rec(2, seq, body) }
	a := CatalogEntry{Stream: 1, First: 2, Topic: "px.eu"}
	var cases []confCase
	add := func(c confCase) { cases = append(cases, c) }
	const S1, S12 = "session 0 2222", "session 2222 3333"

	add(newVec("in-order", "two topics in order from the session's start").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "1.08"), pxus(1, "2.5"))).
		send("DATA", g.data(3, 1, pxeu(2, "1.09"))).
		end(10000, S1, "msg px.eu 1 1.08", "msg px.us 1 2.5", "msg px.eu 2 1.09"))
	add(newVec("reorder", "datagram 3 arrives before 2: delivery waits for 2").
		send("CATALOG", catAB).
		send("DATA 3", g.data(3, 1, pxeu(2, "b"))).
		send("DATA 2", g.data(2, 1, pxeu(1, "a"))).
		end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 b"))
	v := newVec("reorder-skip", "skip mode: datagram 3 is delivered at once, 2 when it comes")
	v.c.cfg.Mode = "skip"
	add(v.send("CATALOG", catAB).
		send("DATA 3", g.data(3, 1, pxeu(2, "b"))).
		send("DATA 2", g.data(2, 1, pxeu(1, "a"))).
		end(10000, S1, "msg px.eu 2 b", "msg px.eu 1 a"))
	add(newVec("duplicate", "the same datagram twice is delivered once").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("DATA again", g.data(2, 1, pxeu(1, "a"))).
		end(10000, S1, "msg px.eu 1 a"))
	add(newVec("loss-repair", "datagram 3 lost, repaired by RDATA within the budget").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("DATA 4", g.data(4, 1, pxeu(3, "c"))).
		at(20000).send("RDATA 3", g.rdata(3, 1, pxeu(2, "b"))).
		end(300000, S1, "msg px.eu 1 a", "msg px.eu 2 b", "msg px.eu 3 c"))
	add(newVec("loss-expired", "datagram 3 never comes: given up after the budget (200 ms from the first NAK), a gap, then 4").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("DATA 4", g.data(4, 1, pxeu(3, "c"), pxus(1, "x"))).
		end(1000000, S1, "msg px.eu 1 a", "msg px.us 1 x", "gap px.eu 2-2 expired", "msg px.eu 3 c"))
	add(newVec("loss-gone-ncf", "an NCF gone makes datagram 3 lost at once").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("DATA 4", g.data(4, 1, pxeu(3, "c"))).
		send("NCF gone 3", g.ncf(4, 1, NCFGone, Range{3, 3})).
		end(10000, S1, "msg px.eu 1 a", "gap px.eu 2-2 gone", "msg px.eu 3 c"))
	add(newVec("loss-report", "a LOSS datagram names datagram 3 (reason expired): lost at once, with its reason").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("DATA 4", g.data(4, 1, pxeu(3, "c"))).
		send("LOSS 3", g.loss(4, 1, ReasonExpired, Range{3, 3})).
		end(10000, S1, "msg px.eu 1 a", "gap px.eu 2-2 expired", "msg px.eu 3 c"))
	add(newVec("trailing-edge", "the trailing edge passes datagram 3 while it is missing: lost, reason gone").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("DATA 5, trailing 4", g.data(5, 4, pxeu(4, "d"))).
		send("DATA 4", g.data(4, 4, pxeu(3, "c"))).
		end(10000, S1, "msg px.eu 1 a", "gap px.eu 2-2 gone", "msg px.eu 3 c", "msg px.eu 4 d"))
	add(newVec("tail-loss", "the last datagram is lost: a HEARTBEAT reveals it, NAKs fail, a gap after the budget").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("HEARTBEAT leading 3, px.eu at 2", g.hb(3, 1, StreamSeq{1, 2})).
		end(1000000, S1, "msg px.eu 1 a", "gap px.eu 2-2 expired"))
	add(newVec("unknown-stream", "records arrive before the CATALOG that names their stream: held, then delivered").
		send("DATA 2", g.data(2, 1, pxeu(1, "a"))).
		send("CATALOG 3", g.cat(3, 1, CatalogEntry{1, 2, "px.eu"})).
		send("DATA 4", g.data(4, 1, pxeu(2, "b"))).
		end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 b"))
	add(newVec("young-session", "first heard at datagram 3, trailing edge 1: recovered from 1 by repairs").
		send("DATA 3", g.data(3, 1, pxeu(2, "b"))).
		at(5000).send("RDATA CATALOG 1", g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeCatalog, Flags: FlagRepair, Seq: 1, Trailing: 1},
		Catalog: []CatalogEntry{{1, 1, "px.eu"}}})).
		send("RDATA 2", g.rdata(2, 1, pxeu(1, "a"))).
		end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 b"))
	add(newVec("late-join-repaired", "join on a HEARTBEAT; the first DATA after it is lost and repaired later: delivered").
		send("HEARTBEAT 100, px.eu at 50", g.hb(100, 90, StreamSeq{1, 50})).
		send("CATALOG 102", g.cat(102, 90, a)).
		send("DATA 103", g.data(103, 90, pxeu(52, "52"))).
		send("RDATA 101", g.rdata(101, 90, pxeu(51, "51"))).
		end(10000, S1, "msg px.eu 51 51", "msg px.eu 52 52"))
	add(newVec("late-join-lost", "join on a HEARTBEAT; the first DATA after it is lost for good: a gap from the HEARTBEAT's stream sequence").
		send("HEARTBEAT 100, px.eu at 50", g.hb(100, 90, StreamSeq{1, 50})).
		send("CATALOG 102", g.cat(102, 90, a)).
		send("DATA 103", g.data(103, 90, pxeu(52, "52"))).
		send("LOSS 101", g.loss(103, 90, ReasonGone, Range{101, 101})).
		end(10000, S1, "gap px.eu 51-51 gone", "msg px.eu 52 52"))
	add(newVec("late-join-lost-unknown-start", "join on a CATALOG; the first DATA after it is lost for good and nothing names the stream's sequence before the join: a gap from 1").
		send("CATALOG 100", g.cat(100, 90, a)).
		send("DATA 102", g.data(102, 90, pxeu(52, "52"))).
		send("NCF gone 101", g.ncf(102, 90, NCFGone, Range{101, 101})).
		end(10000, S1, "gap px.eu 1-51 gone", "msg px.eu 52 52"))
	add(newVec("late-join-history", "join on a HEARTBEAT with no loss after: what was sent before the join is not reported").
		send("HEARTBEAT 100, px.eu at 40", g.hb(100, 90, StreamSeq{1, 40})).
		send("CATALOG 101", g.cat(101, 90, a)).
		send("DATA 102", g.data(102, 90, pxeu(52, "52"))).
		end(10000, S1, "msg px.eu 52 52"))
	add(newVec("session-change", "the sender restarts: the new session's datagrams are kept until the old one has been silent for the session timeout (3 s), then handled").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "old"))).
		send("HEARTBEAT, px.eu at 2 (2 lost)", g.hb(3, 1, StreamSeq{1, 2})).
		at(300000).send("new session CATALOG (kept: the old one is live)", g2.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("new session DATA 2 (kept)", g2.data(2, 1, pxeu(1, "new"))).
		at(3500000).send("new session HEARTBEAT (old silent for 3 s: switch)", g2.hb(2, 1, StreamSeq{1, 1})).
		send("old session DATA, late: a retired session", g.data(4, 1, pxeu(3, "late"))).
		end(4000000, S1, "msg px.eu 1 old", "gap px.eu 2-2 expired", S12, "msg px.eu 1 new"))
	add(newVec("forged-session", "one datagram of another session while the current one is live does not retire it").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("forged: another session", g2.data(2, 1, pxeu(1, "forged"))).
		send("DATA", g.data(3, 1, pxeu(2, "b"))).
		end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 b"))
	fs := newVec("foreign-source", "a datagram of the current session from another address is dropped").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a")))
	fs.src = "198.18.0.66:7400"
	fs.send("forged: same session, other source", g.data(3, 1, pxeu(2, "forged")))
	fs.src = "198.18.0.1:7400"
	add(fs.send("DATA", g.data(3, 1, pxeu(2, "b"))).end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 b"))
	add(newVec("jump-ahead", "HEARTBEAT and DATA far ahead (2^40, 2^20) of a live session are not believed").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("forged HEARTBEAT 2^40", g.hb(1<<40, 1<<40-5, StreamSeq{1, 1 << 40})).
		send("forged DATA 2^20", g.data(1<<20, 1, pxeu(1<<20, "forged"))).
		send("forged NCF gone, trailing 2^20", g.ncf(1<<20, 1<<20, NCFGone, Range{1, 1 << 20})).
		send("DATA", g.data(3, 1, pxeu(2, "b"))).
		end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 b"))
	add(newVec("jump-after-silence", "after the session timeout without a datagram, a jump is believed: the hole is reported").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		at(3100000).send("DATA 100000, trailing 100000", g.data(100000, 100000, pxeu(500, "back"))).
		end(3200000, S1, "msg px.eu 1 a", "gap px.eu 2-499 gone", "msg px.eu 500 back"))
	data2 := g.data(2, 1, pxeu(1, "a"))
	bad := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), data2...)) }
	add(newVec("malformed", "truncated, bad magic, version 2, reserved bytes, unknown flag, two HEARTBEAT edges, record past the end: dropped and counted").
		send("CATALOG", catAB).
		send("truncated header", data2[:20]).
		send("truncated record", data2[:len(data2)-1]).
		send("bad magic", bad(func(b []byte) []byte { b[0] = 'X'; return b })).
		send("version 2", bad(func(b []byte) []byte { b[2] = 2; return b })).
		send("reserved byte", bad(func(b []byte) []byte { b[6] = 1; return b })).
		send("unknown flag 0x10", bad(func(b []byte) []byte { b[4] |= 0x10; return b })).
		send("record length past the end", bad(func(b []byte) []byte { b[HeaderSize+2+12] = 0xff; return b })).
		send("HEARTBEAT edges differ", func() []byte { b := g.hb(2, 1); b[HeaderSize] = 9; return b }()).
		send("trailing byte", append(append([]byte(nil), data2...), 0)).
		send("DATA", data2).
		end(20000, S1, "msg px.eu 1 a"))
	key := []byte("0123456789abcdef")
	ga, gx := dgb{session: cs1, auth: NewAuth(key, 1)}, dgb{session: cs1, auth: NewAuth([]byte("guess"), 1)}
	gk := dgb{session: cs1, auth: NewAuth(key, 2)}
	hm := newVec("hmac", "with key 0123456789abcdef id 1: signed datagrams pass; unsigned, wrong key, wrong key id and a flipped bit fail authentication")
	hm.c.cfg.KeyHex, hm.c.cfg.KeyID = hex.EncodeToString(key), 1
	flipped := ga.data(3, 1, pxeu(2, "b"))
	flipped[HeaderSize+20] ^= 1
	add(hm.send("CATALOG signed", ga.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("DATA signed", ga.data(2, 1, pxeu(1, "a"))).
		send("unsigned", g.data(3, 1, pxeu(2, "forged"))).
		send("wrong key", gx.data(3, 1, pxeu(2, "forged"))).
		send("wrong key id", gk.data(3, 1, pxeu(2, "forged"))).
		send("a bit flipped", flipped).
		send("DATA signed", ga.data(3, 1, pxeu(2, "b"))).
		end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 b"))
	hr := newVec("hmac-session-replay", "with a key, a new session switches at once, and a recorded session older than the current one is a replay")
	hr.c.cfg.KeyHex, hr.c.cfg.KeyID = hex.EncodeToString(key), 1
	ga2 := dgb{session: cs2, auth: NewAuth(key, 1)}
	add(hr.send("session 1 CATALOG", ga.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("session 1 DATA", ga.data(2, 1, pxeu(1, "one"))).
		send("session 2 CATALOG (a second later: switch at once)", ga2.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("session 2 DATA", ga2.data(2, 1, pxeu(1, "two"))).
		send("session 1 replayed", ga.data(3, 1, pxeu(2, "replayed"))).
		end(10000, S1, "msg px.eu 1 one", S12, "msg px.eu 1 two"))
	tf := newVec("topic-filter", "topics [\"px.*\"]: other topics are not delivered, nor their gaps")
	tf.c.cfg.Topics = []string{"px.*"}
	add(tf.send("CATALOG", g.cat(1, 1, CatalogEntry{1, 1, "px.eu"}, CatalogEntry{2, 1, "ops.alerts"})).
		send("DATA", g.data(2, 1, pxeu(1, "a"), rec(2, 1, "disk"))).
		send("DATA 4 (3 lost)", g.data(4, 4, rec(2, 3, "cpu"), pxeu(2, "b"))).
		end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 b"))
	// Fragments (revision 3): a message split over datagrams 2, 3 and 4, stream sequence 1.
	big := "a message in three fragments"
	f := frags(1, 1, big, 3)
	add(newVec("fragments", "one message in three fragments (DATA 2-4), then a small message: reassembled, in order").
		send("CATALOG", catAB).
		send("fragment 1/3", g.fdata(2, 1, false, f[0])).
		send("fragment 2/3", g.fdata(3, 1, false, f[1])).
		send("fragment 3/3", g.fdata(4, 1, false, f[2])).
		send("DATA 5", g.data(5, 1, pxeu(2, "next"))).
		end(10000, S1, "msg px.eu 1 "+big, "msg px.eu 2 next"))
	add(newVec("fragments-reordered", "the fragments arrive 3, 1, 2: one message when the last comes").
		send("CATALOG", catAB).
		send("fragment 3/3", g.fdata(4, 1, false, f[2])).
		send("fragment 1/3", g.fdata(2, 1, false, f[0])).
		send("DATA 5", g.data(5, 1, pxeu(2, "next"))).
		send("fragment 2/3", g.fdata(3, 1, false, f[1])).
		end(10000, S1, "msg px.eu 1 "+big, "msg px.eu 2 next"))
	add(newVec("fragment-repaired", "fragment 2 (DATA 3) lost and repaired by RDATA: the message is delivered, flagged repaired").
		send("CATALOG", catAB).
		send("fragment 1/3", g.fdata(2, 1, false, f[0])).
		send("fragment 3/3", g.fdata(4, 1, false, f[2])).
		send("DATA 5", g.data(5, 1, pxeu(2, "next"))).
		at(20000).send("RDATA 3, fragment 2/3", g.fdata(3, 1, true, f[1])).
		end(300000, S1, "msg px.eu 1 "+big, "msg px.eu 2 next"))
	add(newVec("fragment-lost", "fragment 2 (DATA 3) lost for good: the whole message is a gap, never a partial delivery").
		send("CATALOG", catAB).
		send("fragment 1/3", g.fdata(2, 1, false, f[0])).
		send("fragment 3/3", g.fdata(4, 1, false, f[2])).
		send("DATA 5", g.data(5, 1, pxeu(2, "next"))).
		end(1000000, S1, "gap px.eu 1-1 expired", "msg px.eu 2 next"))
	m2, _ := AppendMessage(nil, nil, []byte("12345678")) // 10 bytes
	fr := func(total, off uint32, b []byte) Record {
		return Record{Stream: 1, Seq: 2, Frag: true, Total: total, Offset: off, Payload: b}
	}
	noFlag := g.data(9, 1, fr(10, 0, m2[:5])) // a fragment record without the datagram's flag
	noFlag[4] = 0
	add(newVec("fragments-forged", "fragments with a total above MaxMessage, past their total, overlapping, or with another total are dropped and counted; a fragment record without the flag is malformed; the real message is reassembled").
		send("CATALOG", catAB).
		send("DATA 2", g.data(2, 1, pxeu(1, "a"))).
		send("forged: total 2^31 (above MaxMessage)", g.fdata(3, 1, false, fr(1<<31, 0, m2[:5]))).
		send("forged: offset 8 + 5 bytes past total 10", g.fdata(4, 1, false, fr(10, 8, m2[5:]))).
		send("fragment 1/2: bytes 0-4 of 10", g.fdata(5, 1, false, fr(10, 0, m2[:5]))).
		send("forged: bytes 3-6 overlap", g.fdata(6, 1, false, fr(10, 3, m2[3:7]))).
		send("forged: total 11 after 10", g.fdata(7, 1, false, fr(11, 5, m2[5:]))).
		send("the same fragment 1/2 again (a duplicate)", g.fdata(8, 1, false, fr(10, 0, m2[:5]))).
		send("DATA 9 with a fragment record but no fragment flag: malformed", noFlag).
		send("fragment 2/2: bytes 5-9", g.fdata(9, 1, false, fr(10, 5, m2[5:]))).
		end(10000, S1, "msg px.eu 1 a", "msg px.eu 2 12345678"))
	// Sealing (revision 3): XChaCha20-Poly1305 under HKDF(key), header and counter as associated data.
	sk := []byte("0123456789abcdef0123456789abcdef")
	gs := dgb{session: cs1, seal: NewSealer(Key{ID: 1, Secret: sk})}
	gsx := dgb{session: cs1, seal: NewSealer(Key{ID: 1, Secret: []byte("another key, same id")})}
	gh := dgb{session: cs1, auth: NewAuth(sk, 1)}
	sv := newVec("sealed", "seal on, key 0123456789abcdef0123456789abcdef id 1: sealed datagrams are opened; a flipped ciphertext bit, a flipped header bit, another key and an HMAC-signed (unsealed) datagram are refused")
	sv.c.cfg.KeyHex, sv.c.cfg.KeyID, sv.c.cfg.Seal = hex.EncodeToString(sk), 1, true
	tamper := func(b []byte, i int) []byte { b[i] ^= 1; return b }
	add(sv.send("CATALOG sealed", gs.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("DATA sealed", gs.data(2, 1, pxeu(1, "secret 1"))).
		send("ciphertext bit flipped", tamper(gs.data(3, 1, pxeu(2, "forged")), HeaderSize+12)).
		send("header bit flipped (trailing edge)", tamper(gs.data(3, 1, pxeu(2, "forged")), 24)).
		send("sealed under another key", gsx.data(3, 1, pxeu(2, "forged"))).
		send("HMAC-signed, not sealed", gh.data(3, 1, pxeu(2, "forged"))).
		send("DATA sealed", gs.data(3, 1, pxeu(2, "secret 2"))).
		end(10000, S1, "msg px.eu 1 secret 1", "msg px.eu 2 secret 2"))
	gs0 := dgb{session: cs1, seal: NewSealer(Key{ID: 1, Secret: sk})}
	add(newVec("sealed-no-key", "a receiver without the key sees only sealed datagrams: each counted as sealed, nothing delivered").
		send("CATALOG sealed", gs0.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("DATA sealed", gs0.data(2, 1, pxeu(1, "secret 1"))).
		end(10000))
	nk := []byte("the next key, 32 bytes long.....")
	g1, g2k := dgb{session: cs1, seal: NewSealer(Key{ID: 1, Secret: sk})}, dgb{session: cs1, seal: NewSealer(Key{ID: 2, Secret: nk})}
	rv := newVec("key-rotation", "keys 1 and 2, seal on: the sender moves to key 2; key 1 is still accepted for 10 s (KeyOverlap) after the first datagram under key 2, then refused for good")
	rv.c.cfg.KeyHex, rv.c.cfg.KeyID, rv.c.cfg.Seal = hex.EncodeToString(sk), 1, true
	rv.c.cfg.Keys = []confKey{{ID: 2, KeyHex: hex.EncodeToString(nk)}}
	add(rv.send("CATALOG, key 1", g1.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("DATA 2, key 1", g1.data(2, 1, pxeu(1, "k1"))).
		send("DATA 3, key 2: key 2 is current from now", g2k.data(3, 1, pxeu(2, "k2"))).
		at(5000000).send("RDATA 4, key 1, 5 s later: still accepted", g1.rdata(4, 1, pxeu(3, "k1 late"))).
		send("DATA 5, key 2", g2k.data(5, 1, pxeu(4, "k2 again"))).
		at(10100000).send("DATA 6, key 1, 10.1 s after the switch: refused", g1.data(6, 1, pxeu(5, "k1 too late"))).
		send("DATA 6, key 2", g2k.data(6, 1, pxeu(5, "k2 last"))).
		at(12000000).send("DATA 7, key 1 again: refused for good", g1.data(7, 1, pxeu(6, "k1 replay"))).
		end(12100000, S1, "msg px.eu 1 k1", "msg px.eu 2 k2", "msg px.eu 3 k1 late", "msg px.eu 4 k2 again", "msg px.eu 5 k2 last"))
	// Late join with history (revision 4): the receiver (id 0x1234) joins at datagram 100 and
	// sends a HISTORY-REQUEST (NAK counter 1) at once; the sender's HISTORY answer says px.eu
	// starts at stream sequence 51, in datagrams 98-99.
	const me = 0x1234
	hist := func(leading, trailing, receiver, request uint64, sts []StreamSeq, rs ...Range) []byte {
		return g.enc(&Packet{PacketHeader: PacketHeader{Type: TypeHistory, Seq: leading, Trailing: trailing},
			Receiver: receiver, Request: request, Streams: sts, Ranges: rs})
	}
	lateCfg := func(v *vec) *vec {
		v.c.cfg.LateJoin, v.c.cfg.ReceiverID, v.c.cfg.Topics = 2, me, []string{"px.*"}
		return v
	}
	add(lateCfg(newVec("history", "late_join 2: join on a CATALOG at 100; a HISTORY for another receiver is ignored; ours names px.eu from 51 in datagrams 98-99, which come as repairs (with a record of another stream, ignored): 51, 52, then the live 53")).
		send("CATALOG 100, px.eu first 95 (before the join)", g.cat(100, 90, CatalogEntry{1, 95, "px.eu"})).
		send("DATA 101, px.eu 53 (held: the history decides the start)", g.data(101, 90, pxeu(53, "53"))).
		send("HISTORY for receiver 0x9999: not ours", hist(101, 90, 0x9999, 1, []StreamSeq{{1, 40}}, Range{91, 99})).
		send("HISTORY for 0x1234, request 1: px.eu from 51, datagrams 98-99", hist(101, 90, me, 1, []StreamSeq{{1, 51}}, Range{98, 99})).
		send("RDATA 99, px.eu 52", g.rdata(99, 90, pxeu(52, "52"))).
		send("RDATA 98, px.eu 51 and px.us 7 (not asked for)", g.rdata(98, 90, pxeu(51, "51"), pxus(7, "x"))).
		send("DATA 102, px.eu 54", g.data(102, 90, pxeu(54, "54"))).
		end(20000, S1, "msg px.eu 51 51", "msg px.eu 52 52", "msg px.eu 53 53", "msg px.eu 54 54"))
	add(lateCfg(newVec("history-lost", "late_join 2: datagram 99 of the history never comes: given up after the budget, an exact gap between 51 and the live 53")).
		send("CATALOG 100, px.eu first 95", g.cat(100, 90, CatalogEntry{1, 95, "px.eu"})).
		send("DATA 101, px.eu 53", g.data(101, 90, pxeu(53, "53"))).
		send("HISTORY for 0x1234: px.eu from 51, datagrams 98-99", hist(101, 90, me, 1, []StreamSeq{{1, 51}}, Range{98, 99})).
		send("RDATA 98, px.eu 51", g.rdata(98, 90, pxeu(51, "51"))).
		end(1000000, S1, "msg px.eu 51 51", "gap px.eu 52-52 expired", "msg px.eu 53 53"))
	add(lateCfg(newVec("history-unanswered", "late_join 2, a sender of an earlier revision (no HISTORY answer): after 1 s the stream starts as without late join, at its first record after the join")).
		send("CATALOG 100, px.eu first 95", g.cat(100, 90, CatalogEntry{1, 95, "px.eu"})).
		send("DATA 101, px.eu 53", g.data(101, 90, pxeu(53, "53"))).
		at(1100000).send("DATA 102, px.eu 54", g.data(102, 90, pxeu(54, "54"))).
		end(1200000, S1, "msg px.eu 53 53", "msg px.eu 54 54"))
	add(lateCfg(newVec("history-gone", "late_join 2: the history names datagrams 97-99; an NCF gone for 97 and a trailing edge of 99 make 97 and 98 lost at once: a gap from 50, then 52 and the live 53")).
		send("CATALOG 100, px.eu first 95", g.cat(100, 90, CatalogEntry{1, 95, "px.eu"})).
		send("DATA 101, px.eu 53", g.data(101, 90, pxeu(53, "53"))).
		send("HISTORY for 0x1234: px.eu from 50, datagrams 97-99", hist(101, 90, me, 1, []StreamSeq{{1, 50}}, Range{97, 99})).
		send("NCF gone 97", g.ncf(101, 90, NCFGone, Range{97, 97})).
		send("RDATA 99, px.eu 52, trailing edge 99", g.rdata(99, 99, pxeu(52, "52"))).
		end(20000, S1, "gap px.eu 50-51 gone", "msg px.eu 52 52", "msg px.eu 53 53"))
	// Revision 5: repairs that keep coming keep the holes open (section 4.4, give-up).
	add(newVec("repairs-keep-coming", "datagrams 3 and 5 lost; RDATA 3 at 150 ms, RDATA 5 at 320 ms (past 200 ms from the first NAK, but within 200 ms of the last repair): both delivered, no gap").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("DATA 4", g.data(4, 1, pxeu(3, "c"))).
		send("DATA 6", g.data(6, 1, pxeu(5, "e"))).
		at(150000).send("RDATA 3", g.rdata(3, 1, pxeu(2, "b"))).
		at(320000).send("RDATA 5", g.rdata(5, 1, pxeu(4, "d"))).
		end(1000000, S1, "msg px.eu 1 a", "msg px.eu 2 b", "msg px.eu 3 c", "msg px.eu 4 d", "msg px.eu 5 e"))
	add(newVec("repairs-stop", "datagrams 3 and 5 lost; RDATA 3 at 150 ms, then nothing: 5 is given up about 200 ms after that last repair, a gap, then 5").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("DATA 4", g.data(4, 1, pxeu(3, "c"))).
		send("DATA 6", g.data(6, 1, pxeu(5, "e"))).
		at(150000).send("RDATA 3", g.rdata(3, 1, pxeu(2, "b"))).
		at(600000).send("RDATA 5, too late", g.rdata(5, 1, pxeu(4, "d"))).
		end(1000000, S1, "msg px.eu 1 a", "msg px.eu 2 b", "msg px.eu 3 c", "gap px.eu 4-4 expired", "msg px.eu 5 e"))
	// Revision 6: a session change reports every stream sequence the old session showed and did
	// not deliver (section 4.7), a message partly reassembled included.
	add(newVec("session-change-partial", "the sender restarts after two of the three fragments of px.eu 2: the session change reports px.eu 2 as a session-restart gap").
		send("CATALOG", catAB).
		send("DATA", g.data(2, 1, pxeu(1, "a"))).
		send("fragment 1/3 of px.eu 2", g.fdata(3, 1, false, frags(1, 2, big, 3)[0])).
		send("fragment 2/3 of px.eu 2", g.fdata(4, 1, false, frags(1, 2, big, 3)[1])).
		at(3500000).send("new session CATALOG (old silent for 3 s: switch)", g2.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("new session DATA 2", g2.data(2, 1, pxeu(1, "new"))).
		end(4000000, S1, "msg px.eu 1 a", "gap px.eu 2-2 session-restart", S12, "msg px.eu 1 new"))
	// Revision 6: a receiver that was following a session recovers the next one from its start
	// while the sender holds sequence 1, whatever it lost of its first datagrams (section 4.3).
	rb := newVec("restart-burst-loss", "with a key: the sender restarts and the receiver loses the new session's first 69 datagrams (its CATALOG and px.eu 1-68); first heard at DATA 70, trailing edge 1, the session is recovered from 1, not joined late: the LOSS for 1-69 makes px.eu 1-68 a gap")
	rb.c.cfg.KeyHex, rb.c.cfg.KeyID = hex.EncodeToString(key), 1
	add(rb.send("session 1 CATALOG", ga.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("session 1 DATA", ga.data(2, 1, pxeu(1, "one"))).
		send("session 2 DATA 70, trailing 1 (1-69 lost)", ga2.data(70, 1, pxeu(69, "69"))).
		send("session 2 CATALOG 71", ga2.cat(71, 1, CatalogEntry{1, 1, "px.eu"})).
		send("session 2 LOSS 1-69 gone", ga2.loss(71, 1, ReasonGone, Range{1, 69})).
		end(20000, S1, "msg px.eu 1 one", S12, "gap px.eu 1-68 gone", "msg px.eu 69 69"))
	// Revision 6: only a datagram taken as new moves the key rotation (section 6).
	g1b, g2b := dgb{session: cs1, seal: NewSealer(Key{ID: 1, Secret: sk})}, dgb{session: cs2, seal: NewSealer(Key{ID: 2, Secret: nk})}
	kr := newVec("key-rotation-replay", "keys 1 and 2, seal on: the receiver starts on a session under key 2; a replayed datagram of an older session under key 1 is dropped as a replay and does not make key 1 current: key 2 is still accepted 13 s later")
	kr.c.cfg.KeyHex, kr.c.cfg.KeyID, kr.c.cfg.Seal = hex.EncodeToString(sk), 1, true
	kr.c.cfg.Keys = []confKey{{ID: 2, KeyHex: hex.EncodeToString(nk)}}
	add(kr.send("CATALOG, key 2", g2b.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("DATA 2, key 2", g2b.data(2, 1, pxeu(1, "one"))).
		at(1000000).send("replayed: an older session's DATA, key 1", g1b.data(2, 1, pxeu(1, "replayed"))).
		at(2000000).send("DATA 3, key 2", g2b.data(3, 1, pxeu(2, "two"))).
		at(15000000).send("DATA 4, key 2, 13 s later: still accepted", g2b.data(4, 1, pxeu(3, "three"))).
		end(15100000, "session 0 3333", "msg px.eu 1 one", "msg px.eu 2 two", "msg px.eu 3 three"))
	// Revision 6: a stream never starts above a record received after the join point (4.10).
	add(lateCfg(newVec("history-forged-start", "late_join 2: a forged HISTORY (no key) names px.eu from 60 and px.us from 20, above their live records: px.eu, whose live 53 is held, starts by the rule of 4.3 at 53; px.us, with nothing held yet, starts at 20, and its live 18 and 19 that come after are one gap 18-19, not duplicates")).
		send("CATALOG 100, px.eu and px.us first 95", g.cat(100, 90, CatalogEntry{1, 95, "px.eu"}, CatalogEntry{2, 95, "px.us"})).
		send("DATA 101, px.eu 53", g.data(101, 90, pxeu(53, "53"))).
		send("forged HISTORY for 0x1234: px.eu from 60, px.us from 20, no datagram", hist(101, 90, me, 1, []StreamSeq{{1, 60}, {2, 20}})).
		send("DATA 102, px.eu 54 and px.us 18", g.data(102, 90, pxeu(54, "54"), pxus(18, "18"))).
		send("DATA 103, px.us 19 and 20", g.data(103, 90, pxus(19, "19"), pxus(20, "20"))).
		end(20000, S1, "msg px.eu 53 53", "msg px.eu 54 54", "gap px.us 18-19 expired", "msg px.us 20 20"))
	// Revision 6: an NCF applies to history holes as to any missing datagram (4.10, step 3).
	add(lateCfg(newVec("history-ncf-delayed", "late_join 2: history datagrams 98-99; 98 is repaired at once, an NCF delayed for 99 at 150 ms moves its give-up to 350 ms, and its repair at 310 ms is delivered")).
		send("CATALOG 100, px.eu first 95", g.cat(100, 90, CatalogEntry{1, 95, "px.eu"})).
		send("DATA 101, px.eu 53", g.data(101, 90, pxeu(53, "53"))).
		send("HISTORY for 0x1234: px.eu from 51, datagrams 98-99", hist(101, 90, me, 1, []StreamSeq{{1, 51}}, Range{98, 99})).
		send("RDATA 98, px.eu 51", g.rdata(98, 90, pxeu(51, "51"))).
		at(150000).send("NCF delayed 99", g.ncf(101, 90, NCFDelayed, Range{99, 99})).
		at(310000).send("RDATA 99, px.eu 52", g.rdata(99, 90, pxeu(52, "52"))).
		end(1000000, S1, "msg px.eu 51 51", "msg px.eu 52 52", "msg px.eu 53 53"))
	// Revision 6: with a key, a session of the same start second waits for the current one's
	// silence (section 4.2, step 4).
	ga3 := dgb{session: cs1&^0xffffffff | 0x99998888, auth: NewAuth(key, 1)}
	ss := newVec("hmac-same-second", "with a key: a session with the same start second as the current one (a sender restarted twice within a second, or the older of the two replayed) is kept as a candidate while the current one is live, and taken once it has been silent for 3 s")
	ss.c.cfg.KeyHex, ss.c.cfg.KeyID = hex.EncodeToString(key), 1
	add(ss.send("session 1 CATALOG", ga.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("session 1 DATA", ga.data(2, 1, pxeu(1, "one"))).
		send("same second, another session: CATALOG (kept)", ga3.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("session 1 DATA", ga.data(3, 1, pxeu(2, "two"))).
		at(3500000).send("same-second session DATA 2 (session 1 silent for 3 s: switch)", ga3.data(2, 1, pxeu(1, "new"))).
		end(4000000, S1, "msg px.eu 1 one", "msg px.eu 2 two", "session 2222 8888", "msg px.eu 1 new"))
	// Revision 6: a CATALOG conflict never silences a stream (4.6).
	cc := newVec("catalog-conflict", "topics [\"px.*\"]: a forged CATALOG (no key) names stream 2, not yet started, \"junk\" and takes the sequence of the sender's own CATALOG delta; px.us's first records are dropped as unwanted. The sender's next CATALOG names stream 2 px.us: a conflict, and the stream is delivered since that name matches; what it dropped is a gap")
	cc.c.cfg.Topics = []string{"px.*"}
	add(cc.send("CATALOG 1, px.eu", g.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("DATA 2, px.eu 1", g.data(2, 1, pxeu(1, "a"))).
		send("forged CATALOG 3: stream 2 is junk", g.cat(3, 1, CatalogEntry{2, 3, "junk"})).
		send("the sender's CATALOG 3 (stream 2 is px.us): a duplicate", g.cat(3, 1, CatalogEntry{2, 3, "px.us"})).
		send("DATA 4, px.us 1 (dropped: unwanted junk)", g.data(4, 1, pxus(1, "x"))).
		send("DATA 5, px.us 2 (dropped)", g.data(5, 1, pxus(2, "y"))).
		send("CATALOG 6, periodic: px.eu and px.us", g.cat(6, 1, CatalogEntry{1, 1, "px.eu"}, CatalogEntry{2, 3, "px.us"})).
		send("DATA 7, px.us 3", g.data(7, 1, pxus(3, "z"))).
		end(20000, S1, "msg px.eu 1 a", "gap px.us 1-2 expired", "msg px.us 3 z"))
	// Revision 7: a session change reports what a stream no CATALOG named showed, with an empty
	// topic (4.7).
	add(newVec("session-change-unnamed", "the CATALOG naming stream 2 is lost and the sender restarts before the receiver's catalog request is answered: px.us 1-2, held under no name, are one session-restart gap with an empty topic (stream 2)").
		send("CATALOG 1, px.eu only (the entry for stream 2 was in a lost datagram)", g.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("DATA 3, px.eu 1, stream 2 1 and 2 (datagram 2 lost)", g.data(3, 1, pxeu(1, "a"), pxus(1, "x"), pxus(2, "y"))).
		at(3500000).send("new session CATALOG (old silent for 3 s: switch)", g2.cat(1, 1, CatalogEntry{1, 1, "px.eu"})).
		send("new session DATA 2", g2.data(2, 1, pxeu(1, "new"))).
		end(4000000, S1, "msg px.eu 1 a", "gap  1-2 session-restart", S12, "msg px.eu 1 new"))
	return cases
}
