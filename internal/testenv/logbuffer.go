package testenv

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer collects what a writer goroutine (a child's standard error, a
// broker's log) writes, for tests to read while it goes on. The zero value
// is ready.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the non-empty lines written so far that contain every one
// of subs (all of them without subs).
func (l *LogBuffer) Lines(subs ...string) []string {
	var out []string
	for _, ln := range strings.Split(l.String(), "\n") {
		ok := ln != ""
		for _, s := range subs {
			ok = ok && strings.Contains(ln, s)
		}
		if ok {
			out = append(out, ln)
		}
	}
	return out
}
