package auth

import (
	"strings"
	"testing"
)

// FuzzDecodeUsers: no users file may panic the decoder; whatever decodes
// encodes to text that decodes to the same file, and compiles to a policy.
func FuzzDecodeUsers(f *testing.F) {
	f.Add("[users.alice]\npassword = \"$argon2id$v=19$m=19456,t=2,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"\ngroups = [\"ops\"]\nread = [\"/queue/a.>\"]\n[groups.ops]\nwrite = [\"/topic/*.x\"]\n")
	f.Add("[users.\"b\\\"ob\"]\ncreate = ['/queue/x']\n")
	f.Add("[groups.g]\nread = []\n[users.u]\ngroups = ['g']\n")
	f.Add("users = {a = {read = [\"/topic/>\"]}}\n")
	f.Fuzz(func(t *testing.T, src string) {
		file, err := DecodeUsers([]byte(src))
		if err != nil {
			return
		}
		out := file.Encode()
		again, err := DecodeUsers(out)
		if err != nil {
			t.Fatalf("encoded file does not decode: %v\n%s", err, out)
		}
		if string(again.Encode()) != string(out) {
			t.Fatalf("encode not stable:\n%s\n---\n%s", out, again.Encode())
		}
		if _, err := NewPolicy(Options{Users: file}); err != nil {
			t.Fatalf("a decoded file does not compile: %v", err)
		}
	})
}

// FuzzParsePattern: no pattern or destination name may panic the ACL
// decoder or matcher; a pattern without wildcards covers exactly its own
// name, and a pattern covers every name it covers when read as a
// subscription pattern of itself.
func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"/queue/orders.>", "/topic/*.cpu", "/topic/>", "/queue/a.b.c", "/topic/a..b", "/queue/#tmp.1.x"} {
		f.Add(s, "a.b")
	}
	f.Fuzz(func(t *testing.T, pat, name string) {
		p, err := ParsePattern(pat)
		p.Covers(KindTopic, name)
		p.Covers(KindQueue, name)
		if err != nil {
			return
		}
		if p.String() != pat {
			t.Fatalf("String %q, want %q", p.String(), pat)
		}
		self := pat[len(p.kind):]
		if !p.Covers(p.kind, self) {
			t.Fatalf("%q does not cover its own name %q", pat, self)
		}
		if !strings.ContainsAny(self, "*>") && name != self && p.Covers(p.kind, name) {
			t.Fatalf("literal %q covers another name %q", pat, name)
		}
	})
}
