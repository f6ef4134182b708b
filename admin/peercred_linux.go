package admin

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// peerCred returns the credentials of the process at the other end of a
// unix socket connection (SO_PEERCRED); uid and pid are -1 when unknown.
func peerCred(c net.Conn) peerInfo {
	p := peerInfo{uid: -1, pid: -1}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return p
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return p
	}
	rc.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			p.uid, p.pid = int(cred.Uid), int(cred.Pid)
		}
	})
	// In a user namespace (systemd's PrivateUsers=yes maps only root and
	// the service's own user) the kernel gives a uid that is not mapped
	// there as the overflow uid, 65534: every such caller would be logged
	// as "nobody". A uid outside the namespace's map is that.
	if p.uid >= 0 && !uidMapped(uint32(p.uid)) {
		p.unmapped = true
	}
	return p
}

var (
	uidMapOnce sync.Once
	uidMap     [][3]uint64 // inside, outside, count; nil: all uids are mapped (or unknown)
)

// uidMapped reports whether uid is mapped in this process's user namespace
// (/proc/self/uid_map; readable under ProcSubset=pid).
func uidMapped(uid uint32) bool {
	uidMapOnce.Do(func() { uidMap = readUIDMap("/proc/self/uid_map") })
	if uidMap == nil {
		return true
	}
	for _, r := range uidMap {
		if uint64(uid) >= r[0] && uint64(uid) < r[0]+r[2] {
			return true
		}
	}
	return false
}

func readUIDMap(path string) [][3]uint64 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var m [][3]uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			return nil
		}
		var r [3]uint64
		for i, s := range fs {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil
			}
			r[i] = v
		}
		m = append(m, r)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
