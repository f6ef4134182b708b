package kvcore

// A seeded deterministic simulation of the key-value store. The harness
// plays the shell and a model journal:
//
//   - writers: puts, compare-and-set puts and deletes (expected revision
//     right, stale or 0), unconditional deletes, values of random sizes near
//     the limits, over two buckets and a small key space;
//   - the journal: a prepared entry is committed (appended to the model log,
//     then Apply) or fails (nothing applied), at random;
//   - watchers opened at random steps between writes with random patterns
//     (exact keys, *, >), and closed at random;
//   - crash-restarts: a new Core recovered from the model journal's live
//     rows and bucket counters (watchers end with their connections).
//
// After every step it checks the package invariants (doc.go) against the
// model: CAS outcome, limits, revision order, and every watcher's snapshot
// plus changes against the committed log.
//
//	go test -run TestSim ./appliance/kvcore                          // 500 seeds x 400 steps
//	go test -run TestSim -kvsim.seeds=20000 ./appliance/kvcore      // more

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
)

var (
	simSeeds = flag.Int("kvsim.seeds", 500, "seeds")
	simSteps = flag.Int("kvsim.steps", 400, "steps per seed")
	simSeed  = flag.Int64("kvsim.seed", -1, "run only this seed")
)

type simWatch struct {
	id              uint64
	bucket, pattern string
	openedAt        int // index into the committed log when the watch began
	marker          uint64
	state           map[string]Entry // snapshot + changes
	lastRev         uint64
}

type sim struct {
	t             *testing.T
	r             *rand.Rand
	c             *Core
	lim           Limits
	log           []Entry                     // committed changes, in order
	rows          map[string]map[string]Entry // model journal: live keys
	revs          map[string]uint64           // model journal: bucket counters
	watch         map[uint64]*simWatch
	step          int
	seed          int64
	now           int64 // the clock the shell passes in (ms)
	txns, expired int
}

var simBuckets = []string{"config", "locks"}
var simKeys = []string{"a", "b", "site1.x", "site1.y", "site1.z.q", "site2.x", "site2.y"}
var simPatterns = []string{">", "site1.>", "site1.*", "*.x", "a", "site2.y", "*", "site1.z.q"}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d step %d: %s", s.seed, s.step, fmt.Sprintf(format, args...))
}

func (s *sim) modelKey(b, k string) (Entry, bool) {
	e, ok := s.rows[b][k]
	return e, ok
}

func (s *sim) write() {
	b := simBuckets[s.r.IntN(len(simBuckets))]
	k := simKeys[s.r.IntN(len(simKeys))]
	req := Request{Bucket: b, Key: k, Op: Put, IfRevision: NoRevision, ContentType: "text/plain"}
	if s.r.IntN(4) == 0 {
		req.Op = Delete
	}
	cur, exists := s.modelKey(b, k)
	// A key past its expiry, its delete not yet made, is absent to the
	// request (Request.Now); it still weighs against the limits.
	req.Now = s.now
	alive := exists && cur.Alive(s.now)
	if exists && !alive {
		simPastExpiry++
	}
	var curRev uint64
	if alive {
		curRev = cur.Revision
	}
	switch s.r.IntN(4) {
	case 0:
		req.IfRevision = int64(curRev) // right
	case 1:
		req.IfRevision = int64(s.r.Uint64N(s.revs[b] + 2)) // often wrong
	case 2:
		req.IfRevision = 0
	}
	n := s.r.IntN(s.lim.MaxValueBytes + 3)
	req.Value = make([]byte, n)
	for i := range req.Value {
		req.Value[i] = byte(s.r.Uint32())
	}
	if req.Op == Put && s.r.IntN(3) == 0 {
		req.Expires = s.now + 1 + s.r.Int64N(50)
	}
	req.NoCreate = s.r.IntN(8) == 0
	e, err := s.c.Prepare(req, s.lim)
	// The model's verdict.
	var ce *ConflictError
	if req.IfRevision != NoRevision && uint64(req.IfRevision) != curRev {
		if !errors.As(err, &ce) || ce.Current != curRev {
			s.fatalf("CAS expected %d on %s.%s at %d: want conflict at %d, got %v", req.IfRevision, b, k, curRev, curRev, err)
		}
		return
	}
	if errors.As(err, &ce) {
		s.fatalf("CAS expected %d on %s.%s at %d: conflict reported (%v)", req.IfRevision, b, k, curRev, err)
	}
	if req.Op == Delete && !alive {
		if !errors.Is(err, ErrNoKey) {
			s.fatalf("delete of absent %s.%s: got %v, want ErrNoKey", b, k, err)
		}
		return
	}
	if req.Op == Put {
		keys, bytes := len(s.rows[b]), int64(0)
		for _, r := range s.rows[b] {
			bytes += r.Size()
		}
		if exists {
			keys--
			bytes -= cur.Size()
		}
		size := Entry{Key: k, ContentType: req.ContentType, Value: req.Value}.Size()
		var want error
		switch {
		case len(req.Value) > s.lim.MaxValueBytes:
			want = ErrValueTooLarge
		case s.rows[b] == nil && len(s.rows) >= s.lim.MaxBuckets:
			want = ErrTooManyBucket
		case keys+1 > s.lim.MaxKeys:
			want = ErrTooManyKeys
		case bytes+size > s.lim.MaxBytes:
			want = ErrBucketFull
		case s.totalBytes()-cur.Size()+size > s.lim.MaxTotalBytes:
			want = ErrStoreFull
		case !alive && req.NoCreate:
			want = ErrCreateDenied
		}
		if want != nil || err != nil {
			if !errors.Is(err, want) || want == nil {
				s.fatalf("put %s.%s of %d bytes (keys %d, bytes %d): got %v, want %v", b, k, len(req.Value), keys, bytes, err, want)
			}
			return
		}
	}
	if err != nil {
		s.fatalf("%v %s.%s: unexpected %v", req.Op, b, k, err)
	}
	if e.Revision != s.revs[b]+1 {
		s.fatalf("prepared revision %d for bucket %s at %d", e.Revision, b, s.revs[b])
	}
	if s.r.IntN(10) == 0 {
		return // the journal batch failed: nothing applied
	}
	if e.Expires != req.Expires {
		s.fatalf("prepared expiry %d, asked %d", e.Expires, req.Expires)
	}
	// Committed: model journal first, then the core.
	s.commit([]Entry{e})
	s.deliver([]Entry{e}, s.c.Apply(e), false)
}

// commit appends committed entries to the model journal.
func (s *sim) commit(es []Entry) {
	for _, e := range es {
		b, k := e.Bucket, e.Key
		if e.Revision != s.revs[b]+1 {
			s.fatalf("committed revision %d of bucket %s at %d", e.Revision, b, s.revs[b])
		}
		s.log = append(s.log, e)
		s.revs[b] = e.Revision
		if s.rows[b] == nil {
			s.rows[b] = map[string]Entry{}
		}
		if e.Op == Put {
			s.rows[b][k] = e
		} else {
			delete(s.rows[b], k)
		}
	}
}

// deliver checks the deliveries of committed entries es: every matching
// watcher gets each of them exactly once, in order, above its marker; for
// a set (txn), each carries the set's first revision in its bucket and the
// last one to each watcher is marked Last.
func (s *sim) deliver(es []Entry, ds []Delivery, txn bool) {
	want := map[uint64][]Entry{}
	first := map[string]uint64{}
	for _, e := range es {
		if _, ok := first[e.Bucket]; !ok {
			first[e.Bucket] = e.Revision
		}
		for id, w := range s.watch {
			if w.bucket == e.Bucket && Match(w.pattern, e.Key) {
				want[id] = append(want[id], e)
			}
		}
	}
	got := map[uint64]int{}
	for i, d := range ds {
		w := s.watch[d.Watch]
		if w == nil {
			s.fatalf("delivery to unknown watcher %d", d.Watch)
		}
		n := got[d.Watch]
		if n >= len(want[d.Watch]) || want[d.Watch][n].Revision != d.Entry.Revision || want[d.Watch][n].Bucket != d.Entry.Bucket {
			s.fatalf("watcher %d: delivery %d is %s rev %d, not the next matching change", d.Watch, n, d.Entry.Key, d.Entry.Revision)
		}
		got[d.Watch] = n + 1
		if d.Entry.Revision <= w.marker || d.Entry.Revision <= w.lastRev {
			s.fatalf("watcher %d got revision %d after marker %d / last %d", d.Watch, d.Entry.Revision, w.marker, w.lastRev)
		}
		if txn {
			if d.Txn != first[d.Entry.Bucket] {
				s.fatalf("watcher %d: txn id %d, set begins at %d", d.Watch, d.Txn, first[d.Entry.Bucket])
			}
			if d.Last != (n+1 == len(want[d.Watch])) {
				s.fatalf("watcher %d: Last %v on delivery %d of %d", d.Watch, d.Last, n+1, len(want[d.Watch]))
			}
			for _, o := range ds[i+1:] {
				if d.Last && o.Watch == d.Watch {
					s.fatalf("watcher %d: delivery after Last", d.Watch)
				}
			}
		} else if d.Txn != 0 || d.Last {
			s.fatalf("single change delivered as a set: %+v", d)
		}
		if d.Entry.Expired != (d.Entry.Op == Delete && es[0].Expired) {
			s.fatalf("Expired %v on %v", d.Entry.Expired, d.Entry.Op)
		}
		w.lastRev = d.Entry.Revision
		if d.Entry.Op == Put {
			w.state[d.Entry.Key] = d.Entry
		} else {
			delete(w.state, d.Entry.Key)
		}
	}
	for id, es := range want {
		if got[id] != len(es) {
			s.fatalf("watcher %d got %d of %d matching changes", id, got[id], len(es))
		}
	}
}

// txn plays a transaction of 1 to 4 puts and deletes: compare-and-set is
// judged against the state the set's earlier requests make.
func (s *sim) txn() {
	n := 1 + s.r.IntN(4)
	var rs []Request
	for i := 0; i < n; i++ {
		b := simBuckets[s.r.IntN(len(simBuckets))]
		k := simKeys[s.r.IntN(len(simKeys))]
		r := Request{Bucket: b, Key: k, Op: Put, IfRevision: NoRevision, Value: make([]byte, s.r.IntN(s.lim.MaxValueBytes+1))}
		if s.r.IntN(4) == 0 {
			r.Op = Delete
		}
		if s.r.IntN(3) == 0 {
			r.IfRevision = int64(s.rows[b][k].Revision) // right unless the set wrote k before
			if s.r.IntN(3) == 0 {
				r.IfRevision = int64(s.r.Uint64N(s.revs[b] + 2))
			}
		}
		if r.Op == Put && s.r.IntN(3) == 0 {
			r.Expires = s.now + 1 + s.r.Int64N(50)
		}
		r.Now = s.now
		rs = append(rs, r)
	}
	es, idx, err := s.c.PrepareTxn(rs, func(string) Limits { return s.lim })
	var ce *ConflictError
	if err != nil {
		if idx < 0 || idx >= len(rs) {
			s.fatalf("txn failed at index %d of %d: %v", idx, len(rs), err)
		}
		if errors.As(err, &ce) && rs[idx].IfRevision == NoRevision {
			s.fatalf("conflict on an unconditional request")
		}
		return
	}
	// Replay on a copy of the model: every condition holds in order, and
	// the entries are the requests' (deletes of absent keys left out)
	// with consecutive revisions.
	rows := map[string]map[string]Entry{}
	revs := map[string]uint64{}
	for b, m := range s.rows {
		rows[b] = map[string]Entry{}
		for k, e := range m {
			rows[b][k] = e
		}
	}
	for b, r := range s.revs {
		revs[b] = r
	}
	j := 0
	for _, r := range rs {
		old, exists := rows[r.Bucket][r.Key]
		var oldRev uint64
		if exists && old.Alive(s.now) {
			oldRev = old.Revision
		}
		if r.IfRevision != NoRevision && uint64(r.IfRevision) != oldRev {
			s.fatalf("txn committed a CAS expecting %d on %s.%s at %d", r.IfRevision, r.Bucket, r.Key, oldRev)
		}
		if r.Op == Delete && oldRev == 0 {
			continue
		}
		if j >= len(es) {
			s.fatalf("txn: %d entries for more requests", len(es))
		}
		e := es[j]
		j++
		if e.Bucket != r.Bucket || e.Key != r.Key || e.Op != r.Op || e.Revision != revs[r.Bucket]+1 {
			s.fatalf("txn entry %+v for request %s.%s %v at bucket revision %d", e, r.Bucket, r.Key, r.Op, revs[r.Bucket])
		}
		revs[r.Bucket] = e.Revision
		if rows[r.Bucket] == nil {
			rows[r.Bucket] = map[string]Entry{}
		}
		if r.Op == Put {
			rows[r.Bucket][r.Key] = e
		} else {
			delete(rows[r.Bucket], r.Key)
		}
	}
	if j != len(es) {
		s.fatalf("txn: %d entries, %d expected", len(es), j)
	}
	// Prepare changed nothing.
	s.check()
	if len(es) == 0 || s.r.IntN(10) == 0 {
		return // nothing to do, or the journal batch failed
	}
	s.txns++
	s.commit(es)
	s.deliver(es, s.c.ApplyTxn(es), true)
}

// group plays group commit: writes of several clients prepared together
// with PrepareEach, journaled in one batch, applied one by one. Each
// outcome must be what preparing and applying them one after the other
// gives (checked on a reference core recovered from the model journal).
func (s *sim) group() {
	n := 1 + s.r.IntN(5)
	var rs []Request
	for i := 0; i < n; i++ {
		b := simBuckets[s.r.IntN(len(simBuckets))]
		k := simKeys[s.r.IntN(len(simKeys))]
		r := Request{Bucket: b, Key: k, Op: Put, IfRevision: NoRevision, Value: make([]byte, s.r.IntN(s.lim.MaxValueBytes+2))}
		if s.r.IntN(4) == 0 {
			r.Op = Delete
		}
		if s.r.IntN(3) == 0 {
			r.IfRevision = int64(s.r.Uint64N(s.revs[b] + 2))
		}
		r.NoCreate = s.r.IntN(6) == 0
		rs = append(rs, r)
	}
	es, errs := s.c.PrepareEach(rs, func(string) Limits { return s.lim })
	ref := New()
	for b, rev := range s.revs {
		ref.Recover(Entry{Bucket: b, Revision: rev})
	}
	for _, rows := range s.rows {
		for _, e := range rows {
			ref.Recover(e)
		}
	}
	var commit []Entry
	for i, r := range rs {
		want, werr := ref.Prepare(r, s.lim)
		if werr == nil {
			ref.Apply(want)
		}
		var ce, wce *ConflictError
		switch {
		case werr == nil && errs[i] == nil:
			if es[i].Revision != want.Revision || es[i].Key != want.Key || es[i].Op != want.Op || string(es[i].Value) != string(want.Value) {
				s.fatalf("group request %d: entry %+v, one by one %+v", i, es[i], want)
			}
			commit = append(commit, es[i])
		case errors.As(werr, &wce):
			if !errors.As(errs[i], &ce) || *ce != *wce {
				s.fatalf("group request %d: %v, one by one %v", i, errs[i], werr)
			}
		case werr == nil || !errors.Is(errs[i], werr):
			s.fatalf("group request %d: %v, one by one %v", i, errs[i], werr)
		}
	}
	s.check() // PrepareEach changed nothing
	if len(commit) == 0 || s.r.IntN(10) == 0 {
		return // the batch failed: every write of it fails
	}
	s.commit(commit)
	for _, e := range commit {
		s.deliver([]Entry{e}, s.c.Apply(e), false)
	}
}

// expire advances the clock and expires what is due, as the shell's timer.
func (s *sim) expire() {
	s.now += s.r.Int64N(30)
	es := s.c.Expire(s.now)
	want := 0
	for b, rows := range s.rows {
		for k, e := range rows {
			if e.Expires != 0 && e.Expires <= s.now {
				want++
				found := false
				for _, x := range es {
					found = found || (x.Bucket == b && x.Key == k)
				}
				if !found {
					s.fatalf("%s.%s expired at %d, now %d, not in Expire", b, k, e.Expires, s.now)
				}
			}
		}
	}
	if len(es) != want {
		s.fatalf("Expire returned %d entries, %d keys are due", len(es), want)
	}
	if ne := s.c.NextExpiry(); ne != 0 && want == 0 && ne <= s.now {
		s.fatalf("next expiry %d at %d with nothing due", ne, s.now)
	}
	for _, e := range es {
		if e.Op != Delete || !e.Expired {
			s.fatalf("expiry entry %+v", e)
		}
	}
	if len(es) == 0 || s.r.IntN(10) == 0 {
		return
	}
	s.expired += len(es)
	s.commit(es)
	s.deliver(es, s.c.ApplyTxn(es), true)
}

func (s *sim) totalBytes() int64 {
	var n int64
	for _, rows := range s.rows {
		for _, e := range rows {
			n += e.Size()
		}
	}
	return n
}

func (s *sim) openWatch() {
	b := simBuckets[s.r.IntN(len(simBuckets))]
	p := simPatterns[s.r.IntN(len(simPatterns))]
	id, snap, rev := s.c.Watch(b, p)
	if s.watch[id] != nil {
		s.fatalf("watch id %d reused", id)
	}
	if rev != s.revs[b] {
		s.fatalf("snapshot of %s at revision %d, journal at %d", b, rev, s.revs[b])
	}
	w := &simWatch{id: id, bucket: b, pattern: p, openedAt: len(s.log), marker: rev, state: map[string]Entry{}}
	for i, e := range snap {
		if i > 0 && snap[i-1].Key >= e.Key {
			s.fatalf("snapshot not in key order")
		}
		if e.Revision > rev {
			s.fatalf("snapshot entry at %d above marker %d", e.Revision, rev)
		}
		w.state[e.Key] = e
	}
	s.watch[id] = w
}

func (s *sim) crash() {
	s.c = New()
	for b, rev := range s.revs {
		s.c.Recover(Entry{Bucket: b, Revision: rev})
	}
	for _, rows := range s.rows {
		for _, e := range rows {
			s.c.Recover(e)
		}
	}
	s.watch = map[uint64]*simWatch{}
}

func (s *sim) check() {
	// Core state equals the model journal.
	for _, st := range s.c.Buckets() {
		if st.Revision != s.revs[st.Name] {
			s.fatalf("bucket %s at revision %d, journal %d", st.Name, st.Revision, s.revs[st.Name])
		}
		if st.Keys != len(s.rows[st.Name]) || st.Keys > s.lim.MaxKeys || st.Bytes > s.lim.MaxBytes {
			s.fatalf("bucket %s: %d keys %d bytes; journal %d keys; limits %+v", st.Name, st.Keys, st.Bytes, len(s.rows[st.Name]), s.lim)
		}
	}
	if got, want := s.c.Bytes(), s.totalBytes(); got != want || got > s.lim.MaxTotalBytes {
		s.fatalf("store holds %d bytes, journal %d, limit %d", got, want, s.lim.MaxTotalBytes)
	}
	if len(s.c.Buckets()) > s.lim.MaxBuckets {
		s.fatalf("%d buckets, limit %d", len(s.c.Buckets()), s.lim.MaxBuckets)
	}
	for b, rows := range s.rows {
		for k, e := range rows {
			g, ok := s.c.Get(b, k)
			if !ok || g.Revision != e.Revision || string(g.Value) != string(e.Value) {
				s.fatalf("%s.%s: core %v/%d, journal %d", b, k, ok, g.Revision, e.Revision)
			}
		}
	}
	// Every watcher's replayed view equals the journal's matching keys.
	for id, w := range s.watch {
		n := 0
		for k, e := range s.rows[w.bucket] {
			if !Match(w.pattern, k) {
				continue
			}
			n++
			g, ok := w.state[k]
			if !ok || g.Revision != e.Revision {
				s.fatalf("watcher %d (%s %s): key %s at %v/%d, journal %d", id, w.bucket, w.pattern, k, ok, g.Revision, e.Revision)
			}
		}
		if n != len(w.state) {
			s.fatalf("watcher %d holds %d keys, journal %d", id, len(w.state), n)
		}
		// No gap: the changes after the marker are exactly the log's.
		var want uint64
		for _, e := range s.log[w.openedAt:] {
			if e.Bucket == w.bucket && Match(w.pattern, e.Key) {
				want = e.Revision
			}
		}
		if want != 0 && w.lastRev != want {
			s.fatalf("watcher %d last revision %d, journal's last matching %d", id, w.lastRev, want)
		}
	}
	// Revisions are never reused: the log's per bucket strictly grow.
	// (checked incrementally: write compares with revs)
}

func runSim(t *testing.T, seed int64, steps int) {
	runSimWith(t, seed, steps, rand.New(rand.NewPCG(uint64(seed), 0x6b76)))
}

// byteSource makes a schedule of fuzz bytes: each Uint64 takes the next 8,
// then a fixed PCG once they run out (a constant source would make
// rand's rejection sampling loop forever).
type byteSource struct {
	b    []byte
	rest rand.PCG
}

func (s *byteSource) Uint64() uint64 {
	if len(s.b) == 0 {
		return s.rest.Uint64()
	}
	var v uint64
	for i := 0; i < 8 && len(s.b) > 0; i++ {
		v = v<<8 | uint64(s.b[0])
		s.b = s.b[1:]
	}
	return v
}

// FuzzSim runs the simulation on schedules drawn from the fuzzer's bytes.
//
//	go test -run '^$' -fuzz '^FuzzSim$' ./appliance/kvcore
func FuzzSim(f *testing.F) {
	for seed := uint64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		b := make([]byte, 800*int(seed))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runSimWith(t, -1, len(data)/8, rand.New(&byteSource{b: data}))
	})
}

func runSimWith(t *testing.T, seed int64, steps int, r *rand.Rand) {
	s := &sim{t: t, seed: seed, r: r, c: New(),
		rows: map[string]map[string]Entry{}, revs: map[string]uint64{}, watch: map[uint64]*simWatch{}}
	s.lim = Limits{MaxValueBytes: 1 + s.r.IntN(16), MaxKeys: 1 + s.r.IntN(6), MaxBuckets: 1 + s.r.IntN(2)}
	s.lim.MaxBytes = int64(s.r.IntN(3*s.lim.MaxValueBytes*s.lim.MaxKeys) + 1)
	s.lim.MaxTotalBytes = int64(s.r.IntN(int(2*s.lim.MaxBytes)) + 1)
	for s.step = 0; s.step < steps; s.step++ {
		s.now += s.r.Int64N(3)
		switch x := s.r.IntN(100); {
		case x < 55:
			s.write()
		case x < 59:
			s.txn()
		case x < 62:
			s.group()
		case x < 70:
			s.expire()
		case x < 82:
			s.openWatch()
		case x < 90:
			for id := range s.watch {
				s.c.Unwatch(id)
				delete(s.watch, id)
				break
			}
		case x < 93:
			s.crash()
		default:
			s.c.Snapshot(simBuckets[s.r.IntN(2)], simPatterns[s.r.IntN(len(simPatterns))])
		}
		s.check()
	}
	if s.c.Watchers() != len(s.watch) {
		s.fatalf("core has %d watchers, sim %d", s.c.Watchers(), len(s.watch))
	}
	simTxns += s.txns
	simExpired += s.expired
}

var simTxns, simExpired, simPastExpiry int

func TestSim(t *testing.T) {
	if *simSeed >= 0 {
		runSim(t, *simSeed, *simSteps)
		return
	}
	simTxns, simExpired, simPastExpiry = 0, 0, 0
	for seed := int64(0); seed < int64(*simSeeds); seed++ {
		runSim(t, seed, *simSteps)
	}
	// The schedules must commit transactions and expire keys, or the
	// simulation proves nothing about them.
	if *simSeeds >= 100 && (simTxns < 1000 || simExpired < 500 || simPastExpiry < 100) {
		t.Errorf("%d transactions committed, %d keys expired, %d writes met a key past its expiry over the seeds", simTxns, simExpired, simPastExpiry)
	}
	t.Logf("%d transactions committed, %d keys expired, %d writes met a key past its expiry", simTxns, simExpired, simPastExpiry)
}

// The simulation must exercise every outcome, or it proves little.
func TestSim_Coverage(t *testing.T) {
	counts := map[string]int{}
	for seed := int64(0); seed < 50; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		c := New()
		lim := Limits{MaxValueBytes: 4, MaxKeys: 2, MaxBytes: 12, MaxBuckets: 2, MaxTotalBytes: 18}
		for i := 0; i < 200; i++ {
			req := Request{Bucket: simBuckets[r.IntN(2)], Key: simKeys[r.IntN(3)], Op: Op(1 + r.IntN(2)), IfRevision: NoRevision, Value: make([]byte, r.IntN(6))}
			if r.IntN(2) == 0 {
				req.IfRevision = int64(r.IntN(3))
			}
			e, err := c.Prepare(req, lim)
			var ce *ConflictError
			switch {
			case err == nil:
				counts["ok"]++
				c.Apply(e)
			case errors.As(err, &ce):
				counts["conflict"]++
			default:
				counts[err.Error()]++
			}
		}
	}
	for _, want := range []error{ErrValueTooLarge, ErrTooManyKeys, ErrBucketFull, ErrStoreFull, ErrNoKey} {
		if counts[want.Error()] == 0 {
			t.Errorf("no %v in the schedules: %v", want, counts)
		}
	}
	if counts["ok"] == 0 || counts["conflict"] == 0 {
		t.Errorf("outcomes %v", counts)
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		p, k string
		want bool
	}{
		{">", "a", true}, {">", "a.b", true}, {"a.>", "a", false}, {"a.>", "a.b.c", true},
		{"*", "a", true}, {"*", "a.b", false}, {"a.*", "a.b", true}, {"a.*.c", "a.x.c", true},
		{"a.*.c", "a.x.d", false}, {"a", "a", true}, {"a", "ab", false}, {"a.b", "a", false},
	} {
		if got := Match(c.p, c.k); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.p, c.k, got, c.want)
		}
	}
}
