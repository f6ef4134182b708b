package stomp_test

import (
	"fmt"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// Budget: decoding and encoding must stay far below the cost of a syscall per
// frame (about 1 µs): a 1 KiB SEND should decode in well under 1 µs with two
// allocations besides the headers, and encode without allocating.

// loopReader serves buf over and over, so one Reader can decode b.N frames.
type loopReader struct {
	buf []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.buf[l.off:])
	l.off = (l.off + n) % len(l.buf)
	return n, nil
}

func benchFrame(size int) *stomp.Frame {
	f := stomp.NewFrame(stomp.CmdSend,
		"destination", "/queue/graphite",
		"receipt", "r-123456",
		"content-type", "text/plain",
		"persistent", "true")
	f.Body = make([]byte, size)
	for i := range f.Body {
		f.Body[i] = 'a' + byte(i%26)
	}
	return f
}

func BenchmarkReader(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, v := range []string{stomp.V10, stomp.V12} {
			b.Run(fmt.Sprintf("body=%d/v=%s", size, v), func(b *testing.B) {
				one := stomp.Encode(benchFrame(size), v)
				var stream []byte
				for len(stream) < 256<<10 {
					stream = append(stream, one...)
				}
				r := stomp.NewReader(&loopReader{buf: stream}, stomp.Limits{})
				r.SetVersion(v)
				b.SetBytes(int64(len(one)))
				b.ReportAllocs()
				for b.Loop() {
					f, err := r.ReadFrame()
					if err != nil || f == nil {
						b.Fatalf("got %v, %v, want a frame", f, err)
					}
				}
			})
		}
	}
}

func BenchmarkAppendFrame(b *testing.B) {
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("body=%d", size), func(b *testing.B) {
			f := benchFrame(size)
			dst := stomp.AppendFrame(nil, f, stomp.V12)
			b.SetBytes(int64(len(dst)))
			b.ReportAllocs()
			for b.Loop() {
				dst = stomp.AppendFrame(dst[:0], f, stomp.V12)
			}
		})
	}
}
