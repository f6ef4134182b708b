package appliance

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseOrigin: no Origin header or allowed_origins entry may panic
// parseOrigin; what it accepts is normalised (parsing it again gives the
// same), lower case, http or https, with no path.
func FuzzParseOrigin(f *testing.F) {
	for _, s := range []string{"https://dash.example:8443", "http://127.0.0.1:15674", "HTTPS://A.example:443/", "http://[::1]:80", "null", "", "file://", "http://u:p@h", "http://h/p?q"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := parseOrigin(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			t.Fatalf("%q -> %q: not http or https", s, o)
		}
		again, err := parseOrigin(o)
		if err != nil || again != o {
			t.Fatalf("%q -> %q -> %q, %v: not stable", s, o, again, err)
		}
		if strings.Contains(strings.SplitN(o, "://", 2)[1], "/") {
			t.Fatalf("%q -> %q: a path", s, o)
		}
	})
}

// FuzzParseTopicID: no history-after header or Last-Event-ID may panic
// parseTopicID; what it accepts is t and a positive sequence that formats
// back to the same text, leading zeros aside.
func FuzzParseTopicID(f *testing.F) {
	for _, s := range []string{"t1", "t0", "t", "1", "t-1", "t+5", "t0042", "t18446744073709551615", "T1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseTopicID(s)
		if !ok {
			return
		}
		if n == 0 || !strings.HasPrefix(s, "t") || strings.TrimLeft(s[1:], "0") != strconv.FormatUint(n, 10) {
			t.Fatalf("%q -> %d accepted", s, n)
		}
	})
}
