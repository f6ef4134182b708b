package appliance_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/herald-mq/herald/appliance"
)

// FuzzWebSocketStream: whatever bytes, cut into whatever text and binary
// messages (empty ones too), the web listener's adapter reads back exactly
// the bytes in order, then the end of the stream at the close.
func FuzzWebSocketStream(f *testing.F) {
	got := make(chan []byte, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(-1)
		nc := appliance.NewWebSocketConn(c, &net.TCPAddr{}, &net.TCPAddr{})
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(nc)
		if err != nil {
			b = append([]byte("ERROR "), err.Error()...)
		}
		nc.Close()
		got <- b
	})}
	go srv.Serve(ln)
	f.Cleanup(func() { srv.Close() })
	url := "ws://" + ln.Addr().String() + "/"

	f.Add([]byte("CONNECT\naccept-version:1.2\n\n\x00"), []byte{3, 0, 200}, uint8(0))
	f.Add([]byte("SEND\ndestination:/queue/a\ncontent-length:3\n\na\x00b\x00\n\n"), []byte{1, 1, 1, 40}, uint8(5))
	f.Add([]byte("\xff\xfe not utf-8 \xc3"), []byte{2}, uint8(255))
	f.Add(bytes.Repeat([]byte("x"), 70000), []byte{0, 255, 255}, uint8(1))
	f.Fuzz(func(t *testing.T, data, cuts []byte, binMask uint8) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		rest := data
		for i := 0; len(rest) > 0 || i < len(cuts); i++ {
			n := len(rest)
			if i < len(cuts) {
				n = min(int(cuts[i])*int(cuts[i]), len(rest)) // up to 64 KiB pieces
			}
			typ := websocket.MessageText
			if binMask&(1<<(i%8)) != 0 {
				typ = websocket.MessageBinary
			}
			if err := c.Write(ctx, typ, rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		c.Close(websocket.StatusNormalClosure, "")
		select {
		case b := <-got:
			if !bytes.Equal(b, data) {
				if len(b) < 200 {
					t.Fatalf("read back %q, want %q", b, data)
				}
				t.Fatalf("read back %d bytes, want %d", len(b), len(data))
			}
		case <-ctx.Done():
			t.Fatal("the server side did not read the stream to its end")
		}
	})
}
