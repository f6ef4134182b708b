//go:build linux

package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestPipeOut: `herald listen`'s output to a pipe (raw writes while the pipe has room) delivers
// every byte in order, large writes and a full pipe included (the reader paused: the write
// waits, then completes), and reports a reader gone as EPIPE; anything but a pipe is written
// as it was.
func TestPipeOut(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := listenOutput(w)
	if _, ok := out.(*pipeOut); !ok {
		t.Fatalf("listenOutput of a pipe: %T, want *pipeOut", out)
	}
	var want bytes.Buffer
	for i := 0; i < 200; i++ {
		want.Write(bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*37%9000))
	}
	got := make(chan []byte)
	go func() {
		time.Sleep(100 * time.Millisecond) // the pipe (64 KiB) fills first: writes must wait
		b, _ := io.ReadAll(r)
		got <- b
	}()
	b := want.Bytes()
	for len(b) > 0 {
		k := min(len(b), 1+len(b)%70000)
		n, err := out.Write(b[:k])
		if n != k || err != nil {
			t.Fatalf("Write of %d bytes: %d, %v", k, n, err)
		}
		b = b[k:]
	}
	w.Close()
	if g := <-got; !bytes.Equal(g, want.Bytes()) {
		t.Fatalf("the reader got %d bytes, want the %d written, in order", len(g), want.Len())
	}

	// The reader gone: EPIPE, as os.File says it.
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	r2.Close()
	if _, err := listenOutput(w2).Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a pipe without a reader: %v, want EPIPE", err)
	}

	// Not a pipe: unchanged.
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if o := listenOutput(f); o != io.Writer(f) {
		t.Fatalf("listenOutput of a regular file: %T, want the file itself", o)
	}
}
