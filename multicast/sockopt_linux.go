//go:build linux

package multicast

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// receiverControl prepares a receiver socket before bind: address reuse so several receivers on a
// host share the group, only the joined groups (IP_MULTICAST_ALL off), drop counting.
func receiverControl(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		s := int(fd)
		if serr = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
			return
		}
		if serr = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
			return
		}
		_ = unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
		_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
	})
	return errors.Join(err, serr)
}

// setRcvBuf asks for n bytes of receive buffer (SO_RCVBUFFORCE first, which root may use past
// net.core.rmem_max) and returns what the kernel granted (it reports double; we halve it).
func setRcvBuf(c syscall.RawConn, n int) (int, error) {
	var got int
	var serr error
	err := c.Control(func(fd uintptr) {
		s := int(fd)
		if unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) != nil {
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, n)
		}
		got, serr = unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF)
		got /= 2
	})
	return got, errors.Join(err, serr)
}

// rxqOverflow returns the kernel's count of datagrams dropped on this socket, from an SO_RXQ_OVFL
// control message, and whether one was present.
func rxqOverflow(oob []byte) (uint32, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_RXQ_OVFL && len(m.Data) >= 4 {
			return uint32(m.Data[0]) | uint32(m.Data[1])<<8 | uint32(m.Data[2])<<16 | uint32(m.Data[3])<<24, true
		}
	}
	return 0, false
}

// unreadDatagram reports whether a datagram waits unread in the socket (SIOCINQ: the size of
// the next one, 0 when none).
func unreadDatagram(c syscall.RawConn) bool {
	n := 0
	c.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}
