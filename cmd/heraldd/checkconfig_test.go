package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkConfig runs heraldd --check-config on a file holding src (or on path
// when src is empty) and returns its exit code and output.
func checkConfig(t *testing.T, path, src string) (int, string) {
	t.Helper()
	if src != "" {
		path = filepath.Join(t.TempDir(), "herald.toml")
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "--check-config", "--config", path)
	cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("run heraldd --check-config: %v", err)
	return 0, ""
}

// TestCheckConfig_ReportsBadValues: --check-config refuses (exit 78) the
// values that used to pass and then break the daemon, naming every key at
// once; it refuses a deeply nested file fast; it accepts the shipped file.
func TestCheckConfig_ReportsBadValues(t *testing.T) {
	code, out := checkConfig(t, "", `
[stomp]
connect_timeout = "0s"
write_timeout = "0s"
max_header_line = 1073741824
[[multicast.channel]]
name = "dash"
group = "239.255.0.1:7400"
topics = ["metrics.>"]
ttl = 1000
key_id = 300
`)
	if code != 78 {
		t.Errorf("exit code: got %d, want 78 (output %q)", code, out)
	}
	for _, want := range []string{
		"invalid configuration",
		"stomp.connect_timeout: must be positive",
		"stomp.write_timeout: must be positive",
		"stomp.max_header_line: at most 1048576 (1 MiB), got 1073741824",
		"multicast.channel[0].ttl: 1000: want 0 to 255",
		"multicast.channel[0].key_id: 300: want 0 to 255",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q: want it to contain %q", out, want)
		}
	}

	start := time.Now()
	code, out = checkConfig(t, "", "x = "+strings.Repeat("{a=", 8000)+"1"+strings.Repeat("}", 8000)+"\n")
	if want := "nested more than 32 deep"; code != 78 || !strings.Contains(out, want) {
		t.Errorf("8000-deep inline table: got exit %d and %q, want 78 and output containing %q", code, out, want)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("8000-deep inline table: --check-config took %s, want under 3s", took)
	}

	code, out = checkConfig(t, "../../packaging/herald.toml", "")
	if code != 0 || !strings.Contains(out, "configuration ok") {
		t.Errorf("shipped config: got exit %d and %q, want 0 and \"configuration ok\"", code, out)
	}
}
