//go:build !linux

package multicast

import (
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"
)

// datagramIO: ipv4.PacketConn's batches (rawio_linux.go says why Linux does otherwise).
type datagramIO struct {
	pc   *ipv4.PacketConn
	msgs []ipv4.Message
}

func newDatagramIO(pc *ipv4.PacketConn, _ syscall.RawConn, max int) *datagramIO {
	return &datagramIO{pc: pc, msgs: make([]ipv4.Message, 0, max)}
}

func (d *datagramIO) readBatch(ms []ipv4.Message) (int, error) { return d.pc.ReadBatch(ms, 0) }

func (d *datagramIO) writeBatch(bufs [][]byte, dst netip.AddrPort) (int, error) {
	to := net.UDPAddrFromAddrPort(dst)
	sent := 0
	for sent < len(bufs) {
		k := min(len(bufs)-sent, cap(d.msgs))
		d.msgs = d.msgs[:0]
		for _, b := range bufs[sent : sent+k] {
			d.msgs = append(d.msgs, ipv4.Message{Buffers: [][]byte{b}, Addr: to})
		}
		n, err := d.pc.WriteBatch(d.msgs, 0)
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}
