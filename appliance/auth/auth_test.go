package auth

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
)

func TestPattern_Covers(t *testing.T) {
	for _, tc := range []struct {
		pat, kind, name string
		want            bool
	}{
		{"/queue/orders", KindQueue, "orders", true},
		{"/queue/orders", KindTopic, "orders", false},
		{"/queue/orders", KindQueue, "orders.eu", false},
		{"/queue/orders.>", KindQueue, "orders.eu", true},
		{"/queue/orders.>", KindQueue, "orders.eu.de", true},
		{"/queue/orders.>", KindQueue, "orders", false},
		{"/queue/orders.*", KindQueue, "orders.eu", true},
		{"/queue/orders.*", KindQueue, "orders.eu.de", false},
		{"/queue/>", KindQueue, "DLQ.orders", true},
		{"/queue/>", KindQueue, "#tmp.3.reply", true},
		{"/topic/metrics.>", KindTopic, "metrics.*", true},
		{"/topic/metrics.>", KindTopic, "metrics.>", true},
		{"/topic/metrics.>", KindTopic, ">", false},
		{"/topic/metrics.*", KindTopic, "metrics.*", true},
		{"/topic/metrics.*", KindTopic, "metrics.>", false},
		{"/topic/metrics.cpu", KindTopic, "metrics.*", false},
		{"/topic/*.cpu", KindTopic, "host1.cpu", true},
		{"/topic/*.cpu", KindTopic, "*.cpu", true},
		{"/topic/*.cpu", KindTopic, "host1.mem", false},
		{"/topic/>", KindTopic, ">", true},
		{"/topic/>", KindTopic, "a", true},
		{"/topic/a", KindTopic, "a.", false},
		{"/topic/a.>", KindTopic, "a.", false},
	} {
		p, err := ParsePattern(tc.pat)
		if err != nil {
			t.Fatalf("%s: %v", tc.pat, err)
		}
		if got := p.Covers(tc.kind, tc.name); got != tc.want {
			t.Errorf("%s covers %s%s: got %v, want %v", tc.pat, tc.kind, tc.name, got, tc.want)
		}
	}
}

func TestPattern_Errors(t *testing.T) {
	for _, s := range []string{"", "orders", "/queue/", "/queue/a..b", "/queue/a>", "/queue/>.a", "/topic/a*", "/queue/a\x00", "/temp-queue/x", "/queue/" + strings.Repeat("a", 256)} {
		if _, err := ParsePattern(s); !errors.Is(err, ErrPattern) {
			t.Errorf("ParsePattern(%q): got %v, want ErrPattern", s, err)
		}
	}
}

func TestHash_RoundTrip(t *testing.T) {
	h, err := HashPassword("s3cret", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q: want argon2id with the default parameters", h)
	}
	for pw, want := range map[string]bool{"s3cret": true, "s3cret ": false, "": false, "S3cret": false} {
		ok, err := VerifyPassword(h, pw)
		if err != nil || ok != want {
			t.Errorf("verify %q: got %v %v, want %v", pw, ok, err, want)
		}
	}
	h2, _ := HashPassword("s3cret", rand.Reader)
	if h2 == h {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
}

func TestHash_Bounds(t *testing.T) {
	salt, key := "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	for _, s := range []string{
		"$argon2i$v=19$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=16$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=1048576,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=100,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=0$" + salt + "$" + key,
		"$argon2id$v=19$t=2,m=19456,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$AA$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$AA==",
		"$2b$10$abcdefghijklmnopqrstuv",
		"plain",
	} {
		if _, err := ParseHash(s); !errors.Is(err, ErrHash) {
			t.Errorf("ParseHash(%q): got %v, want ErrHash", s, err)
		}
	}
	if _, err := ParseHash("$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + key); err != nil {
		t.Fatalf("valid hash refused: %v", err)
	}
}

// testHash is a cheap valid hash for tests that do not measure cost.
func testHash(t testing.TB, pw string) string {
	t.Helper()
	h, err := HashPassword(pw, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestDecodeUsers_RoundTrip(t *testing.T) {
	h := testHash(t, "pw")
	src := `
[users.alice]
password = "` + h + `"
groups = ["ops"]
read = ["/queue/orders.>"]
write = ["/queue/orders.>", "/topic/events.*"]

[users."bob smith"]
create = ["/queue/bob.>"]

[groups.ops]
read = ["/topic/metrics.>"]
`
	f, err := DecodeUsers([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Users) != 2 || f.Users["alice"].Password != h || f.Users["bob smith"].Create[0] != "/queue/bob.>" || f.Groups["ops"].Read[0] != "/topic/metrics.>" {
		t.Fatalf("decoded %+v", f)
	}
	out := f.Encode()
	g, err := DecodeUsers(out)
	if err != nil {
		t.Fatalf("re-decode: %v\n%s", err, out)
	}
	if string(g.Encode()) != string(out) {
		t.Fatalf("encode is not stable:\n%s\n---\n%s", out, g.Encode())
	}
}

func TestDecodeUsers_Errors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"unknown key", "[users.a]\npasswd = \"x\"\n", `unknown keys "users.a.passwd"`},
		{"bad hash", "[users.a]\npassword = \"hunter2\"\n", "users.a.password: invalid password hash"},
		{"bad pattern", "[users.a]\nread = [\"orders\"]\n", "users.a.read: invalid destination pattern"},
		{"undefined group", "[users.a]\ngroups = [\"opz\"]\n", `group "opz" is not defined`},
		{"group pattern", "[groups.g]\nwrite = [\"/queue/a>\"]\n", "groups.g.write"},
		{"syntax", "[users.a\n", "to end table name"},
		{"nesting", "[users.a]\nread = [[[[[[[[[[\"x\"]]]]]]]]]]\n", "nested more than 8 deep"},
		{"empty name", "[users.\"\"]\n", "must be 1 to 128 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeUsers([]byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := DecodeUsers(make([]byte, MaxUsersFileBytes+1)); err == nil {
		t.Fatal("an oversized file was accepted")
	}
}

func TestFile_Edits(t *testing.T) {
	f, _ := DecodeUsers(nil)
	if err := f.AddUser("alice", "", []string{"ops"}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddUser("alice", "", nil); !errors.Is(err, ErrUserExists) {
		t.Fatalf("second add: %v", err)
	}
	if err := f.Grant("alice", false, Read, "/queue/a.>"); err != nil {
		t.Fatal(err)
	}
	f.Grant("alice", false, Read, "/queue/a.>")
	if err := f.Grant("ops", true, Write, "/topic/x"); err != nil {
		t.Fatal(err)
	}
	if err := f.Grant("alice", false, Read, "a.>"); !errors.Is(err, ErrPattern) {
		t.Fatalf("bad pattern granted: %v", err)
	}
	if err := f.Grant("nobody", false, Read, "/queue/a"); !errors.Is(err, ErrNoUser) {
		t.Fatalf("grant to a missing user: %v", err)
	}
	if got := f.Users["alice"].Read; len(got) != 1 {
		t.Fatalf("read grants %v: a second grant of one pattern must not repeat it", got)
	}
	if ok, _ := f.Revoke("alice", false, Read, "/queue/a.>"); !ok || len(f.Users["alice"].Read) != 0 {
		t.Fatalf("revoke: %v %v", ok, f.Users["alice"].Read)
	}
	if ok, _ := f.Revoke("alice", false, Read, "/queue/a.>"); ok {
		t.Fatal("revoking what is not granted reported true")
	}
	if err := f.SetPassword("alice", testHash(t, "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeUsers(f.Encode()); err != nil {
		t.Fatalf("edited file does not decode: %v\n%s", err, f.Encode())
	}
	if err := f.DelUser("alice"); err != nil || len(f.Users) != 0 {
		t.Fatalf("del: %v", err)
	}
	if err := f.DelUser("alice"); !errors.Is(err, ErrNoUser) {
		t.Fatalf("second del: %v", err)
	}
}

func testPolicy(t testing.TB, o Options) *Policy {
	t.Helper()
	p, err := NewPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicy_Authenticate(t *testing.T) {
	f, _ := DecodeUsers(nil)
	f.AddUser("alice", testHash(t, "right"), []string{"ops"})
	f.AddUser("svc", "", nil) // certificate only
	f.Grant("ops", true, Read, "/topic/metrics.>")
	f.Grant("alice", false, Write, "/queue/orders")
	p := testPolicy(t, Options{Users: f, Anonymous: Grants{Read: []string{"/topic/public.>"}}})

	ok := func(login, pass string, certs []string, wantUser string, anon bool) {
		t.Helper()
		id, err := p.Authenticate(login, pass, certs, false)
		if err != nil || id.User != wantUser || id.Anonymous != anon {
			t.Errorf("login %q certs %v: got %+v %v, want user %q anonymous %v", login, certs, id, err, wantUser, anon)
		}
	}
	fail := func(login, pass string, certs []string) {
		t.Helper()
		if id, err := p.Authenticate(login, pass, certs, true); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("login %q pass %q certs %v: got %+v %v, want ErrAuthFailed", login, pass, certs, id, err)
		}
	}
	ok("alice", "right", nil, "alice", false)
	fail("alice", "wrong", nil)
	fail("alice", "", nil)
	fail("mallory", "right", nil)
	fail("svc", "", nil) // no password: certificate only
	ok("", "", []string{"svc.example", "svc"}, "svc", false)
	ok("svc", "", []string{"svc"}, "svc", false)
	fail("alice", "wrong", []string{"svc"}) // a login other than the certificate's is checked
	fail("", "", nil)                       // anonymous not allowed
	fail("", "", []string{"stranger"})      // a certificate of no user

	// An unknown user costs one argon2id computation, as a known one does.
	before := p.hashChecks.Load()
	p.Authenticate("mallory", "x", nil, false)
	p.Authenticate("alice", "x", nil, false)
	if got := p.hashChecks.Load() - before; got != 2 {
		t.Fatalf("argon2id checks for an unknown and a known user: %d, want 2", got)
	}

	alice := Identity{User: "alice"}
	if !p.Allowed(alice, Read, KindTopic, "metrics.cpu") || !p.Allowed(alice, Write, KindQueue, "orders") {
		t.Error("alice lacks a grant of hers or of her group")
	}
	if p.Allowed(alice, Read, KindQueue, "orders") || p.Allowed(alice, Create, KindQueue, "orders") || p.Allowed(alice, Write, KindTopic, "metrics.cpu") {
		t.Error("alice has a permission nobody granted")
	}
	if p.Allowed(Identity{User: "svc"}, Read, KindTopic, "metrics.cpu") {
		t.Error("svc has ops's grant without being in ops")
	}
	if p.Allowed(Identity{Anonymous: true}, Read, KindTopic, "public.x") {
		t.Error("anonymous grants apply while auth.allow_anonymous is false")
	}

	pa := testPolicy(t, Options{Users: f, AllowAnonymous: true, Anonymous: Grants{Read: []string{"/topic/public.>"}}})
	id, err := pa.Authenticate("", "", nil, false)
	if err != nil || !id.Anonymous {
		t.Fatalf("anonymous with allow_anonymous: %+v %v", id, err)
	}
	if !pa.Allowed(id, Read, KindTopic, "public.x") || pa.Allowed(id, Read, KindTopic, "metrics.cpu") || pa.Allowed(id, Write, KindTopic, "public.x") {
		t.Error("anonymous role grants wrong")
	}
	if !pa.Valid(alice) || pa.Valid(Identity{User: "gone"}) || !pa.Valid(id) || p.Valid(id) {
		t.Error("Valid wrong")
	}
}

func TestPolicy_Open(t *testing.T) {
	p := testPolicy(t, Options{})
	id, err := p.Authenticate("whoever", "anything", nil, true)
	if err != nil || !p.Allowed(id, Create, KindQueue, "x") || id.User != "whoever" {
		t.Fatalf("loopback without users file: %+v %v", id, err)
	}
	if _, err := p.Authenticate("", "", nil, false); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("non-loopback without users file and allow_anonymous: %v", err)
	}
	pa := testPolicy(t, Options{AllowAnonymous: true})
	if _, err := pa.Authenticate("", "", nil, false); err != nil {
		t.Fatalf("non-loopback with allow_anonymous: %v", err)
	}
}

func TestPolicy_External(t *testing.T) {
	f, _ := DecodeUsers(nil)
	f.AddUser("local", testHash(t, "pw"), nil)
	f.AddUser("ldapuser", "", nil) // in the file for its grants, password elsewhere
	f.Grant("ldapuser", false, Write, "/queue/own")
	f.Grant("ops", true, Read, "/topic/ops.>")
	p := testPolicy(t, Options{Users: f, External: true})
	if _, err := p.Authenticate("local", "pw", nil, false); err != nil {
		t.Fatalf("a file user with a password is checked by the file: %v", err)
	}
	if _, err := p.Authenticate("local", "nope", nil, false); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("a wrong file password went to the command: %v", err)
	}
	for _, login := range []string{"stranger", "ldapuser"} {
		id, err := p.Authenticate(login, "x", nil, false)
		if !errors.Is(err, ErrExternal) || id.User != login {
			t.Fatalf("%s: %+v %v, want ErrExternal", login, id, err)
		}
	}
	id, unknown := p.External("ldapuser", []string{"ops", "nope"})
	if len(id.Groups) != 1 || id.Groups[0] != "ops" || len(unknown) != 1 || unknown[0] != "nope" {
		t.Fatalf("External: %+v, unknown %v", id, unknown)
	}
	if !p.Allowed(id, Read, KindTopic, "ops.x") || !p.Allowed(id, Write, KindQueue, "own") || p.Allowed(id, Write, KindQueue, "other") {
		t.Fatal("grants of an externally checked user wrong")
	}
	if !p.Valid(id) || testPolicy(t, Options{Users: f}).Valid(id) {
		t.Fatal("an externally checked identity must stay valid while the command is configured only")
	}
}
