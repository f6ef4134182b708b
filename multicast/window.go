package multicast

import "time"

// window is the sender's retransmit window: a ring of encoded datagrams (unsigned, without tag)
// indexed by sequence, bounded in bytes. The newest datagram is always kept.
type window struct {
	max   int
	bytes int
	first uint64      // sequence of bufs[head]
	bufs  [][]byte    // ring storage
	at    []time.Time // when each datagram of bufs was sent (history requests by age)
	head  int
	n     int
	free  [][]byte // evicted buffers for reuse
	dead  [][]byte // evicted buffers that may still be queued for sending
}

// maxFree is how many evicted buffers the window keeps for reuse (about 1.4 MB of MTU-sized
// ones): enough for the fragments of a 1 MB message between two Ready calls.
const maxFree = 1024

// recycle makes evicted buffers reusable: call it once nothing refers to them any more.
func (w *window) recycle() {
	for _, b := range w.dead {
		if len(w.free) < maxFree {
			w.free = append(w.free, b)
		}
	}
	clear(w.dead)
	w.dead = w.dead[:0]
}

func newWindow(maxBytes int, first uint64) *window {
	return &window{max: maxBytes, first: first, bufs: make([][]byte, 64), at: make([]time.Time, 64)}
}

// next is the sequence the next push gets.
func (w *window) next() uint64 { return w.first + uint64(w.n) }

// trailing is the oldest sequence held (next() when empty).
func (w *window) trailing() uint64 { return w.first }

// buffer returns an empty buffer to build a datagram in.
func (w *window) buffer(size int) []byte {
	if k := len(w.free); k > 0 {
		b := w.free[k-1]
		w.free = w.free[:k-1]
		if cap(b) >= size {
			return b[:0]
		}
	}
	return make([]byte, 0, size)
}

// push appends the datagram with sequence next(), sent at now.
func (w *window) push(b []byte, now time.Time) {
	if w.n == len(w.bufs) {
		nb := make([][]byte, 2*len(w.bufs))
		na := make([]time.Time, 2*len(w.bufs))
		for i := 0; i < w.n; i++ {
			nb[i] = w.bufs[(w.head+i)%len(w.bufs)]
			na[i] = w.at[(w.head+i)%len(w.bufs)]
		}
		w.bufs, w.at, w.head = nb, na, 0
	}
	w.bufs[(w.head+w.n)%len(w.bufs)] = b
	w.at[(w.head+w.n)%len(w.bufs)] = now
	w.n++
	w.bytes += cap(b)
	for w.bytes > w.max && w.n > 1 {
		old := w.bufs[w.head]
		w.bufs[w.head] = nil
		w.head = (w.head + 1) % len(w.bufs)
		w.n--
		w.first++
		w.bytes -= cap(old)
		if len(w.dead) < maxFree {
			w.dead = append(w.dead, old)
		}
	}
}

// get returns the datagram with sequence seq, or nil when it is outside the window.
func (w *window) get(seq uint64) []byte {
	if seq < w.first || seq >= w.next() {
		return nil
	}
	return w.bufs[(w.head+int(seq-w.first))%len(w.bufs)]
}

// sentAt returns when the datagram with sequence seq was sent (zero outside the window).
func (w *window) sentAt(seq uint64) time.Time {
	if seq < w.first || seq >= w.next() {
		return time.Time{}
	}
	return w.at[(w.head+int(seq-w.first))%len(w.bufs)]
}
