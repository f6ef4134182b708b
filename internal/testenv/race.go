package testenv

import (
	"bytes"
	"io"
	"sync"
	"testing"
)

// GoBuildFlags are the flags for `go build` of a binary a test runs: -race
// when the test itself runs under the race detector, so that the binary's
// goroutines are checked too.
func GoBuildFlags() []string {
	if Race {
		return []string{"-race"}
	}
	return nil
}

// raceMarker starts every report of the race detector.
var raceMarker = []byte("WARNING: DATA RACE")

// RaceWatch returns a writer for a child process's standard error that
// passes everything on to w and fails t, when t ends, if the child reported
// a data race. Children built with -race (GoBuildFlags, or the test binary
// itself) report races there and go on running, so nothing else would
// notice. t's cleanups registered later (killing and waiting for the child)
// run first, so the whole output is seen.
func RaceWatch(t testing.TB, w io.Writer) io.Writer {
	rw := &raceWatcher{w: w}
	t.Cleanup(func() {
		rw.mu.Lock()
		defer rw.mu.Unlock()
		if rw.seen {
			t.Errorf("a child process reported a data race (WARNING: DATA RACE in its output above)")
		}
	})
	return rw
}

type raceWatcher struct {
	w    io.Writer
	mu   sync.Mutex
	tail []byte // the end of the output so far, for a marker split across writes
	seen bool
}

func (rw *raceWatcher) Write(p []byte) (int, error) {
	rw.mu.Lock()
	if !rw.seen {
		buf := append(rw.tail, p...)
		if bytes.Contains(buf, raceMarker) {
			rw.seen = true
		}
		keep := min(len(buf), len(raceMarker)-1)
		rw.tail = append(rw.tail[:0], buf[len(buf)-keep:]...)
	}
	rw.mu.Unlock()
	return rw.w.Write(p)
}
