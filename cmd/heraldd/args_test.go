package main

import "testing"

// heraldd --help is a success; an argument it does not take is a usage
// error, never silently ignored (with the flags after it).
func TestArgs_HelpAndStrayArguments(t *testing.T) {
	if code := run([]string{"--help"}); code != 0 {
		t.Errorf("heraldd --help: exit %d, want 0", code)
	}
	if code := run([]string{"extra", "--check-config"}); code != 64 {
		t.Errorf("heraldd extra --check-config: exit %d, want 64", code)
	}
	if code := run([]string{"--no-such-flag"}); code != 64 {
		t.Errorf("heraldd --no-such-flag: exit %d, want 64", code)
	}
}
