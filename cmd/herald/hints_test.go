package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Hints name the packaged unit, herald, when it is installed, and heraldd
// itself otherwise; never a unit called heraldd.
func TestHints_NameTheUnit(t *testing.T) {
	saved := unitFiles
	t.Cleanup(func() { unitFiles = saved })
	unit := filepath.Join(t.TempDir(), "herald.service")
	unitFiles = []string{unit}
	if got, want := startHint(), "heraldd"; got != want {
		t.Errorf("unpackaged start hint: got %q, want %q", got, want)
	}
	if err := os.WriteFile(unit, []byte("[Unit]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := startHint(), "sudo systemctl start herald"; got != want {
		t.Errorf("packaged start hint: got %q, want %q", got, want)
	}
	if got, want := logHint(), "journalctl -u herald"; got != want {
		t.Errorf("packaged log hint: got %q, want %q", got, want)
	}
}
