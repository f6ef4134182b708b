package stomp_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/herald-mq/herald/appliance/stomp"
)

// fuzzVersion maps the fuzzer's version byte to the Reader's version.
func fuzzVersion(b uint8) string {
	return [...]string{"", stomp.V10, stomp.V11, stomp.V12}[b%4]
}

// normalize returns what f must look like after AppendFrame and ReadFrame in
// version v: content-length headers are dropped (AppendFrame writes the true
// length last), and so are the headers the version cannot carry (Writable).
func normalize(f *stomp.Frame, v string) *stomp.Frame {
	g := &stomp.Frame{Command: f.Command, Body: f.Body}
	for _, h := range f.Headers {
		if h.Key == "content-length" || !stomp.Writable(h, v, f.Command) {
			continue
		}
		g.Headers = append(g.Headers, h)
	}
	return g
}

// FuzzReader feeds arbitrary bytes to a Reader with small limits. Decoding
// must never panic, must fail only with *stomp.Error, io.EOF or
// io.ErrUnexpectedEOF, and every frame it returns must survive AppendFrame
// and a second decode unchanged (up to normalize).
func FuzzReader(f *testing.F) {
	f.Add([]byte("SEND\ndestination:/queue/a\n\nhello\x00"), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, vb uint8) {
		v := fuzzVersion(vb)
		limits := stomp.Limits{MaxHeaderBytes: 1024, MaxHeaders: 16, MaxHeaderLine: 256, MaxBody: 4096}
		r := stomp.NewReader(bytes.NewReader(data), limits)
		r.SetVersion(v)
		for range len(data) + 1 {
			f, err := r.ReadFrame()
			if err != nil {
				var se *stomp.Error
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &se) {
					t.Fatalf("got error %v (%T), want *stomp.Error, io.EOF or io.ErrUnexpectedEOF", err, err)
				}
				if se != nil && se.Reason == "" {
					t.Fatalf("got *stomp.Error with an empty reason")
				}
				return
			}
			if f == nil {
				continue
			}
			if len(f.Body) > limits.MaxBody || len(f.Headers) > limits.MaxHeaders {
				t.Fatalf("got a frame over the limits: %d body bytes, %d headers", len(f.Body), len(f.Headers))
			}
			enc := stomp.AppendFrame(nil, f, v)
			r2 := stomp.NewReader(bytes.NewReader(enc), stomp.Limits{})
			r2.SetVersion(v)
			g, err := r2.ReadFrame()
			if err != nil || g == nil {
				t.Fatalf("re-decoding %q: got %v, %v, want a frame", enc, g, err)
			}
			if want := normalize(f, v); !sameFrame(normalize(g, v), want) {
				t.Fatalf("round trip of %q: got %q, want %q", enc, stomp.Encode(g, v), stomp.Encode(want, v))
			}
			if again := stomp.AppendFrame(nil, g, v); !bytes.Equal(again, enc) {
				t.Fatalf("second encoding: got %q, want %q", again, enc)
			}
			if extra, err := r2.ReadFrame(); err != io.EOF {
				t.Fatalf("after the re-decoded frame: got %v, %v, want io.EOF", extra, err)
			}
		}
		t.Fatalf("more frames than input bytes")
	})
}
