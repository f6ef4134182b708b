//go:build linux

package main

import (
	"io"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pipeOut is `herald listen`'s standard output when it is a pipe (piped into another
// program, the usual way to consume it): writes of at most PIPE_BUF bytes each, made with raw
// write(2) calls once poll(2) says the pipe has room, so that none can block.
//
// Why: the runtime's system call entry wakes its monitor thread (sysmon) whenever that thread
// sleeps because every P was idle; with the multicast socket read by raw calls
// (multicast/rawio_linux.go) the line written for each message was the call that woke it, a
// wake-up of another thread per message at a paced 10,000/s. When the pipe is full (the reader
// is behind) the write goes through os.File as before: the runtime hands the P on while it
// waits. docs/design.md, "Raw socket calls on the latency path".
type pipeOut struct {
	f  *os.File
	fd uintptr
}

// pipeBuf is PIPE_BUF: a write of at most this much to a pipe with room does not block.
const pipeBuf = 4096

// listenOutput returns w, or a pipeOut for it when it is a pipe.
func listenOutput(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return w
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return w
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return w
	}
	var fd uintptr
	if rc.Control(func(s uintptr) { fd = s }) != nil {
		return w
	}
	return &pipeOut{f: f, fd: fd}
}

func (p *pipeOut) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		if !p.room() {
			k, err := p.f.Write(b[n:])
			return n + k, err
		}
		k := min(len(b)-n, pipeBuf)
		w, _, e := syscall.RawSyscall(syscall.SYS_WRITE, p.fd, uintptr(unsafe.Pointer(&b[n])), uintptr(k))
		switch e {
		case 0:
			n += int(w)
		case syscall.EINTR:
		default: // EAGAIN (a non-blocking pipe), EPIPE, ...: os.File's write says it as usual
			k, err := p.f.Write(b[n:])
			return n + k, err
		}
	}
	return n, nil
}

// room reports whether the pipe can take pipeBuf bytes now (poll(2) without waiting: POLLOUT
// on a pipe means a free buffer slot of a page).
func (p *pipeOut) room() bool {
	fds := [1]unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLOUT}}
	n, _, e := syscall.RawSyscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&fds[0])), 1, 0)
	return e == 0 && n == 1 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) == 0 && fds[0].Revents&unix.POLLOUT != 0
}
