package streamcore

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
)

// world is the simulation: a journal model (what is durable), the core,
// and the subscribers' view (what each has received).
type world struct {
	t   *testing.T
	r   *rand.Rand
	cfg Config
	// journal
	first, next uint64
	sizes       map[uint64]int64
	cursors     map[string]uint64 // committed
	// core and shell
	c       *Core
	pending []Read
	moves   []CursorMove // cursor moves submitted, not committed
	subs    map[SubID]*simSub
	nextID  SubID
	// stats
	delivered, gaps, crashes, resumes int
}

type simSub struct {
	mode     AckMode
	prefetch int
	cursor   string
	expect   uint64 // next offset it must receive (or a reported gap)
	last     int64
	held     []uint64 // unacked, ascending
}

func newWorld(t *testing.T, seed int64) *world {
	w := &world{t: t, r: rand.New(rand.NewSource(seed)), sizes: map[uint64]int64{}, cursors: map[string]uint64{}, subs: map[SubID]*simSub{}}
	w.cfg = Config{PageMessages: 1 + w.r.Intn(8), PageBytes: int64(50 + w.r.Intn(500))}
	w.restart()
	return w
}

func (w *world) count() (n, b int64) {
	for _, s := range w.sizes {
		n++
		b += s
	}
	return
}

func (w *world) restart() {
	n, b := w.count()
	first := w.first
	w.c = New(w.cfg, first, w.next, n, b, w.cursors)
	w.pending, w.moves = nil, nil
	w.subs = map[SubID]*simSub{}
}

func (w *world) take() { w.pending = append(w.pending, w.c.Take()...) }

func (w *world) append() {
	off := w.next
	size := int64(10 + w.r.Intn(100))
	w.sizes[off] = size
	w.next++
	w.c.Appended(off, size)
	w.take()
}

func (w *world) trim() {
	n, _ := w.count()
	if n == 0 {
		return
	}
	k := 1 + w.r.Intn(int(min(n, 6)))
	var removed int
	var bytes int64
	for i := 0; i < k; i++ {
		bytes += w.sizes[w.first]
		delete(w.sizes, w.first)
		w.first++
		removed++
	}
	w.c.Trimmed(w.first, removed, bytes)
	w.take()
}

var cursorNames = []string{"a", "b", "c"}

func (w *world) subscribe() {
	w.nextID++
	id := w.nextID
	s := &simSub{mode: AckMode(w.r.Intn(3)), prefetch: 1 + w.r.Intn(5), last: -1}
	var st Start
	switch w.r.Intn(4) {
	case 0:
		st.Kind = StartFirst
	case 1:
		st.Kind = StartLast
	case 2:
		st.Kind = StartNext
	case 3:
		st.Kind, st.Offset = StartOffset, uint64(w.r.Int63n(int64(w.next)+3))
	}
	if w.r.Intn(2) == 0 {
		s.mode = Client
		s.cursor = cursorNames[w.r.Intn(len(cursorNames))]
	}
	committed, hadCursor := w.cursors[s.cursor]
	pos, err := w.c.Subscribe(id, s.mode, s.prefetch, st, s.cursor)
	if err == ErrCursorInUse {
		for _, o := range w.subs {
			if o.cursor == s.cursor {
				return
			}
		}
		w.t.Fatalf("cursor %s refused but no subscriber holds it", s.cursor)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	if s.cursor != "" && hadCursor {
		w.resumes++
		if pos != min(committed, w.next) {
			w.t.Fatalf("cursor %s resumed at %d, committed at %d", s.cursor, pos, committed)
		}
	}
	s.expect = pos
	w.subs[id] = s
	w.take()
}

func (w *world) unsubscribe() {
	for id := range w.subs {
		w.c.Unsubscribe(id)
		delete(w.subs, id)
		kept := w.pending[:0]
		for _, rd := range w.pending {
			if rd.Sub != id {
				kept = append(kept, rd)
			}
		}
		w.pending = kept
		return
	}
}

// read answers a pending read with the journal as it is now.
func (w *world) read(i int) {
	rd := w.pending[i]
	w.pending = append(w.pending[:i], w.pending[i+1:]...)
	var es []Entry
	var bytes int64
	for off := max(rd.From, w.first); off < w.next && len(es) < rd.Limit; off++ {
		if bytes >= rd.MaxBytes {
			break
		}
		es = append(es, Entry{Offset: off, Size: w.sizes[off]})
		bytes += w.sizes[off]
	}
	s := w.subs[rd.Sub]
	ds := w.c.Paged(rd.Sub, es)
	if s == nil {
		if len(ds) > 0 {
			w.t.Fatalf("deliveries to an ended subscription %d", rd.Sub)
		}
		return
	}
	for _, d := range ds {
		if int64(d.Offset) <= s.last {
			w.t.Fatalf("sub %d: offset %d after %d: out of order or twice", rd.Sub, d.Offset, s.last)
		}
		if d.Gap {
			if d.GapFrom != s.expect || d.Offset <= d.GapFrom || d.Offset > w.first {
				w.t.Fatalf("sub %d: gap %d..%d reported, expected from %d, journal first %d", rd.Sub, d.GapFrom, d.Offset, s.expect, w.first)
			}
			w.gaps++
		} else if d.Offset != s.expect {
			w.t.Fatalf("sub %d: got %d, want %d (silent gap)", rd.Sub, d.Offset, s.expect)
		}
		s.expect, s.last = d.Offset+1, int64(d.Offset)
		if s.mode != Auto {
			s.held = append(s.held, d.Offset)
			if len(s.held) > s.prefetch {
				w.t.Fatalf("sub %d holds %d unacked, prefetch %d", rd.Sub, len(s.held), s.prefetch)
			}
		}
		w.delivered++
	}
	w.take()
}

func (w *world) ack() {
	for id, s := range w.subs {
		if len(s.held) == 0 {
			continue
		}
		i := w.r.Intn(len(s.held))
		off := s.held[i]
		if s.mode == Client {
			s.held = s.held[i+1:]
		} else {
			s.held = append(s.held[:i], s.held[i+1:]...)
		}
		if w.r.Intn(5) == 0 {
			if !w.c.Nack(id, off) {
				w.t.Fatalf("sub %d: nack of held offset %d refused", id, off)
			}
			w.take()
			return
		}
		mv, ok := w.c.Ack(id, off)
		if !ok {
			w.t.Fatalf("sub %d: ack of held offset %d refused", id, off)
		}
		if mv != nil {
			if s.mode == Client && mv.Offset != off+1 {
				w.t.Fatalf("cursor %s moves to %d on ack of %d", mv.Name, mv.Offset, off)
			}
			w.moves = append(w.moves, *mv)
		}
		w.take()
		return
	}
}

func (w *world) commitMoves() {
	for _, mv := range w.moves {
		if cur, ok := w.cursors[mv.Name]; ok && mv.Offset < cur {
			continue // the journal keeps the maximum
		}
		w.cursors[mv.Name] = mv.Offset
		w.c.CursorCommitted(mv.Name, mv.Offset)
	}
	w.moves = nil
}

func (w *world) step() {
	switch k := w.r.Intn(20); {
	case k < 6:
		w.append()
	case k < 7:
		w.trim()
	case k < 9:
		w.subscribe()
	case k < 10 && w.r.Intn(3) == 0:
		w.unsubscribe()
	case k < 14:
		if len(w.pending) > 0 {
			w.read(w.r.Intn(len(w.pending)))
		}
	case k < 17:
		w.ack()
	case k < 19:
		w.commitMoves()
	default:
		if w.r.Intn(10) == 0 {
			w.crashes++
			w.restart()
		}
	}
	if w.c.First() > w.next || w.c.Next() != w.next {
		w.t.Fatalf("core range [%d,%d), journal [%d,%d)", w.c.First(), w.c.Next(), w.first, w.next)
	}
	if n, b := w.count(); w.c.Count() != n || w.c.Bytes() != b {
		w.t.Fatalf("core count/bytes %d/%d, journal %d/%d", w.c.Count(), w.c.Bytes(), n, b)
	}
}

// drain acknowledges everything and answers every read until quiet: every
// subscriber must then have caught up.
func (w *world) drain() {
	for round := 0; round < 100000; round++ {
		for id, s := range w.subs {
			if len(s.held) > 0 {
				last := s.held[len(s.held)-1]
				if s.mode == Client {
					w.c.Ack(id, last)
				} else {
					for _, o := range s.held {
						w.c.Ack(id, o)
					}
				}
				s.held = nil
			}
		}
		w.take()
		if len(w.pending) == 0 {
			break
		}
		w.read(0)
	}
	ids := make([]SubID, 0, len(w.subs))
	for id := range w.subs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		s := w.subs[id]
		if s.expect == w.next {
			continue
		}
		// Everything it had not read yet was removed by retention: the gap
		// is reported with the next message, there is none yet.
		if w.first < w.next || w.c.Position(id) != w.next {
			w.t.Fatalf("sub %d stuck at %d (core position %d), stream [%d, %d)", id, s.expect, w.c.Position(id), w.first, w.next)
		}
	}
}

func TestSim(t *testing.T) {
	total := world{}
	for seed := int64(1); seed <= 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := newWorld(t, seed)
			for i := 0; i < 2000; i++ {
				w.step()
			}
			w.drain()
			total.delivered += w.delivered
			total.gaps += w.gaps
			total.crashes += w.crashes
			total.resumes += w.resumes
		})
	}
	// The simulation must exercise what it checks.
	if total.gaps == 0 || total.crashes == 0 || total.resumes == 0 || total.delivered < 10000 {
		t.Fatalf("simulation too weak: %+v", total)
	}
	t.Logf("delivered %d, gaps %d, crashes %d, cursor resumes %d", total.delivered, total.gaps, total.crashes, total.resumes)
}

func TestPlanTrim(t *testing.T) {
	head := []Aged{{0, 100, 10}, {1, 200, 10}, {2, 300, 10}, {3, 400, 10}}
	cases := []struct {
		p        Policy
		count, b int64
		now      int64
		upto     uint64
		n        int
	}{
		{Policy{MaxCount: 2}, 4, 40, 0, 2, 2},
		{Policy{MaxBytes: 25}, 4, 40, 0, 2, 2},
		{Policy{MaxAge: 150}, 4, 40, 400, 2, 2}, // ts < 250 removed
		{Policy{}, 4, 40, 1000, 0, 0},
		{Policy{MaxCount: 10}, 4, 40, 0, 0, 0},
		{Policy{MaxCount: 3, MaxAge: 150}, 4, 40, 400, 2, 2},
	}
	for i, c := range cases {
		upto, n := PlanTrim(c.p, head, c.count, c.b, c.now)
		if upto != c.upto || n != c.n {
			t.Errorf("case %d: PlanTrim = %d, %d; want %d, %d", i, upto, n, c.upto, c.n)
		}
	}
}
