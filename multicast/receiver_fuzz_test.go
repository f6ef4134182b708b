package multicast

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// FuzzReceiverCore feeds arbitrary datagram sequences to the receiver core and checks its
// invariants after every step: the state stays within its bounds (MaxHole sequences, MaxStreams
// streams, MaxBytes accounted exactly), and what it delivers is a valid stream per session: no
// stream sequence delivered or reported twice and, in ordered mode, each event of a stream
// starting where the previous one ended.
//
// Input: byte 0 configures (bit 0 skip mode, bit 1 a key "k" id 1, bit 2 sealing with the keys
// of the conformance vectors: fuzzSealKeys, bit 3 late join with history as in vectors 34-37);
// then records of u8 time
// step (x 250 us), u8 source (bit 0: another address), u16 length, length bytes of datagram; at
// most 256 datagrams are used.
// The seed corpus in testdata/fuzz/FuzzReceiverCore is the conformance vectors in this form.
func FuzzReceiverCore(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 1 {
			return
		}
		cfg := ReceiverCoreConfig{Rand: rand.New(rand.NewPCG(1, 2)), MaxBytes: 256 << 10, MaxReassembly: 64 << 10}
		if in[0]&1 != 0 {
			cfg.Mode = Skip
		}
		if in[0]&2 != 0 {
			cfg.Auth = NewAuth([]byte("k"), 1)
		}
		if in[0]&4 != 0 {
			cfg.Keys, cfg.Seal = fuzzSealKeys, true
		}
		if in[0]&8 != 0 {
			cfg.LateJoin, cfg.ID = 2, 0x1234 // late join with history, the vectors' receiver id
		}
		r, err := NewReceiverCore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_700_000_000, 0)
		srcs := []netip.AddrPort{netip.MustParseAddrPort("198.18.0.1:7400"), netip.MustParseAddrPort("198.18.0.2:7400")}
		chk := newStreamChecker(cfg.Mode)
		step := func() {
			evs, _ := r.Ready()
			if err := chk.events(evs); err != nil {
				t.Fatal(err)
			}
			if err := r.checkInvariants(); err != nil {
				t.Fatal(err)
			}
		}
		// At most 256 datagrams per input: a jump costs up to MaxHole map entries, and a slow
		// input would stall the fuzzer.
		for b, k := in[1:], 0; len(b) >= 4 && k < 256; k++ {
			dt, src, n := b[0], b[1]&1, int(binary.LittleEndian.Uint16(b[2:]))
			b = b[4:]
			n = min(n, len(b))
			d := b[:n]
			b = b[n:]
			now = now.Add(time.Duration(dt) * 250 * time.Microsecond)
			for dl := r.Deadline(); !dl.IsZero() && !dl.After(now); dl = r.Deadline() {
				r.Tick(dl)
				step()
			}
			r.Handle(now, srcs[src], d)
			step()
		}
		now = now.Add(10 * time.Second)
		for dl := r.Deadline(); !dl.IsZero() && !dl.After(now); dl = r.Deadline() {
			r.Tick(dl)
			step()
		}
	})
}

// fuzzSealKeys are the keys of the sealed conformance vectors.
var fuzzSealKeys = []Key{{ID: 1, Secret: []byte("0123456789abcdef0123456789abcdef")}, {ID: 2, Secret: []byte("the next key, 32 bytes long.....")}}

// checkInvariants checks the core's bounds and its byte accounting.
func (r *ReceiverCore) checkInvariants() error {
	st := r.State()
	if len(r.done)+len(r.miss) > MaxHole || len(r.lj.hist) > MaxHole || st.Streams > MaxStreams || st.Bytes > r.cfg.MaxBytes {
		return fmt.Errorf("state %+v over its bounds", st)
	}
	if r.joined && r.next > r.leading+1 {
		return fmt.Errorf("frontier %d above leading edge %d + 1", r.next, r.leading)
	}
	if r.joined && r.leading >= r.next && r.leading-r.next >= MaxHole {
		return fmt.Errorf("window %d..%d wider than MaxHole", r.next, r.leading)
	}
	want := 0
	for _, s := range r.slist {
		want += streamOverhead
		if s.known {
			want += len(s.topic)
		}
		for _, h := range s.held {
			want += len(h.payload) + heldOverhead
		}
	}
	if want != r.bytes {
		return fmt.Errorf("accounted %d bytes, state holds %d", r.bytes, want)
	}
	fwant := 0
	for _, s := range r.slist {
		for q, pa := range s.frags {
			fwant += partialOverhead
			have := 0
			end := uint64(0)
			for _, p := range pa.pieces {
				if uint64(p.off) < end {
					return fmt.Errorf("stream %d seq %d: fragments overlap at %d", s.id, q, p.off)
				}
				end = uint64(p.off) + uint64(len(p.data))
				fwant += cap(p.data) + pieceOverhead
				have += len(p.data)
			}
			if end > uint64(pa.total) || have != int(pa.have) || (pa.dropped && have != 0) || pa.have >= pa.total {
				return fmt.Errorf("stream %d seq %d: partial %d of %d bytes (end %d, dropped %v)", s.id, q, have, pa.total, end, pa.dropped)
			}
		}
	}
	nparts := 0
	for _, s := range r.slist {
		nparts += len(s.frags)
	}
	if nparts != r.nparts {
		return fmt.Errorf("%d partials counted, %d held", r.nparts, nparts)
	}
	if fwant != r.fbytes || r.fbytes > r.cfg.MaxReassembly {
		return fmt.Errorf("reassembly accounted %d bytes, holds %d, bound %d", r.fbytes, fwant, r.cfg.MaxReassembly)
	}
	return nil
}

// streamChecker checks delivered events per session and stream.
type streamChecker struct {
	mode Mode
	next map[uint32]uint64          // ordered: the next sequence expected (0: nothing yet)
	seen map[uint32]map[uint64]bool // every sequence delivered or reported
}

func newStreamChecker(m Mode) *streamChecker {
	return &streamChecker{mode: m, next: map[uint32]uint64{}, seen: map[uint32]map[uint64]bool{}}
}

func (c *streamChecker) events(evs []Event) error {
	for _, e := range evs {
		var id uint32
		var from, to uint64
		switch e := e.(type) {
		case SessionChange:
			clear(c.next)
			clear(c.seen)
			continue
		case Message:
			id, from, to = e.Stream, e.StreamSeq, e.StreamSeq
		case Gap:
			id, from, to = e.Stream, e.From, e.To
			if from > to {
				return fmt.Errorf("%v: from after to", e)
			}
		}
		if c.mode == Ordered && c.next[id] != 0 && from != c.next[id] {
			return fmt.Errorf("stream %d: event %d-%d after %d", id, from, to, c.next[id]-1)
		}
		if c.seen[id] == nil {
			c.seen[id] = map[uint64]bool{}
		}
		if to-from < 1<<16 { // large gaps: order is checked, coverage would cost too much
			for q := from; ; q++ {
				if c.seen[id][q] {
					return fmt.Errorf("stream %d: sequence %d delivered or reported twice (%T)", id, q, e)
				}
				c.seen[id][q] = true
				if q == to {
					break
				}
			}
		}
		c.next[id] = to + 1
	}
	return nil
}

// TestWriteReceiverFuzzCorpus regenerates testdata/fuzz/FuzzReceiverCore/seed-* from the
// conformance vectors when HERALD_WRITE_CORPUS=1.
func TestWriteReceiverFuzzCorpus(t *testing.T) {
	if os.Getenv("HERALD_WRITE_CORPUS") != "1" {
		t.Skip("set HERALD_WRITE_CORPUS=1 to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReceiverCore")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(conformanceDir, "*.jsonl"))
	for i, f := range files {
		b, _ := os.ReadFile(f)
		lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
		var cfg confConfig
		json.Unmarshal(lines[0], &cfg)
		in := []byte{0}
		if cfg.Mode == "skip" {
			in[0] |= 1
		}
		if cfg.Seal {
			in[0] |= 4
		}
		if cfg.LateJoin > 0 {
			in[0] |= 8
		}
		last := int64(0)
		for _, l := range lines[1 : len(lines)-1] {
			var d confInput
			json.Unmarshal(l, &d)
			dg, _ := hex.DecodeString(d.Hex)
			var src byte
			if d.From != "198.18.0.1:7400" {
				src = 1
			}
			in = append(in, byte(min((d.T-last)/250, 255)), src)
			in = binary.LittleEndian.AppendUint16(in, uint16(len(dg)))
			in = append(in, dg...)
			last = d.T
		}
		s := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(in)))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
