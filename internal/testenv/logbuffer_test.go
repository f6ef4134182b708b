package testenv

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestLogBuffer(t *testing.T) {
	var l LogBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&l, "level=INFO writer=%d n=%d\n", i, j)
				_ = l.String()
			}
		}()
	}
	wg.Wait()
	if n := len(l.Lines()); n != 800 {
		t.Errorf("%d lines, want 800", n)
	}
	if got := l.Lines("writer=3 ", "n=99"); !slices.Equal(got, []string{"level=INFO writer=3 n=99"}) {
		t.Errorf("Lines(writer=3, n=99) = %q", got)
	}
	if got := l.Lines("writer=9"); got != nil {
		t.Errorf("Lines(writer=9) = %q, want none", got)
	}
}
