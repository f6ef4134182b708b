//go:build !linux

package multicast

import "syscall"

func receiverControl(network, address string, c syscall.RawConn) error { return nil }

func setRcvBuf(c syscall.RawConn, n int) (int, error) { return 0, nil }

func rxqOverflow(oob []byte) (uint32, bool) { return 0, false }

// unreadDatagram: not known on this system (false).
func unreadDatagram(c syscall.RawConn) bool { return false }
