package lockcore

// A seeded deterministic simulation of the lock table. The harness plays
// the shell and a model journal: owners (subscriptions of connections)
// acquire and release three locks at random, connections end (every lock
// of the owner released), the journal fails to store a grant's token at
// random (the shell gives the grant back and ends that connection), and
// the daemon crashes (a new Core recovered from the journaled tokens; all
// holders and waiters are gone with their connections). After every step
// the model is compared with the core: one holder per lock, the queue in
// arrival order, tokens strictly growing across crashes, nothing left of
// an owner that released.
//
//	go test -run TestSim ./appliance/lockcore                       // 500 seeds x 400 steps
//	go test -run TestSim -locksim.seeds=20000 ./appliance/lockcore  // more

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

var (
	simSeeds = flag.Int("locksim.seeds", 500, "seeds")
	simSteps = flag.Int("locksim.steps", 400, "steps per seed")
)

var simNames = []string{"deploy", "site1.config", "site2.config", "backup"}

type mlock struct {
	held   bool
	holder Owner
	queue  []Owner
}

type sim struct {
	t       *testing.T
	r       *rand.Rand
	c       *Core
	lim     Limits
	locks   map[string]*mlock
	durable map[string]uint64 // model journal
	shown   map[string]uint64 // highest token shown to an owner
	next    Owner
	live    []Owner // owners whose connection is up
	step    int
	seed    int64
	grants  int
	fails   int
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d step %d: %s", s.seed, s.step, fmt.Sprintf(format, args...))
}

func (s *sim) lock(name string) *mlock {
	if s.locks[name] == nil {
		s.locks[name] = &mlock{}
	}
	return s.locks[name]
}

// granted plays the shell with a Grant: journal the token, then show it;
// a failed journal write gives it back and ends the owner's connection.
func (s *sim) granted(g *Grant, wantOwner Owner) {
	if g.Owner != wantOwner {
		s.fatalf("lock %s granted to %d, the model's next is %d", g.Name, g.Owner, wantOwner)
	}
	if g.Token <= s.shown[g.Name] || g.Token <= s.durable[g.Name] {
		s.fatalf("lock %s token %d; shown %d, journaled %d", g.Name, g.Token, s.shown[g.Name], s.durable[g.Name])
	}
	m := s.lock(g.Name)
	if m.held {
		s.fatalf("lock %s granted to %d while %d holds it", g.Name, g.Owner, m.holder)
	}
	m.held, m.holder = true, g.Owner
	if s.r.IntN(12) == 0 {
		s.fails++
		s.disconnect(g.Owner) // its Release passes the lock on
		return
	}
	s.durable[g.Name] = g.Token
	s.shown[g.Name] = g.Token
	s.grants++
}

func (s *sim) acquire() {
	var o Owner
	if len(s.live) == 0 || s.r.IntN(4) == 0 {
		s.next++
		o = s.next
		s.live = append(s.live, o)
	} else {
		o = s.live[s.r.IntN(len(s.live))]
	}
	name := simNames[s.r.IntN(len(simNames))]
	m := s.locks[name]
	g, err := s.c.Acquire(name, o, s.lim)
	dup := m != nil && ((m.held && m.holder == o) || slices.Contains(m.queue, o))
	switch {
	case dup:
		if !errors.Is(err, ErrDuplicate) {
			s.fatalf("second acquire of %s by %d: %v", name, o, err)
		}
	case m == nil && len(s.locks) >= s.lim.MaxNames:
		if !errors.Is(err, ErrTooManyNames) {
			s.fatalf("acquire of a new name beyond %d: %v", s.lim.MaxNames, err)
		}
	case m != nil && m.held && len(m.queue) >= s.lim.MaxWaiters:
		if !errors.Is(err, ErrTooManyWaiters) {
			s.fatalf("acquire beyond %d waiters: %v", s.lim.MaxWaiters, err)
		}
	case err != nil:
		s.fatalf("acquire %s by %d: %v", name, o, err)
	case m == nil || !m.held:
		if g == nil {
			s.fatalf("free lock %s not granted to %d", name, o)
		}
		s.granted(g, o)
	default:
		if g != nil {
			s.fatalf("held lock %s granted to %d", name, o)
		}
		m.queue = append(m.queue, o)
	}
}

// release plays UNSUBSCRIBE of o's request for name.
func (s *sim) release(name string, o Owner) {
	m := s.locks[name]
	g := s.c.Release(name, o)
	if m == nil {
		if g != nil {
			s.fatalf("release of unknown lock %s granted it", name)
		}
		return
	}
	if m.held && m.holder == o {
		m.held = false
		if len(m.queue) == 0 {
			if g != nil {
				s.fatalf("release of %s with no waiter granted it to %d", name, g.Owner)
			}
			return
		}
		next := m.queue[0]
		m.queue = m.queue[1:]
		if g == nil {
			s.fatalf("release of %s left waiter %d without it", name, next)
		}
		s.granted(g, next)
		return
	}
	if g != nil {
		s.fatalf("release by non-holder %d of %s granted it", o, name)
	}
	if i := slices.Index(m.queue, o); i >= 0 {
		m.queue = slices.Delete(m.queue, i, i+1)
	}
}

// disconnect ends o's connection: the shell releases each of its locks.
func (s *sim) disconnect(o Owner) {
	if i := slices.Index(s.live, o); i >= 0 {
		s.live = slices.Delete(s.live, i, i+1)
	}
	for _, name := range simNames {
		s.release(name, o)
	}
}

func (s *sim) crash() {
	s.c = New()
	for n, t := range s.durable {
		s.c.Recover(n, t)
	}
	s.locks = map[string]*mlock{}
	for n := range s.durable {
		s.locks[n] = &mlock{}
	}
	s.live = nil
}

func (s *sim) check() {
	for _, name := range simNames {
		m := s.locks[name]
		o, tok, held := s.c.Holder(name)
		if m == nil {
			if held || len(s.c.Waiters(name)) > 0 {
				s.fatalf("unknown lock %s held or waited for", name)
			}
			continue
		}
		if held != m.held || (held && o != m.holder) {
			s.fatalf("lock %s: core holder %v/%d, model %v/%d", name, held, o, m.held, m.holder)
		}
		if tok < s.shown[name] {
			s.fatalf("lock %s token %d went below shown %d", name, tok, s.shown[name])
		}
		if w := s.c.Waiters(name); !slices.Equal(w, m.queue) {
			s.fatalf("lock %s waiters %v, model (arrival order) %v", name, w, m.queue)
		}
		if !held && len(m.queue) > 0 {
			s.fatalf("lock %s free with waiters %v", name, m.queue)
		}
		if len(m.queue) > s.lim.MaxWaiters {
			s.fatalf("lock %s has %d waiters, limit %d", name, len(m.queue), s.lim.MaxWaiters)
		}
		for _, w := range m.queue {
			if !slices.Contains(s.live, w) {
				s.fatalf("lock %s: waiter %d's connection ended", name, w)
			}
		}
		if held && !slices.Contains(s.live, o) {
			s.fatalf("lock %s held by %d whose connection ended", name, o)
		}
		// Fencing: only the holder's token passes.
		if held && s.c.Fence(name, tok) != nil {
			s.fatalf("holder's token %d of %s refused", tok, name)
		}
		if tok > 1 && s.c.Fence(name, tok-1) == nil {
			s.fatalf("stale token %d of %s accepted", tok-1, name)
		}
		if !held && tok > 0 && s.c.Fence(name, tok) == nil {
			s.fatalf("token %d of free lock %s accepted", tok, name)
		}
	}
	if s.c.Names() > s.lim.MaxNames {
		s.fatalf("%d names, limit %d", s.c.Names(), s.lim.MaxNames)
	}
}

func runSim(t *testing.T, seed int64, steps int) (grants, fails int) {
	s := &sim{t: t, seed: seed, r: rand.New(rand.NewPCG(uint64(seed), 0x6c6b)), c: New(),
		locks: map[string]*mlock{}, durable: map[string]uint64{}, shown: map[string]uint64{}}
	s.lim = Limits{MaxNames: 2 + s.r.IntN(3), MaxWaiters: 1 + s.r.IntN(4)}
	for s.step = 0; s.step < steps; s.step++ {
		switch x := s.r.IntN(100); {
		case x < 45:
			s.acquire()
		case x < 75:
			if len(s.live) > 0 {
				s.release(simNames[s.r.IntN(len(simNames))], s.live[s.r.IntN(len(s.live))])
			}
		case x < 95:
			if len(s.live) > 0 {
				s.disconnect(s.live[s.r.IntN(len(s.live))])
			}
		default:
			s.crash()
		}
		s.check()
	}
	return s.grants, s.fails
}

func TestSim(t *testing.T) {
	var grants, fails int
	for seed := int64(0); seed < int64(*simSeeds); seed++ {
		g, f := runSim(t, seed, *simSteps)
		grants += g
		fails += f
	}
	if *simSeeds >= 100 && (grants < 10000 || fails < 500) {
		t.Errorf("%d grants, %d failed journal writes: the schedules exercise too little", grants, fails)
	}
	t.Logf("%d grants, %d journal failures", grants, fails)
}

func TestParseFence(t *testing.T) {
	for _, c := range []struct {
		in    string
		name  string
		token uint64
		ok    bool
	}{
		{"deploy:7", "deploy", 7, true},
		{"site1.config:12", "site1.config", 12, true},
		{"a:b:3", "a:b", 3, true},
		{"deploy:0", "", 0, false},
		{"deploy:", "", 0, false},
		{":5", "", 0, false},
		{"deploy", "", 0, false},
		{"deploy:-1", "", 0, false},
		{"dep*:1", "", 0, false},
		{"a..b:1", "", 0, false},
		{"deploy:18446744073709551616", "", 0, false},
	} {
		n, tok, err := ParseFence(c.in)
		if (err == nil) != c.ok || n != c.name || tok != c.token {
			t.Errorf("ParseFence(%q) = %q, %d, %v", c.in, n, tok, err)
		}
	}
}

// FuzzParseFence: any header value is refused with an error or parsed into
// a valid name and a token that print back to the same header.
//
//	go test -run '^$' -fuzz '^FuzzParseFence$' ./appliance/lockcore
func FuzzParseFence(f *testing.F) {
	for _, s := range []string{"deploy:7", "a:b:3", ":", "x:0", "é.ü:99", "a..b:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, tok, err := ParseFence(v)
		if err != nil {
			if n != "" || tok != 0 {
				t.Fatalf("error with a result: %q %d", n, tok)
			}
			return
		}
		if CheckName(n) != nil || tok == 0 {
			t.Fatalf("ParseFence(%q) = %q %d: invalid", v, n, tok)
		}
		if v2 := fmt.Sprintf("%s:%d", n, tok); v2 != v {
			// Leading zeros or a plus sign are the only other spellings.
			if n2, t2, err := ParseFence(v2); err != nil || n2 != n || t2 != tok {
				t.Fatalf("round trip of %q: %q", v, v2)
			}
		}
	})
}
