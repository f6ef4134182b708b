package auth

import (
	"net/netip"
	"time"
)

// Throttle slows down failed logins per source: the n-th failure from one
// source within Window of the previous one waits Base * 2^(n-1), at most
// Max, before its ERROR. And every later login from that source, right or
// wrong, is decided no sooner than that delay after the one before
// (Admit): a guesser that does not wait for an ERROR, or tries on parallel
// connections, still gets one decision per delay. A source silent for
// Window starts again at Base. A login that succeeds does not reset its
// source (a guesser holding one account of its own could reset it between
// guesses at another).
// At most MaxSources sources are remembered; past that the one whose last
// failure is oldest is forgotten. It keeps no clock: callers pass the time.
type Throttle struct {
	Base, Max, Window time.Duration
	MaxSources        int

	m map[string]*throttleEntry
}

type throttleEntry struct {
	fails int
	last  int64 // unix ms of the last failure
	next  int64 // unix ms before which no login of the source is decided
}

// Default throttle: 250 ms doubling to 8 s; forgotten after 10 minutes
// without a failure; 65,536 sources (a few MiB).
func NewThrottle() *Throttle {
	return &Throttle{Base: 250 * time.Millisecond, Max: 8 * time.Second, Window: 10 * time.Minute, MaxSources: 65536}
}

// Fail records a failed login from source at now (unix ms) and returns how
// long to wait before answering it.
func (t *Throttle) Fail(source string, now int64) time.Duration {
	if t.m == nil {
		t.m = map[string]*throttleEntry{}
	}
	e := t.m[source]
	if e != nil && now-e.last > t.Window.Milliseconds() {
		e.fails, e.next = 0, 0
	}
	if e == nil {
		if len(t.m) >= t.MaxSources {
			t.evict(now)
		}
		e = &throttleEntry{}
		t.m[source] = e
	}
	e.fails++
	if now > e.last {
		e.last = now
	}
	d := t.delay(e.fails)
	e.next = max(e.next, now+d.Milliseconds())
	return d
}

// delay is the wait after the n-th failure in a row.
func (t *Throttle) delay(n int) time.Duration {
	d := t.Base
	for i := 1; i < n && d < t.Max; i++ {
		d *= 2
	}
	return min(d, t.Max)
}

// Admit reserves the next decision of a login from source at now (unix ms)
// and returns how long to wait before deciding it: 0 for a source without
// recent failures; otherwise until the source's next slot, each login
// taking the slot after the one before, one delay apart, so that logins
// on parallel connections are decided one after another.
func (t *Throttle) Admit(source string, now int64) time.Duration {
	e := t.m[source]
	if e == nil || now-e.last > t.Window.Milliseconds() {
		return 0
	}
	at := max(now, e.next)
	e.next = at + t.delay(e.fails).Milliseconds()
	return time.Duration(at-now) * time.Millisecond
}

// evict forgets the sources silent for Window, or else the oldest one.
func (t *Throttle) evict(now int64) {
	var oldest string
	var oldestAt int64
	first := true
	for k, e := range t.m {
		if now-e.last > t.Window.Milliseconds() {
			delete(t.m, k)
			continue
		}
		if first || e.last < oldestAt || (e.last == oldestAt && k < oldest) {
			oldest, oldestAt, first = k, e.last, false
		}
	}
	if len(t.m) >= t.MaxSources && !first {
		delete(t.m, oldest)
	}
}

// Sources is how many sources are remembered.
func (t *Throttle) Sources() int { return len(t.m) }

// Source is the throttle key of a peer address: an IPv4 address, or the /64
// prefix of an IPv6 address (one host usually holds a whole /64).
func Source(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
