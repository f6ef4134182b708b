package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/herald-mq/herald/internal/testenv"
)

func TestDoctor_UsageErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.toml")
	if err := os.WriteFile(empty, []byte("data_dir = \"/tmp/x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	one := filepath.Join(dir, "one.toml")
	if err := os.WriteFile(one, []byte("[[multicast.channel]]\nname = \"prices\"\ngroup = \"239.255.0.1:7400\"\ntopics = [\"px.>\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"doctor", "--group", "10.0.0.1:7400"}, exitUsage, "want an IPv4 multicast address and port"},
		{[]string{"doctor", "--group", "239.255.0.1:7400", "--sender", "nope"}, exitUsage, `--sender "nope"`},
		{[]string{"doctor", "--group", "239.255.0.1:7400", "--ttl", "300"}, exitUsage, "--ttl 300"},
		{[]string{"doctor", "--group", "239.255.0.1:7400", "--channel", "x"}, exitUsage, "--group and --channel"},
		{[]string{"doctor", "--group", "239.255.0.1:7400", "--timeout", "0s"}, exitUsage, "--timeout"},
		{[]string{"doctor", "extra"}, exitUsage, "herald doctor"},
		{[]string{"doctor", "--config", filepath.Join(dir, "missing.toml")}, exitNoInput, "does not exist; name the file with --config, or the group with --group"},
		{[]string{"doctor", "--config", empty}, exitUsage, "has no [[multicast.channel]]"},
		{[]string{"doctor", "--config", one, "--channel", "trades"}, exitUsage, `no channel "trades"; its channels: prices`},
	} {
		code, stdout, stderr := runCLI(t, "", tc.args...)
		if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("herald %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.want)
		}
	}
}

// TestDoctor_Namespace runs the command in a namespace of its own (loopback with multicast on and
// the groups routed to it, as the listen tests do): a channel read from a config file passes;
// then an nftables rule drops its port and doctor exits 1 naming the failed checks, in text and
// in JSON.
func TestDoctor_Namespace(t *testing.T) {
	ns := listenNS(t)
	testenv.RequireTools(t, "nft")
	cfg := filepath.Join(t.TempDir(), "herald.toml")
	if err := os.WriteFile(cfg, []byte("[[multicast.channel]]\nname = \"prices\"\ngroup = \"239.255.0.9:7409\"\ninterface = \"lo\"\ntopics = [\"px.>\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doctor := func(args ...string) (int, string, string) {
		var code int
		var stdout, stderr string
		if err := inNS(ns, func() { code, stdout, stderr = runCLI(t, "", append([]string{"doctor", "--config", cfg}, args...)...) }); err != nil {
			t.Fatal(err)
		}
		return code, stdout, stderr
	}
	code, stdout, stderr := doctor()
	t.Logf("%s%s", stdout, stderr)
	if code != exitOK || !strings.Contains(stdout, "channel prices: group 239.255.0.9:7409 on lo") ||
		!strings.Contains(stdout, "OK    loopback") || !strings.Contains(stdout, "OK    firewall") || strings.Contains(stdout, "FAIL") {
		t.Fatalf("healthy namespace: exit %d, stdout %q, stderr %q; want exit 0 and no FAIL", code, stdout, stderr)
	}
	for _, args := range [][]string{
		{"add", "table", "inet", "hdoc"},
		{"add", "chain", "inet", "hdoc", "input", "{ type filter hook input priority 0 ; }"},
		{"add", "rule", "inet", "hdoc", "input", "udp", "dport", "7409", "drop"},
	} {
		testenv.Sh(t, append([]string{"ip", "netns", "exec", ns, "nft"}, args...)...)
	}
	code, stdout, stderr = doctor("--channel", "prices")
	t.Logf("%s%s", stdout, stderr)
	if code != exitOther || !strings.Contains(stdout, "FAIL  firewall   nftables drops udp port 7409") ||
		!strings.Contains(stdout, "fix: nft delete rule inet hdoc input handle") ||
		!strings.Contains(stderr, "2 check(s) failed: prices/firewall, prices/loopback") {
		t.Fatalf("port dropped: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = doctor("--json")
	var rows []struct{ Channel, Group, Interface, Check, Status, Detail, Fix string }
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("--json: %v: %q", err, stdout)
	}
	if code != exitOther || len(rows) != 9 {
		t.Fatalf("--json: exit %d, %d rows, want 1 and 9", code, len(rows))
	}
	failed := map[string]bool{}
	for _, r := range rows {
		if r.Channel != "prices" || r.Group != "239.255.0.9:7409" || r.Interface != "lo" {
			t.Errorf("row %+v: wrong channel, group or interface", r)
		}
		if r.Status == "FAIL" {
			failed[r.Check] = true
			if r.Fix == "" {
				t.Errorf("row %+v: FAIL without a fix", r)
			}
		}
	}
	if len(failed) != 2 || !failed["firewall"] || !failed["loopback"] {
		t.Errorf("--json failed checks %v, want firewall and loopback", failed)
	}
}
