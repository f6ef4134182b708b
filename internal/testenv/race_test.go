package testenv

import (
	"bytes"
	"testing"
)

// fakeTB records whether the watcher failed the test.
type fakeTB struct {
	testing.TB
	cleanups []func()
	failed   bool
}

func (f *fakeTB) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Errorf(string, ...any) { f.failed = true }
func (f *fakeTB) Helper()               {}
func (f *fakeTB) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestRaceWatch(t *testing.T) {
	for _, tt := range []struct {
		name   string
		writes []string
		want   bool
	}{
		{"clean", []string{"hello\n", "WARNING: something else\n"}, false},
		{"one write", []string{"==================\nWARNING: DATA RACE\nWrite at ..."}, true},
		{"split marker", []string{"x WARNING: DA", "TA RACE\n"}, true},
		{"split in three", []string{"WARN", "ING: DATA R", "ACE"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ft := &fakeTB{TB: t}
			var out bytes.Buffer
			w := RaceWatch(ft, &out)
			var all string
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("write: %d, %v", n, err)
				}
				all += s
			}
			if out.String() != all {
				t.Fatalf("passed on %q, want %q", out.String(), all)
			}
			ft.end()
			if ft.failed != tt.want {
				t.Fatalf("failed = %v, want %v", ft.failed, tt.want)
			}
		})
	}
}
