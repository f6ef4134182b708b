//go:build linux

package multicast

import (
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// datagramIO reads and writes batches of datagrams with raw recvmmsg(2) and sendmmsg(2) on the
// non-blocking socket, waiting for readiness through the runtime's poller (syscall.RawConn),
// as package net does.
//
// Why not the usual syscall entry (what ipv4.PacketConn's ReadBatch and WriteBatch use): it
// wakes the runtime's monitor thread (sysmon) whenever that thread sleeps because every P was
// idle. A paced publisher (10,000 messages/s, a message every 100 µs) leaves every P idle
// between messages, so each message cost a futex wake-up of another thread and its context
// switches, on top of the work, in the sender and in every receiver; on a 2-core host that
// thread took the CPU from the processes on the latency path. These calls never block (the
// socket is non-blocking: EAGAIN means wait for the poller), so they need none of what the
// syscall entry does for a call that may block. docs/design.md, "Raw datagram syscalls".
//
// A datagramIO is used by one goroutine at a time.
type datagramIO struct {
	rc    syscall.RawConn
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	addrs []net.UDPAddr // what readBatch reports as each message's Addr (reused: valid until the next call)

	k     int // entries given to this call
	n     int // entries the call handled
	errno syscall.Errno
	recvF func(fd uintptr) bool
	sendF func(fd uintptr) bool
}

func newDatagramIO(_ *ipv4.PacketConn, rc syscall.RawConn, max int) *datagramIO {
	d := &datagramIO{rc: rc, hdrs: make([]unix.Mmsghdr, max), iovs: make([]unix.Iovec, max),
		names: make([]unix.RawSockaddrInet4, max), addrs: make([]net.UDPAddr, max)}
	for i := range d.addrs {
		d.addrs[i].IP = make(net.IP, 4)
	}
	d.recvF, d.sendF = d.recv, d.send
	return d
}

// readBatch reads at least one datagram (waiting for it) and at most len(ms), into each
// message's Buffers[0] and OOB; it sets N, NN, Flags and Addr (a *net.UDPAddr valid until the
// next call). Like ipv4.PacketConn.ReadBatch.
func (d *datagramIO) readBatch(ms []ipv4.Message) (int, error) {
	d.k = min(len(ms), len(d.hdrs))
	for i := 0; i < d.k; i++ {
		b, oob := ms[i].Buffers[0], ms[i].OOB
		h := &d.hdrs[i].Hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&d.names[i])), Namelen: unix.SizeofSockaddrInet4}
		d.iovs[i] = unix.Iovec{}
		if len(b) > 0 {
			d.iovs[i].Base = &b[0]
			d.iovs[i].SetLen(len(b))
		}
		h.Iov = &d.iovs[i]
		h.SetIovlen(1)
		if len(oob) > 0 {
			h.Control = &oob[0]
			h.SetControllen(len(oob))
		}
		d.hdrs[i].Len = 0
	}
	err := d.rc.Read(d.recvF)
	if err != nil {
		return 0, err
	}
	if d.errno != 0 {
		return 0, &net.OpError{Op: "read", Net: "udp", Err: d.errno}
	}
	for i := 0; i < d.n; i++ {
		m, h := &ms[i], &d.hdrs[i]
		m.N, m.NN, m.Flags = int(h.Len), int(h.Hdr.Controllen), int(h.Hdr.Flags)
		a := &d.addrs[i]
		copy(a.IP, d.names[i].Addr[:])
		p := (*[2]byte)(unsafe.Pointer(&d.names[i].Port))
		a.Port = int(p[0])<<8 | int(p[1])
		m.Addr = a
	}
	return d.n, nil
}

func (d *datagramIO) recv(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&d.hdrs[0])), uintptr(d.k), unix.MSG_DONTWAIT, 0, 0)
		if done, again := d.result(n, e); !again {
			return done
		}
	}
}

// result takes a call's outcome: done (false: wait for the poller, EAGAIN) and again (EINTR).
func (d *datagramIO) result(n uintptr, e syscall.Errno) (done, again bool) {
	switch e {
	case 0:
		d.n, d.errno = int(n), 0
		return true, false
	case unix.EINTR:
		return false, true
	case unix.EAGAIN:
		return false, false
	default:
		d.n, d.errno = 0, e
		return true, false
	}
}

// writeBatch writes bufs to dst, at most len(hdrs) per call, waiting for room in the socket;
// it returns how many went (all unless err).
func (d *datagramIO) writeBatch(bufs [][]byte, dst netip.AddrPort) (int, error) {
	d.names[0] = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: dst.Addr().As4()}
	p := (*[2]byte)(unsafe.Pointer(&d.names[0].Port))
	p[0], p[1] = byte(dst.Port()>>8), byte(dst.Port())
	sent := 0
	for sent < len(bufs) {
		d.k = min(len(bufs)-sent, len(d.hdrs))
		for i := 0; i < d.k; i++ {
			b := bufs[sent+i]
			d.iovs[i] = unix.Iovec{}
			if len(b) > 0 {
				d.iovs[i].Base = &b[0]
				d.iovs[i].SetLen(len(b))
			}
			d.hdrs[i] = unix.Mmsghdr{Hdr: unix.Msghdr{Name: (*byte)(unsafe.Pointer(&d.names[0])), Namelen: unix.SizeofSockaddrInet4, Iov: &d.iovs[i]}}
			d.hdrs[i].Hdr.SetIovlen(1)
		}
		if err := d.rc.Write(d.sendF); err != nil {
			return sent, err
		}
		if d.errno != 0 {
			return sent, &net.OpError{Op: "write", Net: "udp", Err: d.errno}
		}
		sent += d.n
	}
	return sent, nil
}

// rawSendMax: a sendmmsg of more datagrams than this goes through the runtime's syscall entry.
// Each datagram's delivery (to local receivers, over a veth) can run inside the call, so a full
// batch may take milliseconds; through the entry, the runtime hands this goroutine's P to other
// goroutines meanwhile (a raw call would hold it). Batches that large come from a busy writer,
// when the monitor thread is awake anyway; the latency path sends one or two.
const rawSendMax = 4

func (d *datagramIO) send(fd uintptr) bool {
	for {
		var n uintptr
		var e syscall.Errno
		if d.k > rawSendMax {
			n, _, e = unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&d.hdrs[0])), uintptr(d.k), unix.MSG_DONTWAIT, 0, 0)
		} else {
			n, _, e = unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&d.hdrs[0])), uintptr(d.k), unix.MSG_DONTWAIT, 0, 0)
		}
		if done, again := d.result(n, e); !again {
			return done
		}
	}
}
