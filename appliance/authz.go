package appliance

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/appliance/stomp"
)

// Authentication and authorization: the shell around appliance/auth. The
// broker holds the current *auth.Policy (swapped whole by SetAuth); a
// session authenticates at CONNECT and asks the policy before each SEND and
// SUBSCRIBE.

// validateAuth checks [auth] and the TLS keys of [stomp].
func (c *Config) validateAuth() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := c.Auth.Anonymous.Check("auth.anonymous"); err != nil {
		errs = append(errs, err)
	}
	if a := c.Auth; len(a.Command) > 0 {
		if !filepath.IsAbs(a.Command[0]) {
			bad("auth.command: %q: give the program's absolute path", a.Command[0])
		}
	}
	if n := c.Auth.MaxConnectionsPerUser; n <= 0 {
		bad("auth.max_connections_per_user: must be positive, got %d", n)
	}
	if d := c.Auth.CommandTimeout.Duration; d < time.Millisecond || d > time.Minute {
		bad("auth.command_timeout: %s: want 1ms to 1m", c.Auth.CommandTimeout)
	}
	if d := c.Auth.CommandCache.Duration; d < 0 || d > time.Hour {
		bad("auth.command_cache: %s: want 0s (no cache) to 1h", c.Auth.CommandCache)
	}
	s := &c.Stomp
	if s.TLSListen != "" && (s.TLSCert == "" || s.TLSKey == "") {
		bad("stomp.tls_listen is set: set stomp.tls_cert and stomp.tls_key too (PEM files)")
	}
	if s.TLSListen == "" && !c.Web.TLS && (s.TLSCert != "" || s.TLSKey != "" || s.TLSClientCA != "") {
		bad("stomp.tls_cert, tls_key and tls_client_ca need stomp.tls_listen (example: \"0.0.0.0:61614\") or web.tls = true")
	}
	return errs
}

// loopbackAddr reports whether a listen address accepts loopback clients
// only: a loopback IP literal or "localhost". An empty host (all
// interfaces) or any other name is not.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// badIPv4 reports an address whose host is written as an IPv4 address but
// is not one ("999.1.1.1"): it cannot be bound, which the listen check
// reports, and it exposes nothing.
func badIPv4(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.Trim(host, "0123456789.") != "" {
		return false
	}
	_, err = netip.ParseAddr(host)
	return err != nil
}

// CheckExposure refuses to run a listener other hosts can reach without
// users (auth.users_file) or an explicit auth.allow_anonymous = true: an
// appliance on the LAN must not be open to everyone by accident.
func (c *Config) CheckExposure() error {
	if c.Auth.UsersFile != "" || c.Auth.AllowAnonymous {
		return nil
	}
	for _, l := range []struct{ key, addr string }{{"stomp.listen", c.Stomp.Listen}, {"stomp.tls_listen", c.Stomp.TLSListen}, {"web.listen", c.Web.Listen}} {
		if l.addr != "" && !loopbackAddr(l.addr) && !badIPv4(l.addr) {
			return fmt.Errorf("%s = %q accepts other hosts, but no users are configured, so anyone who can reach it could read and write every queue; "+
				"set auth.users_file (or --users-file; create it with: herald user add --file /etc/herald/users.toml NAME), "+
				"or, on a network you trust, auth.allow_anonymous = true; or listen on 127.0.0.1", l.key, l.addr)
		}
	}
	return nil
}

// LoadAuth reads cfg's users file (if any) and returns the policy to run
// with, and warnings for the log (a users file readable by others).
func LoadAuth(cfg Config) (*auth.Policy, []string, error) {
	o := auth.Options{AllowAnonymous: cfg.Auth.AllowAnonymous, Anonymous: cfg.Auth.Anonymous, External: len(cfg.Auth.Command) > 0}
	var warns []string
	if len(cfg.Auth.Command) > 0 && cfg.Auth.UsersFile == "" {
		return nil, nil, errors.New("auth.command needs auth.users_file: the groups and permissions of the users it allows are defined there")
	}
	if path := cfg.Auth.UsersFile; path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("users file (auth.users_file): %w; create it with: herald user add --file %s NAME", err, path)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().Perm()&0o004 != 0 {
			warns = append(warns, fmt.Sprintf("users file %s is readable by every user (mode %04o): its password hashes can be attacked offline; chmod 0640 and chown root:herald", path, fi.Mode().Perm()))
		}
		src, err := io.ReadAll(io.LimitReader(f, auth.MaxUsersFileBytes+1))
		if err != nil {
			return nil, nil, fmt.Errorf("users file %s: %w", path, err)
		}
		if o.Users, err = auth.DecodeUsers(src); err != nil {
			return nil, nil, fmt.Errorf("users file %s: %w", path, err)
		}
	}
	p, err := auth.NewPolicy(o)
	if err != nil {
		return nil, nil, err
	}
	return p, warns, nil
}

// maxHashChecks bounds the argon2id checks running at once (each holds
// auth.HashMemoryKiB of memory for its duration); other CONNECTs wait.
const maxHashChecks = 4

// maxCommandRuns bounds the auth.command processes running at once, apart
// from the hash checks (a slow command must not hold their slots).
const maxCommandRuns = 8

// loginFailFloor is authState.failFloor's default: above an argon2id check
// with the default parameters (about 50 ms) or much heavier ones, and a
// directory's usual answer.
const loginFailFloor = time.Second

// authState is the broker's part: the policy in force, the failed-login
// throttle and the counters.
type authState struct {
	policy atomic.Pointer[auth.Policy]
	sem    chan struct{}
	cmdSem chan struct{} // maxCommandRuns

	mu       sync.Mutex
	throttle *auth.Throttle
	// failFloor: a refused login is answered no sooner than this after its
	// check began (then the throttle's delay), so that how long the check
	// took (an unknown user's dummy hash, a user's own hash parameters,
	// auth.command) does not tell which logins exist.
	failFloor time.Duration
	denied    map[string]uint64 // by user
	failures  uint64
	perUser   map[string]int // open authenticated connections by user (auth.max_connections_per_user)

	cmd authCommand // auth.command (authcmd.go)

	tls atomic.Pointer[tls.Config] // of the TLS listeners' handshakes (SetTLS)
}

// SetTLS puts tc (certificate, key, client CA: see TLSConfig) in force for
// the TLS handshakes that follow; open connections keep theirs.
func (b *Broker) SetTLS(tc *tls.Config) { b.authz.tls.Store(tc) }

func (a *authState) init(cfg Config) {
	p, err := auth.NewPolicy(auth.Options{AllowAnonymous: cfg.Auth.AllowAnonymous, Anonymous: cfg.Auth.Anonymous})
	if err != nil {
		// Validate refuses such a config; without one, allow loopback only.
		p, _ = auth.NewPolicy(auth.Options{})
	}
	a.policy.Store(p)
	a.sem = make(chan struct{}, maxHashChecks)
	a.cmdSem = make(chan struct{}, maxCommandRuns)
	a.throttle = auth.NewThrottle()
	a.failFloor = loginFailFloor
	a.denied = map[string]uint64{}
	a.perUser = map[string]int{}
	a.cmd.init(cfg.Auth)
}

// AuthStatsView holds the authentication counters.
type AuthStatsView struct {
	Failures uint64            `json:"auth_failures_total"`
	Denied   map[string]uint64 `json:"auth_denied_total"` // frames refused for a missing permission, by user
	// auth.command: runs, and runs that failed (timeout, crash, exit code
	// other than 0 or 1); positive answers served from the cache.
	CommandRuns, CommandErrors, CommandCacheHits uint64
}

// AuthStats returns the authentication counters.
func (b *Broker) AuthStats() AuthStatsView {
	b.authz.mu.Lock()
	defer b.authz.mu.Unlock()
	v := AuthStatsView{Failures: b.authz.failures, Denied: make(map[string]uint64, len(b.authz.denied)),
		CommandRuns: b.authz.cmd.runs.Load(), CommandErrors: b.authz.cmd.errors.Load(), CommandCacheHits: b.authz.cmd.hits.Load()}
	for k, n := range b.authz.denied {
		v.Denied[k] = n
	}
	return v
}

// SetAuth puts policy p in force for every later CONNECT and frame.
// Connections whose identity p no longer accepts, or holding a
// subscription p no longer allows them to read, get an ERROR naming it and
// are closed (STOMP ends a connection after an ERROR).
func (b *Broker) SetAuth(p *auth.Policy) {
	b.authz.policy.Store(p)
	b.mu.Lock()
	ss := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		ss = append(ss, s)
	}
	b.mu.Unlock()
	for _, s := range ss {
		s.recheck(p)
	}
}

// recheck holds the session's login and subscriptions against policy p (an
// auth reload's); false: the session was dropped.
func (s *session) recheck(p *auth.Policy) bool {
	id := s.ident.Load()
	if id == nil || s.isEnding() {
		return true
	}
	if p.Open() && !s.loopbackPeer() {
		// Without a users file only loopback clients are accepted;
		// the open policy would give this one every permission.
		s.log.Warn("users file dropped by an auth reload; closing a connection that is not from loopback", "user", id.Name(), "peer", s.peer)
		s.drop("authentication revoked", "Authentication was turned off (no auth.users_file): only loopback clients are accepted without it.")
		return false
	}
	if !p.Valid(*id) {
		s.log.Warn("login no longer valid after an auth reload; closing connection", "user", id.Name())
		s.drop("authentication revoked", "The user this connection logged in as is gone, or anonymous access was turned off.")
		return false
	}
	for _, sd := range s.subDests() {
		if sd.kind == auth.KindQueue && s.ownTemp(sd.name) {
			continue // its own temporary queue or their dead letters: no grant needed
		}
		perm := auth.Read
		if sd.kind == auth.KindLock {
			perm = auth.Write // a lock is held with write
		}
		if !p.Allowed(*id, perm, sd.kind, sd.name) {
			s.log.Warn(perm.String()+" permission revoked; closing connection", "user", id.Name(), "destination", sd.dest)
			s.drop("permission denied: "+perm.String()+" on "+sd.dest, fmt.Sprintf("The permission to %s %s was revoked; the subscription and the connection end.", perm, sd.dest))
			return false
		}
	}
	return true
}

// samePolicy checks the session again when the policy changed since p0 (an
// auth reload during the frame just handled); false: it was dropped.
func (s *session) samePolicy(p0 *auth.Policy) bool {
	if p := s.b.authz.policy.Load(); p != p0 {
		return s.recheck(p)
	}
	return true
}

func kindName(k destKind) string {
	if k == destTopic {
		return auth.KindTopic
	}
	if k == destStream {
		return auth.KindStream
	}
	if k == destKV {
		return auth.KindKV
	}
	if k == destLock {
		return auth.KindLock
	}
	return auth.KindQueue
}

// certNames are the identities of a verified client certificate: the
// subject's common name, then DNS, email and URI subject alternative names.
func certNames(c net.Conn) []string {
	st, ok := connTLS(c)
	if !ok {
		return nil
	}
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return nil
	}
	cert := st.PeerCertificates[0]
	var names []string
	if cert.Subject.CommonName != "" {
		names = append(names, cert.Subject.CommonName)
	}
	names = append(names, cert.DNSNames...)
	names = append(names, cert.EmailAddresses...)
	for _, u := range cert.URIs {
		names = append(names, u.String())
	}
	return names
}

// loopbackPeer reports whether the session's client is on a loopback
// address (an in-process connection, such as an SSE stream's, counts as
// its HTTP client's).
func (s *session) loopbackPeer() bool {
	ta, ok := s.conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, _ := netip.AddrFromSlice(ta.IP)
	return ip.Unmap().IsLoopback()
}

// authenticate decides a CONNECT; false: the session was failed (after the
// source's failed-login delay).
func (s *session) authenticate(f *stomp.Frame) bool {
	p := s.b.authz.policy.Load()
	loopback := s.loopbackPeer()
	var src string
	if ta, ok := s.conn.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		src = auth.Source(ip)
	}
	if !p.Open() {
		// A source with recent failures gets one decision per delay,
		// right or wrong, however many connections it tries on.
		a := &s.b.authz
		a.mu.Lock()
		wait := a.throttle.Admit(src, s.b.now().UnixMilli())
		a.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-s.b.stop:
				t.Stop()
				return false
			}
		}
		// argon2id holds memory while it runs: a bounded number at once.
		select {
		case s.b.authz.sem <- struct{}{}:
		case <-s.b.stop:
			return false
		}
	}
	checked := time.Now()
	id, err := p.Authenticate(f.Get("login"), f.Get("passcode"), certNames(s.conn), loopback)
	if !p.Open() {
		<-s.b.authz.sem
	}
	if errors.Is(err, auth.ErrExternal) {
		// Outside the hash-check slots: a slow auth.command must not
		// hold up the users file's logins.
		select {
		case s.b.authz.cmdSem <- struct{}{}:
		case <-s.b.stop:
			return false
		}
		id, err = s.b.authz.external(s.b, p, f.Get("login"), f.Get("passcode"), s.log)
		<-s.b.authz.cmdSem
	}
	a := &s.b.authz
	if err == nil {
		if p.Open() {
			s.ident.Store(&id)
			return true
		}
		limit := s.b.cfg().Auth.MaxConnectionsPerUser
		a.mu.Lock()
		over := a.perUser[id.Name()] >= limit
		if !over {
			a.perUser[id.Name()]++
			s.counted = id.Name()
		}
		a.mu.Unlock()
		if over {
			s.log.Warn("connection refused: too many connections of one user", "user", id.Name(), "max_connections_per_user", limit)
			s.fail(f, "too many connections", fmt.Sprintf("User %s already holds %d connections (auth.max_connections_per_user); close some, or raise the limit.", id.Name(), limit))
			return false
		}
		s.ident.Store(&id)
		return true
	}
	a.mu.Lock()
	a.failures++
	delay := a.throttle.Fail(src, s.b.now().UnixMilli())
	floor := a.failFloor
	a.mu.Unlock()
	if took := time.Since(checked); took < floor {
		delay += floor - took
	}
	s.log.Warn("authentication failed", "login", f.Get("login"), "reason", strings.TrimPrefix(err.Error(), auth.ErrAuthFailed.Error()+": "), "delay", delay)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.b.stop:
	}
	s.fail(f, "authentication failed", "")
	return false
}

// authorize checks a SEND or SUBSCRIBE against the policy: read to
// subscribe, write to send, and create when the queue does not exist yet.
// Temporary queues are their owner's alone, and so are their dead letters.
// Malformed destinations pass: the frame's handler reports them. False: the
// session was failed with an ERROR naming the destination and permission.
func (s *session) authorize(f *stomp.Frame) bool {
	d := f.Get("destination")
	if d == "" || strings.HasPrefix(d, prefixTempQueue) {
		return true
	}
	subscribing := f.Command == stomp.CmdSubscribe
	kind, name, err := s.parseDest(d, subscribing)
	if err != nil {
		return true
	}
	if kind == destQueue && subscribing {
		if tmp, ok := strings.CutPrefix(name, s.b.cfg().Queues.DeadLetterQueue); ok && strings.HasPrefix(tmp, tempPrefix) && !s.ownTemp(name) {
			s.fail(f, "permission denied: read on "+d, fmt.Sprintf("%s holds the dead letters of a temporary queue: only the connection that made the temporary queue may read them.", d))
			return false
		}
		if s.ownTemp(name) {
			return true
		}
	}
	p := s.b.authz.policy.Load()
	if p.Open() {
		return true
	}
	id := *s.ident.Load()
	perm := auth.Write
	if subscribing && kind != destLock { // taking a lock is a write
		perm = auth.Read
	}
	k := kindName(kind)
	if !p.Allowed(id, perm, k, name) {
		return s.deny(f, id, d, perm)
	}
	// A reply to a temporary queue never creates one: the handler drops
	// it when the owner is gone.
	if kind == destQueue && !strings.HasPrefix(name, tempPrefix) && s.b.lookupQueue(name) == nil && !p.Allowed(id, auth.Create, k, name) {
		return s.deny(f, id, d, auth.Create)
	}
	if kind == destStream && !s.b.streamExists(name) && !p.Allowed(id, auth.Create, k, name) {
		return s.deny(f, id, d, auth.Create)
	}
	// A put to a key that does not exist creates it: checked under the
	// key-value store's lock (kvMayCreate).
	return true
}

func (s *session) deny(f *stomp.Frame, id auth.Identity, dest string, perm auth.Perm) bool {
	user := id.Name()
	a := &s.b.authz
	a.mu.Lock()
	a.denied[user]++
	a.mu.Unlock()
	s.log.Warn("permission denied", "user", user, "destination", dest, "permission", perm.String(), "command", f.Command)
	how := fmt.Sprintf("grant it with: herald user grant --file USERS_FILE %s %s PATTERN", user, perm)
	if id.Anonymous {
		how = fmt.Sprintf("log in as a user who has it, or add a pattern to auth.anonymous.%s", perm)
	}
	what := map[auth.Perm]string{auth.Read: "subscribe to", auth.Write: "send to", auth.Create: "create"}[perm]
	s.fail(f, "permission denied: "+perm.String()+" on "+dest, fmt.Sprintf("User %s may not %s %s: it lacks the %s permission on it; %s.", user, what, dest, perm, how))
	return false
}

// kvMayCreate reports whether the session may create key-value key name
// (the create permission on /kv/NAME).
func (s *session) kvMayCreate(name string) bool {
	p := s.b.authz.policy.Load()
	return p.Open() || p.Allowed(*s.ident.Load(), auth.Create, auth.KindKV, name)
}

// releaseUser gives back the connection's place in its user's count (at
// cleanup).
func (s *session) releaseUser() {
	if s.counted == "" {
		return
	}
	a := &s.b.authz
	a.mu.Lock()
	if a.perUser[s.counted]--; a.perUser[s.counted] <= 0 {
		delete(a.perUser, s.counted)
	}
	a.mu.Unlock()
}

// authView is the connection's user, authentication method and TLS
// version, for admin views (any goroutine).
func (s *session) authView() (user, method, tlsVersion string) {
	if id := s.ident.Load(); id != nil {
		user, method = id.Name(), id.Method
	}
	if st, ok := connTLS(s.conn); ok && st.HandshakeComplete {
		tlsVersion = tls.VersionName(st.Version)
	}
	return user, method, tlsVersion
}

// tlsStater is a connection carried over TLS by another layer: a
// WebSocket or an SSE stream of an HTTPS request (web.go, web_sse.go).
type tlsStater interface {
	TLSConnectionState() (tls.ConnectionState, bool)
}

// connTLS is c's TLS state: of the TLS connection itself, or of the HTTPS
// request that carries it.
func connTLS(c net.Conn) (tls.ConnectionState, bool) {
	switch tc := c.(type) {
	case *tls.Conn:
		return tc.ConnectionState(), true
	case tlsStater:
		return tc.TLSConnectionState()
	}
	return tls.ConnectionState{}, false
}

// subDest is a subscription's destination, for SetAuth.
type subDest struct {
	dest, kind, name string
}

// subDests lists the session's subscriptions (any goroutine).
// ownTemp reports whether s reads queue name without a grant: a temporary
// queue (the handler lets only its owner subscribe) or the dead letters of
// one of s's own temporary queues. authorize and SetAuth (a reload) apply
// it alike.
func (s *session) ownTemp(name string) bool {
	if tmp, ok := strings.CutPrefix(name, s.b.cfg().Queues.DeadLetterQueue); ok && strings.HasPrefix(tmp, tempPrefix) {
		return s.b.tempOwner(tmp) == s
	}
	return strings.HasPrefix(name, tempPrefix)
}

func (s *session) subDests() []subDest {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	out := make([]subDest, 0, len(s.subs))
	for _, sub := range s.subs {
		out = append(out, subDest{dest: sub.dest, kind: kindName(sub.kind), name: sub.name})
	}
	return out
}

// --- TLS ----------------------------------------------------------------

// TLSConfig returns the server TLS configuration of cfg's stomp.tls_* keys:
// TLS 1.2 or later; with tls_client_ca, client certificates are verified
// against it when given (a client without one logs in with a password).
func TLSConfig(cfg StompConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("stomp.tls_cert %s / stomp.tls_key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
	}
	// No TLS 1.3 session tickets: stomp.py (Debian python3-stomp) reads
	// on one thread while it writes CONNECT on another, and a ticket
	// arriving then lost its CONNECT or broke its connection, in about 7%
	// of connections on a busy machine, 0 of 200 without tickets
	// (TestStompPy_TLSConnectsReliably). STOMP connections are long-lived:
	// resumption saves little.
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, SessionTicketsDisabled: true}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("stomp.tls_client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("stomp.tls_client_ca %s: no PEM certificate in it", cfg.TLSClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}

// ListenTLS starts accepting STOMP over TLS on addr and returns the bound
// address. The handshake runs in the session, within stomp.connect_timeout.
// SetTLS replaces tc for later handshakes.
func (b *Broker) ListenTLS(addr string, tc *tls.Config) (net.Addr, error) {
	if tc == nil {
		return nil, errors.New("ListenTLS: no TLS configuration")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stomp TLS listen %s: %w (choose another with --tls-listen)", addr, err)
	}
	if b.authz.tls.Load() == nil {
		b.authz.tls.Store(tc)
	}
	// Every handshake takes the configuration in force (SetTLS).
	tln := tls.NewListener(ln, &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return b.authz.tls.Load(), nil
		},
	})
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		ln.Close()
		return nil, ErrClosed
	}
	b.listeners = append(b.listeners, tln)
	b.mu.Unlock()
	b.wg.Add(1)
	go b.serve(tln)
	return ln.Addr(), nil
}
