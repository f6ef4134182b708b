package appliance

import (
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
