package appliance

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/herald-mq/herald/appliance/stomp"
)

// Direct writes: a topic message for a subscriber whose writer is idle is
// written to the subscriber's socket by the publisher's goroutine, as
// nats-server's read loop flushes its clients' buffers, instead of waking
// the subscriber's writer goroutine and waiting for it to be scheduled.
//
// queueTopic queues the message as before (the subscriber_buffer bounds,
// drop accounting and memory budget apply unchanged); when it is the first
// in the subscriber's empty output and the publisher's session is known,
// the subscriber goes on the publisher's flush list instead of its writer
// being woken. The publisher's reader flushes that list once no whole frame
// is left in its input buffer (so a burst read at once goes out in one
// write per subscriber) or after directMaxDefer frames, before a frame
// that is not a topic SEND, and before it may wait (memory budget, output
// room, journal room, session end).
//
// For each subscriber on the list, writeDirect takes the subscriber's
// socket only if its writer is not using it (TryLock of wmu), nothing is
// left of an earlier direct write (head), and everything queued is topic
// messages (no RECEIPT, ERROR or queue MESSAGE, whose writes have more to
// do): it encodes them, takes them off the output, and writes them with
// one non-blocking write(2) (rawWrite). A write that is partial or fails
// leaves its unwritten bytes as head, which the writer (woken) writes
// before anything else, under the subscriber's write_timeout as before;
// its frames weigh in outBytes until then, as a batch being written by the
// writer does. Otherwise the writer is woken as before.
//
// A flush stops writing itself once it has spent directFlushBudget; the
// subscribers left are handed to their writers. A flush of
// directHandoffMin subscribers or more hands them all to their writers.

// rawWrite makes one non-blocking write(2) of b to s's socket and returns
// how much of it went (0 on any error: the writer's own write will meet
// the error again and end the session as before). It never waits: a full
// socket buffer costs the publisher one system call. (A write with a short
// deadline instead, tried first with 50 us, armed a runtime timer per
// write; see docs/benchmarks.md.) s.wmu is held.
func (s *session) rawWrite(b []byte) int {
	if s.raw == nil {
		rc, err := s.conn.(*net.TCPConn).SyscallConn()
		if err != nil {
			return 0
		}
		s.raw = &rawWriter{rc: rc}
		s.raw.fn = s.raw.write
	}
	r := s.raw
	r.b, r.n = b, 0
	err := r.rc.Write(r.fn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The deadline of the writer's last write (write_timeout) has
		// passed; the writer sets its own before its next write (wdl).
		s.conn.SetWriteDeadline(time.Time{})
		s.wdl = time.Time{}
		err = r.rc.Write(r.fn)
	}
	if err != nil {
		r.n = 0 // the socket is closed
	}
	r.b = nil
	return r.n
}

// rawWriter holds a session's raw socket and the callback of rawWrite,
// made once (no allocation per write). Used under the session's wmu.
type rawWriter struct {
	rc syscall.RawConn
	fn func(fd uintptr) bool
	b  []byte
	n  int
}

// write is a raw write(2) on the non-blocking socket: the runtime's
// syscall entry would wake its monitor thread after every idle spell
// (rawConnReader says why that matters).
func (r *rawWriter) write(fd uintptr) bool {
	r.n = 0
	if len(r.b) == 0 {
		return true
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&r.b[0])), uintptr(len(r.b)))
		if e == syscall.EINTR {
			continue
		}
		if e == 0 {
			r.n = int(n)
		}
		return true // never wait for the socket
	}
}

// rawConnReader reads a TCP connection with raw read(2) calls on its
// non-blocking socket, waiting for input through the runtime's poller
// (syscall.RawConn.Read, which keeps the connection's read deadline), as
// net.TCPConn.Read does but for the system call entry: the runtime's
// syscall entry wakes its monitor thread (sysmon) whenever that thread
// sleeps because every P was idle. A client sending a frame every 100 us
// leaves every P idle between frames, so each frame cost another thread's
// wake-up and context switches, on a 2-core host taken from the processes
// on the latency path. A read on a non-blocking socket never blocks, so it
// needs none of what that entry does for a call that may. docs/design.md,
// "Raw socket calls on the latency path".
type rawConnReader struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool
	p     []byte
	n     int
	errno syscall.Errno
}

func newRawConnReader(c *net.TCPConn) *rawConnReader {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawConnReader{rc: rc}
	r.fn = r.read
	return r
}

func (r *rawConnReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p
	err := r.rc.Read(r.fn)
	r.p = nil
	switch {
	case err != nil:
		return 0, err // a deadline (a net.Error with Timeout) or the connection closed (net.ErrClosed)
	case r.errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", r.errno)}
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}

func (r *rawConnReader) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case 0:
			r.n, r.errno = int(n), 0
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait for the poller
		default:
			r.n, r.errno = 0, e
			return true
		}
	}
}

// directFlushBudget bounds the direct writes of one flush, over all its
// subscribers.
const directFlushBudget = 250 * time.Microsecond

// directHandoffMin: a flush of this many subscribers or more (with more
// than one core) wakes their writers instead of writing itself. Each write
// to a loopback or LAN socket costs microseconds of this goroutine's time
// (the receiving side's processing among it, on loopback), so one
// goroutine writing 20 subscribers in turn made the last wait for the 19
// before it while the other core idled: 20 subscribers at 1k msg/s had a
// p50 of 200-210 us against 145-185 us handed to their writers, which the
// scheduler spreads over the cores (nats-server's read loop always hands
// its clients' flushes to their write loops). With few subscribers the
// wake-ups cost more than the writes: 4 at 1k msg/s, 68 us written here
// against 100-117 us handed over. docs/benchmarks.md, 2026-12-06.
const directHandoffMin = 8

// Beyond these a subscriber's queued output goes to its writer: it is
// behind, and the publisher's goroutine does not copy it.
const (
	directMaxItems = 256
	directMaxBytes = 256 << 10
)

// directMaxDefer bounds how many frames a publisher's reader handles
// before it flushes: a full input buffer of small SENDs (64 KiB, some 400
// frames) would otherwise hold the first subscriber's message for all of
// them.
const directMaxDefer = 64

// isTopicSend reports whether f is a SEND to a topic (outside a
// transaction): its handling queues topic messages and does not wait for a
// subscriber.
func isTopicSend(f *stomp.Frame) bool {
	if f.Command != stomp.CmdSend {
		return false
	}
	if f.Get("transaction") != "" {
		return false
	}
	return strings.HasPrefix(f.Get("destination"), prefixTopic)
}

// deferred reports whether the frames s's reader handled left output
// waiting for flushClients.
func (s *session) deferred() bool { return len(s.flushq) > 0 || len(s.corked) > 0 }

// holdsNext reports whether s's reader has another whole frame buffered
// and may handle it before flushClients: a topic sink may then hold this
// frame's message for the next one (TopicSinkBatcher).
func (s *session) holdsNext() bool {
	return s.flushAge+1 < directMaxDefer && s.r.FrameBuffered()
}

// corkedSink notes that sink holds a message of s's reader until Flush.
func (s *session) corkedSink(sink TopicSinkBatcher) {
	for _, c := range s.corked {
		if c == sink {
			return
		}
	}
	s.corked = append(s.corked, sink)
}

// flushClients sends what the topic sinks hold for s's reader, then writes
// the output of the sessions on s's flush list, or wakes their writers.
// Reader goroutine.
func (s *session) flushClients() {
	for i, c := range s.corked {
		c.Flush()
		s.corked[i] = nil
	}
	s.corked = s.corked[:0]
	start := time.Now()
	now := start
	// A long list goes to the subscribers' writers, which run on every
	// core, rather than one write after another on this goroutine's.
	handoff := len(s.flushq) >= directHandoffMin && s.b.multiCore
	for i, t := range s.flushq {
		s.flushq[i] = nil
		if handoff || now.Sub(start) >= directFlushBudget || !t.writeDirect(&s.dbuf, now) {
			t.signal()
			continue
		}
		now = time.Now()
	}
	s.flushq = s.flushq[:0]
	s.flushAge = 0
	if cap(s.dbuf) > directMaxBytes*2 {
		s.dbuf = nil
	}
}

// writeDirect writes s's queued topic messages to its socket from the
// calling goroutine (see above); false when it cannot and s's writer must
// be woken. buf is the caller's scratch buffer.
func (s *session) writeDirect(buf *[]byte, now time.Time) bool {
	if !s.wmu.TryLock() {
		return false // the writer is writing: it will look again
	}
	s.outMu.Lock()
	if len(s.out) == 0 && s.head == nil {
		s.outMu.Unlock()
		s.wmu.Unlock()
		return true // taken by the writer meanwhile
	}
	ci := s.info.Load()
	if s.ending || s.head != nil || ci == nil || s.topicQ != len(s.out) ||
		len(s.out) > directMaxItems || s.topicB > directMaxBytes {
		s.outMu.Unlock()
		s.wmu.Unlock()
		return false
	}
	b := (*buf)[:0]
	var size int64
	for i := range s.out {
		it := &s.out[i]
		if it.shared != nil {
			b = it.shared.appendHead(b, it.sub, it.drops, ci.version)
			b = append(b, it.shared.tail(ci.version)...)
		} else {
			b = appendItem(b, it, ci.version)
		}
		size += it.size
		*it = outItem{}
	}
	n := len(s.out)
	s.out = s.out[:0]
	s.topicQ, s.topicB = 0, 0
	s.outMu.Unlock()
	*buf = b
	s.framesOut.Add(uint64(n))
	s.msgsOut.Add(uint64(n))
	s.b.stats.directWrites.Add(1)

	w := s.rawWrite(b)
	if w == len(b) {
		s.lastWrite.Store(now.UnixNano())
		s.wmu.Unlock()
		s.wrote(size)
		return true
	}
	// The rest is the writer's, before anything queued after it; it
	// weighs in outBytes until written.
	s.b.stats.directHandovers.Add(1)
	rest := append([]byte(nil), b[w:]...)
	s.outMu.Lock()
	s.head, s.headSize = rest, size
	s.outMu.Unlock()
	s.wmu.Unlock()
	s.signal()
	return true
}

// sendNow queues f (a RECEIPT) like send, but writes it from the calling
// goroutine when the writer is idle: the journal's completion of a
// connection's last outstanding batch (see receiptDone), or the reader
// answering a frame it handled (sendOwn), would otherwise wake the
// connection's writer goroutine for one small frame, tens of
// microseconds on a lone request's path. The same conditions as
// writeDirect: a plain TCP socket not in use by the writer (TryLock),
// nothing queued or left of an earlier direct write, one non-blocking
// write; what does not go becomes head for the writer, weighing in
// outBytes until written.
func (s *session) sendNow(f *stomp.Frame) {
	if !s.direct || !s.wmu.TryLock() {
		s.send(f)
		return
	}
	s.outMu.Lock()
	ci := s.info.Load()
	if s.ending || s.head != nil || len(s.out) != 0 || ci == nil {
		s.outMu.Unlock()
		s.wmu.Unlock()
		s.send(f)
		return
	}
	s.outMu.Unlock()
	b := stomp.AppendFrame(s.rbuf[:0], f, ci.version)
	s.rbuf = b
	s.framesOut.Add(1)
	s.b.stats.receiptsNow.Add(1)
	w := s.rawWrite(b)
	if w == len(b) {
		s.lastWrite.Store(time.Now().UnixNano())
		s.wmu.Unlock()
		return
	}
	s.b.stats.receiptsHanded.Add(1)
	size := frameSize(f)
	rest := append([]byte(nil), b[w:]...)
	s.outMu.Lock()
	s.head, s.headSize = rest, size
	s.outBytes += size
	s.b.mem.charge(size)
	s.outMu.Unlock()
	s.wmu.Unlock()
	s.signal()
}

// sendOwn sends a RECEIPT that s's reader made for a frame it handled
// (nothing of the connection's waits in the journal). With another whole
// frame buffered it goes through the writer, which writes the receipts of
// a pipelining client together while the reader goes on. Else the client
// most likely waits for it: the reader first writes what the frames it
// handled left for idle subscribers (flushClients: they were sent first),
// then writes the RECEIPT itself (sendNow) instead of waking the writer
// goroutine for one small frame, whose wake-up (another thread started
// to look for the runnable goroutine) was most of heraldd's CPU per
// request and tens of microseconds of the round trip. Reader goroutine.
func (s *session) sendOwn(r *stomp.Frame) {
	if s.r.FrameBuffered() {
		s.send(r)
		return
	}
	if s.deferred() {
		s.flushClients()
	}
	s.sendNow(r)
}

// receiptDone sends a RECEIPT from the completion of journal batch b: at
// once from the completing goroutine when b was committed alone with
// nothing waiting behind it (Batch.Lone: the journal's writer runs this
// completion itself) and it is the connection's last outstanding batch
// (the client waits for it); else through the writer as before, which
// writes the receipts of a busy connection's many batches together. So a
// completion writes at most one RECEIPT itself: the completions of a group
// commit only signal.
func (s *session) receiptDone(b *Batch, r *stomp.Frame) {
	if b.Lone && s.jpending.Load() == 1 {
		s.sendNow(r)
		return
	}
	s.send(r)
}
