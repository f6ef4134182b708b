package main

import (
	"io"
	"strings"
	"testing"
)

func TestReorderArgs(t *testing.T) {
	app := newApp(strings.NewReader(""), io.Discard, io.Discard)
	for _, tc := range []struct{ in, want string }{
		{"herald send /queue/jobs --receipt", "herald send --receipt -- /queue/jobs"},
		{"herald send /queue/jobs hello --header k=v --receipt", "herald send --header k=v --receipt -- /queue/jobs hello"},
		{"herald --server h:1 receive /queue/q --count 3 --json", "herald --server h:1 receive --count 3 --json -- /queue/q"},
		{"herald receive /queue/q -n 3", "herald receive -n 3 -- /queue/q"},
		{"herald send /queue/q -- --json", "herald send -- /queue/q --json"},
		{"herald send /queue/q --receipt -- --json", "herald send --receipt -- /queue/q --json"},
		{"herald send /queue/q -5", "herald send -- /queue/q -5"},
		{"herald queue peek jobs --limit 5 --json", "herald queue peek --limit 5 --json -- jobs"},
		{"herald send --receipt=true /queue/q body", "herald send --receipt=true -- /queue/q body"},
		{"herald status", "herald status"},
		{"herald send --bogus /q", "herald send --bogus -- /q"},
		{"herald frob --x", "herald frob --x"},
		{"herald send /q x --server h:1", "herald --server h:1 send -- /q x"},
		{"herald send --server=h:1 /q --receipt", "herald --server=h:1 send --receipt -- /q"},
		{"herald queue peek jobs --login u --json", "herald --login u queue peek --json -- jobs"},
		{"herald send /q -- --server h:1", "herald send -- /q --server h:1"},
	} {
		got := strings.Join(reorderArgs(app, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("reorder %q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}
