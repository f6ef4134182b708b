package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/internal/testenv"
)

func runUserCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"herald"}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestUser_EditCycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.toml")
	must := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errs := runUserCLI(t, stdin, args...)
		if code != 0 {
			t.Fatalf("herald %v: exit %d: %s", args, code, errs)
		}
		return out
	}
	must("first\n", "user", "add", "--file", path, "--password-stdin", "--groups", "ops,dev", "alice")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("new users file: %v mode %v, want 0640", err, fi.Mode())
	}
	must("", "user", "grant", "alice", "read", "/queue/orders.>", "--file", path)
	must("", "user", "grant", "--group", "--file", path, "ops", "write", "/topic/metrics.*")
	// An operator tightened the mode: edits keep it.
	os.Chmod(path, 0o600)
	must("second\n", "user", "passwd", "--file", path, "--password-stdin", "alice")
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode after an edit %v, want the 0600 it had", fi.Mode())
	}
	b, _ := os.ReadFile(path)
	f, err := auth.DecodeUsers(b)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := auth.VerifyPassword(f.Users["alice"].Password, "second"); !ok {
		t.Fatal("passwd did not store the new password")
	}
	if ok, _ := auth.VerifyPassword(f.Users["alice"].Password, "first"); ok {
		t.Fatal("the old password still works")
	}
	out := must("", "user", "list", "--file", path, "--json")
	var l struct {
		Users []userEntry `json:"users"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if len(l.Users) != 3 || l.Users[0].Name != "alice" || l.Users[0].Read[0] != "/queue/orders.>" || !l.Users[0].HasPassword {
		t.Fatalf("list --json: %+v", l.Users)
	}
	if !strings.Contains(out, `"/queue/orders.>"`) {
		t.Fatalf("list --json escapes '>': %s", out)
	}
	if out := must("", "user", "list", "--file", path); !strings.Contains(out, "alice") || !strings.Contains(out, "/topic/metrics.*") {
		t.Fatalf("list table:\n%s", out)
	}
	must("", "user", "revoke", "--file", path, "alice", "read", "/queue/orders.>")
	must("", "user", "del", "--file", path, "alice")
	b, _ = os.ReadFile(path)
	if strings.Contains(string(b), "alice") {
		t.Fatalf("deleted user still in the file:\n%s", b)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".users.toml.tmp-*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

func TestUser_Errors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users.toml")
	runUserCLI(t, "pw\n", "user", "add", "--file", path, "--password-stdin", "bob")
	before, _ := os.ReadFile(path)
	for _, tc := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"pw\n", []string{"user", "add", "--file", path, "--password-stdin", "bob"}, 64, "already exists"},
		{"", []string{"user", "passwd", "--file", path, "bob"}, 64, "--password-stdin"},
		{"", []string{"user", "del", "--file", path, "nobody"}, 66, `no user "nobody"`},
		{"", []string{"user", "grant", "--file", path, "bob", "admin", "/queue/x"}, 64, "read, write or create"},
		{"", []string{"user", "grant", "--file", path, "bob", "read", "orders"}, 64, "start it with /queue/, /topic/, /stream/, /kv/ or /lock/"},
		{"", []string{"user", "revoke", "--file", path, "bob", "read", "/queue/x"}, 66, "has no read grant"},
		{"", []string{"user", "list", "--file", filepath.Join(dir, "missing.toml")}, 66, "does not exist"},
		{"\n", []string{"hash-password", "--password-stdin"}, 64, "empty password"},
	} {
		code, _, errs := runUserCLI(t, tc.stdin, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("herald %v: exit %d %q, want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a failed edit changed the file")
	}
	os.WriteFile(path, []byte("[users.x]\npassword = \"plain\"\n"), 0o640)
	if code, _, errs := runUserCLI(t, "", "user", "del", "--file", path, "x"); code == 0 || !strings.Contains(errs, "nothing was changed") {
		t.Fatalf("edit of a broken file: exit %d %s", code, errs)
	}
}

func TestHashPassword_Verifies(t *testing.T) {
	code, out, errs := runUserCLI(t, "correct horse\n", "hash-password", "--password-stdin")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if ok, err := auth.VerifyPassword(strings.TrimSpace(out), "correct horse"); !ok || err != nil {
		t.Fatalf("printed hash %q does not verify: %v", out, err)
	}
}

// Concurrent edits take turns: none is lost.
func TestUser_ConcurrentEditsKeepEveryChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users.toml")
	if code, _, errs := runUserCLI(t, "", "user", "add", "--file", path, "--no-password", "svc"); code != 0 {
		t.Fatal(errs)
	}
	// Separate processes, as operators' commands are.
	bin := buildHerald(t)
	const n = 8
	done := make(chan string, n)
	for i := range n {
		go func() {
			p := fmt.Sprintf("/queue/q%d", i)
			if out, err := exec.Command(bin, "user", "grant", "--file", path, "svc", "read", p).CombinedOutput(); err != nil {
				p = fmt.Sprintf("error: %v: %s", err, out)
			}
			done <- p
		}()
	}
	for range n {
		if p := <-done; strings.HasPrefix(p, "error") {
			t.Fatal(p)
		}
	}
	b, _ := os.ReadFile(path)
	f, err := auth.DecodeUsers(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(f.Users["svc"].Read); got != n {
		t.Fatalf("%d grants kept of %d made at once:\n%s", got, n, b)
	}
}

// An edit keeps the file's owner and group (root editing a root:herald
// file must not leave it root:root, unreadable by the daemon).
func TestUser_EditKeepsOwner(t *testing.T) {
	testenv.RequireRoot(t)
	path := filepath.Join(t.TempDir(), "users.toml")
	if code, _, errs := runUserCLI(t, "", "user", "add", "--file", path, "--no-password", "svc"); code != 0 {
		t.Fatal(errs)
	}
	if err := os.Chown(path, 4321, 4322); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runUserCLI(t, "", "user", "grant", "--file", path, "svc", "read", "/queue/x"); code != 0 {
		t.Fatal(errs)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 4321 || st.Gid != 4322 || fi.Mode().Perm() != 0o640 {
		t.Fatalf("after an edit: owner %d:%d mode %v, want 4321:4322 0640", st.Uid, st.Gid, fi.Mode().Perm())
	}
}
