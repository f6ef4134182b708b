package testenv

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The environment variables under which a missing precondition fails a test
// instead of skipping it. .ci/run sets both: there, nothing may skip.
const (
	// RootTestsEnv covers root, devices, kernel features and system tools.
	RootTestsEnv = "HERALD_REQUIRE_ROOT_TESTS"
	// InteropEnv covers the third-party STOMP clients.
	InteropEnv = "HERALD_REQUIRE_INTEROP"
)

// Missing is the one way a Herald test gives up for want of something this
// machine lacks: it skips t with "skipped: this test " + msg (msg names what
// is missing and how to get it), or, when the environment variable env
// (RootTestsEnv or InteropEnv) is "1", fails t with the same message.
func Missing(t testing.TB, env, msg string) {
	t.Helper()
	if os.Getenv(env) == "1" {
		t.Fatalf("%s=1 forbids skipping, but this test %s", env, msg)
	}
	t.Skip("skipped: this test " + msg)
}

// RequireRoot skips t unless it runs as root with every tool on PATH. With
// HERALD_REQUIRE_ROOT_TESTS=1 (CI) it fails instead of skipping.
func RequireRoot(t testing.TB, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, RootTestsEnv, "needs root (run the tests as root)"+toolsHint(tools))
		return
	}
	RequireTools(t, tools...)
}

// RequireTools skips t unless every tool is on PATH, naming the Debian
// packages to install. With HERALD_REQUIRE_ROOT_TESTS=1 (CI) it fails
// instead of skipping.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	if hint := toolsHint(tools); hint != "" {
		Missing(t, RootTestsEnv, "needs"+strings.TrimPrefix(hint, ";"))
	}
}

// debPackage names the Debian package of each tool the tests use.
var debPackage = map[string]string{
	"ip": "iproute2", "bridge": "iproute2", "nft": "nftables", "mount": "mount", "umount": "mount",
	"setpriv": "util-linux", "unshare": "util-linux", "useradd": "passwd",
	"userdel": "passwd", "groupadd": "passwd", "groupdel": "passwd", "tmux": "tmux",
	"sysctl": "procps", "stat": "coreutils",
}

// toolsHint is "; TOOL... (apt-get install PACKAGE...)" for the tools not on
// PATH, or "".
func toolsHint(tools []string) string {
	var missing, pkgs []string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
			p := debPackage[tool]
			if p == "" {
				p = tool
			}
			if !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return "; " + strings.Join(missing, " ") + " (apt-get install " + strings.Join(pkgs, " ") + ")"
}
