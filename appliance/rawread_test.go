package appliance

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestRawConnReader_LikeTCPConnRead: the session's raw reader (raw read(2) calls, waiting
// through the poller) gives what net.TCPConn.Read gives: the bytes, a read deadline as a
// net.Error timeout, io.EOF on the peer's close, net.ErrClosed after a local Close, and
// ECONNRESET on a reset; each is what session.readError tells apart.
func TestRawConnReader_LikeTCPConnRead(t *testing.T) {
	pair := func(t *testing.T) (server *net.TCPConn, client *net.TCPConn) {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(); c.Close() })
		return s, c
	}
	readers := map[string]func(*net.TCPConn) io.Reader{
		"net.TCPConn":   func(c *net.TCPConn) io.Reader { return c },
		"rawConnReader": func(c *net.TCPConn) io.Reader { return newRawConnReader(c) },
	}
	for name, mk := range readers {
		t.Run(name, func(t *testing.T) {
			s, c := pair(t)
			r := mk(s)
			// Bytes, waiting for them.
			go func() { time.Sleep(20 * time.Millisecond); c.Write([]byte("hello")) }()
			buf := make([]byte, 64)
			if n, err := r.Read(buf); err != nil || string(buf[:n]) != "hello" {
				t.Fatalf("read %q, %v; want hello", buf[:n], err)
			}
			// A deadline.
			s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			_, err := r.Read(buf)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("past the deadline: %v, want a net.Error timeout", err)
			}
			s.SetReadDeadline(time.Time{})
			// The peer's close after more bytes: the bytes, then EOF.
			c.Write([]byte("bye"))
			c.Close()
			if n, err := io.ReadFull(r, buf[:3]); err != nil || string(buf[:n]) != "bye" {
				t.Fatalf("read %q, %v; want bye", buf[:n], err)
			}
			if n, err := r.Read(buf); n != 0 || err != io.EOF {
				t.Fatalf("after the peer's close: %d, %v; want 0, io.EOF", n, err)
			}
			// A local close.
			s.Close()
			if _, err := r.Read(buf); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("after Close: %v, want net.ErrClosed", err)
			}
			// A reset.
			s2, c2 := pair(t)
			r2 := mk(s2)
			s2.Write([]byte("unread by the client"))
			time.Sleep(10 * time.Millisecond)
			c2.SetLinger(0)
			c2.Close() // unread data and linger 0: RST
			var rerr error
			for i := 0; i < 100 && rerr == nil; i++ {
				_, rerr = r2.Read(buf)
			}
			if !errors.Is(rerr, syscall.ECONNRESET) {
				t.Fatalf("after a reset: %v, want ECONNRESET", rerr)
			}
		})
	}
}
