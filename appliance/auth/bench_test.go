package auth

import (
	"crypto/rand"
	"testing"
)

// BenchmarkAuthenticate: the cost of one password check (argon2id with the
// default parameters), for a right password, a wrong one and an unknown
// user: the three must cost the same (no user enumeration by timing).
func BenchmarkAuthenticate(b *testing.B) {
	f, _ := DecodeUsers(nil)
	h, err := HashPassword("right", rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	f.AddUser("alice", h, nil)
	p, err := NewPolicy(Options{Users: f})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, login, pass string }{
		{"right", "alice", "right"},
		{"wrong", "alice", "wrong"},
		{"unknown-user", "mallory", "right"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				p.Authenticate(c.login, c.pass, nil, false)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
		})
	}
}
