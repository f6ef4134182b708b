package multicast

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// TestDatagramIO_Batches: datagramIO (raw recvmmsg and sendmmsg on Linux) writes batches larger
// than one call takes, in order, and reads them back with their lengths and the sender's
// address, waiting for the first; a closed socket ends a read with net.ErrClosed.
func TestDatagramIO_Batches(t *testing.T) {
	open := func() (*net.UDPConn, *datagramIO) {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		rc, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, newDatagramIO(ipv4.NewPacketConn(c), rc, 16)
	}
	sc, sio := open()
	rcv, rio := open()
	c, _ := rcv.SyscallConn()
	if _, err := setRcvBuf(c, 4<<20); err != nil {
		t.Fatal(err)
	}
	const n = 150 // more than the 16 one call takes
	var bufs [][]byte
	for i := 0; i < n; i++ {
		bufs = append(bufs, bytes.Repeat([]byte(fmt.Sprintf("%03d", i)), 1+i%400))
	}
	dst := rcv.LocalAddr().(*net.UDPAddr).AddrPort()
	// The first read waits for a datagram.
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		time.Sleep(20 * time.Millisecond)
		if k, err := sio.writeBatch(bufs, dst); k != n || err != nil {
			t.Errorf("writeBatch: %d, %v; want %d, nil", k, err, n)
		}
	}()
	ms := make([]ipv4.Message, 8)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, MaxDatagram)}
		ms[i].OOB = make([]byte, 64)
	}
	from := sc.LocalAddr().(*net.UDPAddr).AddrPort()
	got := 0
	for got < n {
		k, err := rio.readBatch(ms)
		if err != nil || k < 1 || k > len(ms) {
			t.Fatalf("readBatch: %d, %v", k, err)
		}
		for _, m := range ms[:k] {
			if !bytes.Equal(m.Buffers[0][:m.N], bufs[got]) {
				t.Fatalf("datagram %d: %d bytes %.12q..., want %d bytes %.12q...", got, m.N, m.Buffers[0][:m.N], len(bufs[got]), bufs[got])
			}
			a, ok := m.Addr.(*net.UDPAddr)
			if !ok || a.AddrPort() != from {
				t.Fatalf("datagram %d from %v, want %v", got, m.Addr, from)
			}
			got++
		}
	}
	<-wrote
	// Closed: the waiting read ends.
	done := make(chan error, 1)
	go func() { _, err := rio.readBatch(ms); done <- err }()
	time.Sleep(20 * time.Millisecond)
	rcv.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed socket: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read waiting on a closed socket did not end")
	}
	// A write to an address nothing can send to fails with an error, not silently.
	if k, err := sio.writeBatch(bufs[:1], netip.MustParseAddrPort("0.0.0.0:0")); k != 0 || err == nil {
		t.Fatalf("write to 0.0.0.0:0: %d, %v; want 0 and an error", k, err)
	}
}
