package admin

import (
	"net"
	"syscall"
)

// peerUID returns the user id of the process at the other end of a unix
// socket connection, or -1.
func peerUID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return -1
	}
	uid := -1
	rc.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			uid = int(cred.Uid)
		}
	})
	return uid
}
