package streamcore

import (
	"strconv"
	"testing"
)

func FuzzParseStart(f *testing.F) {
	for _, s := range []string{"", "first", "last", "next", "offset=0", "42", "timestamp=1700000000", "offset=-1", "timestamp=x", "offset=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		st, ts, isTS, err := ParseStart(v)
		if err != nil {
			return
		}
		if isTS {
			if ts < 0 {
				t.Fatalf("%q: negative timestamp %d", v, ts)
			}
			return
		}
		if st.Kind == StartOffset {
			again, _, _, err := ParseStart("offset=" + strconv.FormatUint(st.Offset, 10))
			if err != nil || again != st {
				t.Fatalf("%q: offset %d does not round-trip: %v %v", v, st.Offset, again, err)
			}
		}
	})
}

func FuzzParseAckToken(f *testing.F) {
	for _, s := range []string{"S1.0", "S18446744073709551615.5", "S.", "1.2", "S1", "S-1.2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		id, off, ok := ParseAckToken(tok)
		if !ok {
			return
		}
		id2, off2, ok2 := ParseAckToken(AckToken(id, off))
		if !ok2 || id2 != id || off2 != off {
			t.Fatalf("%q: (%d, %d) does not round-trip", tok, id, off)
		}
	})
}

// FuzzSim runs the seeded simulation (sim_test.go) with fuzzed seeds and
// lengths.
func FuzzSim(f *testing.F) {
	f.Add(int64(1), uint16(500))
	f.Add(int64(77), uint16(3000))
	f.Fuzz(func(t *testing.T, seed int64, steps uint16) {
		w := newWorld(t, seed)
		for i := 0; i < int(steps); i++ {
			w.step()
		}
		w.drain()
	})
}
