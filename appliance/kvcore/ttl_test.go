package kvcore

import (
	"strconv"
	"testing"
)

func TestParseTTL(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64 // 0: refused
	}{
		{"30", 30_000}, {"1500ms", 1500}, {"2s", 2000}, {"5m", 300_000}, {"1h", 3_600_000},
		{"0", 0}, {"", 0}, {"-1", 0}, {"1.5", 0}, {"1d", 0}, {"ms", 0}, {" 3", 0}, {"3 s", 0},
		{"87600h", MaxTTL}, {"87601h", 0}, {"999999999999999999", 0}, {"+3", 0},
	} {
		got, err := ParseTTL(c.in)
		if got != c.want || (err == nil) != (c.want != 0) {
			t.Errorf("ParseTTL(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

// FuzzParseTTL: every value is refused with an error, or gives a TTL in
// (0, MaxTTL] that the same number of milliseconds spells back.
//
//	go test -run '^$' -fuzz '^FuzzParseTTL$' ./appliance/kvcore
func FuzzParseTTL(f *testing.F) {
	for _, s := range []string{"30", "1500ms", "5m", "1h", "0", "87600h", "1e3", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ms, err := ParseTTL(v)
		if err != nil {
			if ms != 0 {
				t.Fatalf("error with a result %d", ms)
			}
			return
		}
		if ms <= 0 || ms > MaxTTL {
			t.Fatalf("ParseTTL(%q) = %d out of range", v, ms)
		}
		if back, err := ParseTTL(strconv.FormatInt(ms, 10) + "ms"); err != nil || back != ms {
			t.Fatalf("%d ms does not parse back: %d %v", ms, back, err)
		}
	})
}
