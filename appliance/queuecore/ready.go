package queuecore

import (
	"container/heap"
	"sort"
)

// readyIndex holds the ready messages in memory. elig is what dispatch may
// take now, in ID order: every ungrouped ready message and the first ready
// message of each group that has nothing in flight or in back-off. The
// other ready messages of a group wait in that group's own list, so a
// blocked group costs dispatch nothing however long it is.
type readyIndex struct {
	elig      []*Msg
	groups    map[string]*group
	n         int   // ready messages, eligible or not
	bytes     int64 // their Size
	eligBytes int64 // Size of the eligible ones
}

type group struct {
	held  int    // messages of the group in flight, in back-off or leaving
	ready []*Msg // ready messages of the group, in ID order
}

func insertSorted(s []*Msg, m *Msg) []*Msg {
	n := len(s)
	if n == 0 || s[n-1].ID < m.ID {
		return append(s, m)
	}
	i := sort.Search(n, func(i int) bool { return s[i].ID >= m.ID })
	s = append(s, nil)
	copy(s[i+1:], s[i:])
	s[i] = m
	return s
}

func removeSorted(s []*Msg, m *Msg) ([]*Msg, bool) {
	i := sort.Search(len(s), func(i int) bool { return s[i].ID >= m.ID })
	if i < len(s) && s[i] == m {
		copy(s[i:], s[i+1:])
		s[len(s)-1] = nil
		return s[:len(s)-1], true
	}
	return s, false
}

// eligIn and eligOut keep eligBytes with the eligible list.
func (r *readyIndex) eligIn(m *Msg) {
	r.elig = insertSorted(r.elig, m)
	r.eligBytes += m.Size
}

func (r *readyIndex) eligOut(m *Msg) {
	var ok bool
	if r.elig, ok = removeSorted(r.elig, m); ok {
		r.eligBytes -= m.Size
	}
}

func (r *readyIndex) group(g string) *group {
	gr := r.groups[g]
	if gr == nil {
		if r.groups == nil {
			r.groups = map[string]*group{}
		}
		gr = &group{}
		r.groups[g] = gr
	}
	return gr
}

func (r *readyIndex) gc(g string, gr *group) {
	if gr.held == 0 && len(gr.ready) == 0 {
		delete(r.groups, g)
	}
}

// add makes m ready.
func (r *readyIndex) add(m *Msg) {
	m.state = stReady
	r.n++
	r.bytes += m.Size
	if m.Group == "" {
		r.eligIn(m)
		return
	}
	gr := r.group(m.Group)
	old := (*Msg)(nil)
	if len(gr.ready) > 0 {
		old = gr.ready[0]
	}
	gr.ready = insertSorted(gr.ready, m)
	if gr.held == 0 && gr.ready[0] == m {
		if old != nil {
			r.eligOut(old)
		}
		r.eligIn(m)
	}
}

// remove takes ready message m out (purge, requeue).
func (r *readyIndex) remove(m *Msg) {
	r.n--
	r.bytes -= m.Size
	m.state = stNone
	if m.Group == "" {
		r.eligOut(m)
		return
	}
	gr := r.groups[m.Group]
	head := gr.ready[0] == m
	gr.ready, _ = removeSorted(gr.ready, m)
	if head && gr.held == 0 {
		r.eligOut(m)
		if len(gr.ready) > 0 {
			r.eligIn(gr.ready[0])
		}
	}
	r.gc(m.Group, gr)
}

// pop takes the first eligible message; its group (if any) becomes held.
func (r *readyIndex) pop() *Msg {
	// Reslice rather than shift: dispatch pops from the front all the
	// time, and the list holds up to a window of messages.
	m := r.elig[0]
	r.elig[0] = nil
	r.elig = r.elig[1:]
	r.n--
	r.bytes -= m.Size
	r.eligBytes -= m.Size
	m.state = stNone
	if m.Group != "" {
		gr := r.groups[m.Group]
		gr.ready[0] = nil
		gr.ready = gr.ready[1:]
		gr.held++
	}
	return m
}

// hold blocks group g (a message of it left the ready index another way).
func (r *readyIndex) hold(g string) {
	gr := r.group(g)
	if gr.held == 0 && len(gr.ready) > 0 {
		r.eligOut(gr.ready[0])
	}
	gr.held++
}

// release unblocks group g once: its first ready message becomes eligible
// when nothing else holds it.
func (r *readyIndex) release(g string) {
	gr := r.groups[g]
	if gr == nil {
		return
	}
	if gr.held--; gr.held <= 0 {
		gr.held = 0
		if len(gr.ready) > 0 {
			r.eligIn(gr.ready[0])
		}
	}
	r.gc(g, gr)
}

func (r *readyIndex) held(g string) int {
	if gr := r.groups[g]; gr != nil {
		return gr.held
	}
	return 0
}

// delayHeap orders messages by NotBefore, then ID.
type delayHeap []*Msg

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	if h[i].NotBefore != h[j].NotBefore {
		return h[i].NotBefore < h[j].NotBefore
	}
	return h[i].ID < h[j].ID
}
func (h delayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *delayHeap) Push(x any) {
	m := x.(*Msg)
	m.heapIdx = len(*h)
	*h = append(*h, m)
}
func (h *delayHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return x
}

func (h *delayHeap) remove(m *Msg) { heap.Remove(h, m.heapIdx) }
