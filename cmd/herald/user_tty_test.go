package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/auth"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestHashPassword_PromptDoesNotEcho types a password twice into herald
// hash-password on a real terminal (a tmux pane): nothing typed shows on the
// screen, and the hash printed verifies; two different passwords are refused.
func TestHashPassword_PromptDoesNotEcho(t *testing.T) {
	testenv.RequireTools(t, "tmux")
	bin := buildHerald(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "tmux.sock")
	out := filepath.Join(dir, "hash")
	tmux := func(args ...string) string {
		t.Helper()
		o, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, o)
		}
		return string(o)
	}
	tmux("new-session", "-d", "-s", "pw", "-x", "120", "-y", "20", "sh", "-c",
		bin+" hash-password > "+out+"; echo EXIT=$?; "+bin+" hash-password; echo EXIT2=$?; sleep 60")
	t.Cleanup(func() { exec.Command("tmux", "-S", sock, "kill-server").Run() })
	waitPane := func(want string, n int) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := tmux("capture-pane", "-p", "-t", "pw")
			if strings.Count(s, want) >= n {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("pane never showed %q %d times:\n%s", want, n, s)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPane("Password:", 1)
	tmux("send-keys", "-t", "pw", "Tr0ub4dor&3", "Enter")
	waitPane("Password (again):", 1)
	tmux("send-keys", "-t", "pw", "Tr0ub4dor&3", "Enter")
	screen := waitPane("EXIT=", 1)
	if !strings.Contains(screen, "EXIT=0") {
		t.Fatalf("hash-password failed:\n%s", screen)
	}
	b, _ := os.ReadFile(out)
	if ok, err := auth.VerifyPassword(strings.TrimSpace(string(b)), "Tr0ub4dor&3"); !ok || err != nil {
		t.Fatalf("printed hash %q does not verify: %v", b, err)
	}
	// The second run: passwords that differ.
	waitPane("Password:", 2)
	tmux("send-keys", "-t", "pw", "one", "Enter")
	waitPane("Password (again):", 2)
	tmux("send-keys", "-t", "pw", "two", "Enter")
	screen = waitPane("EXIT2=", 1)
	if !strings.Contains(screen, "EXIT2=64") || !strings.Contains(screen, "the two passwords differ") {
		t.Fatalf("differing passwords:\n%s", screen)
	}
	for _, line := range strings.Split(screen, "\n") {
		if strings.Contains(line, "Tr0ub4dor") || strings.HasSuffix(strings.TrimSpace(line), "one") || strings.HasSuffix(strings.TrimSpace(line), "two") {
			t.Fatalf("a typed password showed on the screen (line %q):\n%s", line, screen)
		}
	}
}
