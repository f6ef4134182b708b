package appliance_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// hashes caches password hashes across tests (argon2id costs ~50 ms each).
var hashes sync.Map

func hashOf(t testing.TB, pw string) string {
	if h, ok := hashes.Load(pw); ok {
		return h.(string)
	}
	h, err := auth.HashPassword(pw, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hashes.Store(pw, h)
	return h
}

// withHashes returns users file src with each "{pw:X}" replaced by the
// hash of X.
func withHashes(t testing.TB, src string) string {
	for {
		i := strings.Index(src, "{pw:")
		if i < 0 {
			return src
		}
		j := strings.Index(src[i:], "}")
		src = src[:i] + hashOf(t, src[i+4:i+j]) + src[i+j+1:]
	}
}

// authBroker starts a broker with users file src (TOML; "{pw:X}" is
// replaced by the hash of X) and the [auth] settings mutate sets.
func authBroker(t *testing.T, src string, mutate func(*appliance.Config)) *testBroker {
	t.Helper()
	src = withHashes(t, src)
	f, err := auth.DecodeUsers([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	tb := mustStartBroker(t, mutate)
	p, err := auth.NewPolicy(auth.Options{Users: f, AllowAnonymous: tb.Cfg.Auth.AllowAnonymous, Anonymous: tb.Cfg.Auth.Anonymous, External: len(tb.Cfg.Auth.Command) > 0})
	if err != nil {
		t.Fatal(err)
	}
	tb.B.SetAuth(p)
	tb.B.SetLoginThrottle(time.Millisecond, 2*time.Millisecond)
	return tb
}

func dialAs(addr, login, pass string) (*client.Conn, error) {
	return client.Dial(context.Background(), addr, client.Options{Login: login, Passcode: pass, DialTimeout: 5 * time.Second, AcceptVersion: "1.2"})
}

func TestAuth_Login(t *testing.T) {
	tb := authBroker(t, "[users.alice]\npassword = \"{pw:right}\"\n", nil)
	c, err := dialAs(tb.Addr, "alice", "right")
	if err != nil {
		t.Fatalf("right password refused: %v", err)
	}
	c.Close()
	var frames []string
	for _, lp := range [][2]string{{"alice", "wrong"}, {"mallory", "right"}, {"alice", ""}, {"", ""}} {
		c, err := dialAs(tb.Addr, lp[0], lp[1])
		var se *client.ServerError
		if !errors.As(err, &se) {
			if c != nil {
				c.Close()
			}
			t.Fatalf("login %q passcode %q: got %v, want an ERROR", lp[0], lp[1], err)
		}
		if se.Frame.Get("message") != "authentication failed" || len(se.Frame.Body) != 0 {
			t.Fatalf("login %q: ERROR %v %q: want message:authentication failed and nothing else", lp[0], se.Frame.Headers, se.Frame.Body)
		}
		frames = append(frames, fmt.Sprint(se.Frame.Headers)+string(se.Frame.Body))
	}
	for _, f := range frames[1:] {
		if f != frames[0] {
			t.Fatalf("ERROR frames differ between a wrong password and an unknown user:\n%s\n%s", frames[0], f)
		}
	}
	if n := tb.B.AuthStats().Failures; n != 4 {
		t.Fatalf("auth failures counted %d, want 4", n)
	}
}

// A raw connection sees the ERROR and then the end of the connection.
func TestAuth_FailureClosesConnection(t *testing.T) {
	tb := authBroker(t, "[users.alice]\npassword = \"{pw:right}\"\n", nil)
	r := dialRaw(t, tb)
	r.write("CONNECT\naccept-version:1.2\nlogin:alice\npasscode:wrong\n\n\x00")
	f := r.frame()
	if f.Command != "ERROR" || f.Get("message") != "authentication failed" {
		t.Fatalf("got %s %v", f.Command, f.Headers)
	}
	r.closed()
}

// Failed logins from one address wait longer each time, up to a cap.
func TestAuth_FailedLoginsSlowDown(t *testing.T) {
	tb := authBroker(t, "[users.alice]\npassword = \"{pw:right}\"\n", nil)
	tb.B.SetLoginThrottle(40*time.Millisecond, 160*time.Millisecond)
	want := []time.Duration{40, 80, 160, 160}
	for i, w := range want {
		start := time.Now()
		if c, err := dialAs(tb.Addr, "alice", "wrong"); err == nil {
			c.Close()
			t.Fatal("wrong password accepted")
		}
		// Lower bounds only: the ERROR never comes before the delay.
		if took := time.Since(start); took < w*time.Millisecond {
			t.Fatalf("failure %d answered after %s, want at least %dms", i+1, took, w)
		}
	}
}

func TestConfig_CheckExposure(t *testing.T) {
	for _, tc := range []struct {
		listen, tls string
		users       string
		anon        bool
		ok          bool
	}{
		{"127.0.0.1:61613", "", "", false, true},
		{"[::1]:61613", "", "", false, true},
		{"localhost:61613", "", "", false, true},
		{"0.0.0.0:61613", "", "", false, false},
		{":61613", "", "", false, false},
		{"192.0.2.1:61613", "", "", false, false},
		{"127.0.0.1:61613", "0.0.0.0:61614", "", false, false},
		{"0.0.0.0:61613", "", "/etc/herald/users.toml", false, true},
		{"0.0.0.0:61613", "", "", true, true},
	} {
		cfg := appliance.DefaultConfig()
		cfg.Stomp.Listen, cfg.Stomp.TLSListen = tc.listen, tc.tls
		cfg.Auth.UsersFile, cfg.Auth.AllowAnonymous = tc.users, tc.anon
		err := cfg.CheckExposure()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: got %v, want ok=%v", tc, err, tc.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "auth.users_file") || !strings.Contains(err.Error(), "auth.allow_anonymous = true")) {
			t.Errorf("error does not say how to fix it: %v", err)
		}
	}
}

// nonLoopbackIP is an address of this host other hosts could reach, or "".
func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	return ""
}

// Without a users file only loopback clients are accepted, unless
// auth.allow_anonymous: a client connecting to this host's LAN address is a
// non-loopback peer.
func TestAuth_LoopbackOnlyWithoutUsers(t *testing.T) {
	ip := nonLoopbackIP()
	if ip == "" {
		t.Skip("needs a non-loopback IPv4 address on this host (any network interface)")
	}
	for _, anon := range []bool{false, true} {
		tb := mustStartBroker(t, func(c *appliance.Config) {
			c.Stomp.Listen = net.JoinHostPort(ip, "0")
			c.Auth.AllowAnonymous = anon
		})
		c, err := dialAs(tb.Addr, "", "")
		if anon {
			if err != nil {
				t.Fatalf("allow_anonymous: %v", err)
			}
			c.Close()
			continue
		}
		var se *client.ServerError
		if !errors.As(err, &se) || se.Frame.Get("message") != "authentication failed" {
			t.Fatalf("a non-loopback client without users: got %v, want authentication failed", err)
		}
	}
	// Loopback is accepted with full access.
	tb := mustStartBroker(t, nil)
	c := tb.Dial(t)
	if _, err := c.SendReceipt(ctxT(t), "/queue/anything", []byte("x")); err != nil {
		t.Fatal(err)
	}
}

func TestConfig_ValidateAuth(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*appliance.Config)
		want   string
	}{
		{func(c *appliance.Config) { c.Stomp.TLSListen = "127.0.0.1:61614" }, "set stomp.tls_cert and stomp.tls_key"},
		{func(c *appliance.Config) { c.Stomp.TLSCert = "/x.crt" }, "need stomp.tls_listen"},
		{func(c *appliance.Config) { c.Auth.Anonymous.Read = []string{"metrics"} }, "auth.anonymous.read"},
		{func(c *appliance.Config) { c.Auth.Command = []string{"auth.sh"} }, "absolute path"},
		{func(c *appliance.Config) { c.Auth.CommandTimeout.Duration = 0 }, "auth.command_timeout"},
		{func(c *appliance.Config) { c.Auth.CommandCache.Duration = 2 * time.Hour }, "auth.command_cache"},
	} {
		cfg := appliance.DefaultConfig()
		tc.mutate(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
	cfg := appliance.DefaultConfig()
	cfg.Auth.Command = []string{"/usr/local/lib/herald/auth.sh"}
	if _, _, err := appliance.LoadAuth(cfg); err == nil || !strings.Contains(err.Error(), "auth.command needs auth.users_file") {
		t.Errorf("auth.command without a users file: %v", err)
	}
}

// auth.max_connections_per_user bounds one user's connections; a closed
// one frees its place.
func TestAuth_MaxConnectionsPerUser(t *testing.T) {
	tb := authBroker(t, "[users.alice]\npassword = \"{pw:right}\"\n[users.bob]\npassword = \"{pw:b}\"\n", func(c *appliance.Config) {
		c.Auth.MaxConnectionsPerUser = 2
	})
	a1, err := dialAs(tb.Addr, "alice", "right")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := dialAs(tb.Addr, "alice", "right")
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	_, err = dialAs(tb.Addr, "alice", "right")
	var se *client.ServerError
	if !errors.As(err, &se) || se.Frame.Get("message") != "too many connections" || !strings.Contains(string(se.Frame.Body), "auth.max_connections_per_user") {
		t.Fatalf("third connection of alice: %v", err)
	}
	b, err := dialAs(tb.Addr, "bob", "b")
	if err != nil {
		t.Fatalf("another user is not limited by alice's count: %v", err)
	}
	b.Close()
	a1.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := dialAs(tb.Addr, "alice", "right")
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed connection did not free its place: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
