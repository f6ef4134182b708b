package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireRoot skips t unless it runs as root with every tool on PATH. With
// HERALD_REQUIRE_ROOT_TESTS=1 (CI) it fails instead of skipping.
func RequireRoot(t testing.TB, tools ...string) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root"
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing += " " + tool
		}
	}
	if missing == "" {
		return
	}
	msg := "needs " + missing + " (run as root; apt-get install iproute2 nftables)"
	if os.Getenv("HERALD_REQUIRE_ROOT_TESTS") == "1" {
		t.Fatalf("HERALD_REQUIRE_ROOT_TESTS=1 but this test %s", msg)
	}
	t.Skip("skipped: this test " + msg)
}
