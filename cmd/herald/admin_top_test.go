package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestAdminCLI_TopInTmux runs herald top full-screen in a tmux pane: the
// view shows the queues and topics with rates, q quits with exit 0, and the
// terminal is restored (main screen, cursor shown, cooked mode).
func TestAdminCLI_TopInTmux(t *testing.T) {
	testenv.RequireTools(t, "tmux")
	d := admintest.Start(t, nil)
	conn := d.Dial(t)
	d.Send(t, conn, "/queue/tmuxq", 3, "m")
	bin := buildHerald(t)
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	tmux := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	tmux("new-session", "-d", "-s", "top", "-x", "120", "-y", "40", "sh", "-c", bin+" top --socket "+d.Socket+"; echo EXIT=$?; stty -a | grep -o ' -\\?icanon'; sleep 60")
	t.Cleanup(func() { exec.Command("tmux", "-S", sock, "kill-server").Run() })
	capture := func() string { return tmux("capture-pane", "-p", "-t", "top") }
	waitPane := func(want string) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := capture()
			if strings.Contains(s, want) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("pane never showed %q:\n%s", want, s)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	screen := waitPane("tmuxq")
	for _, w := range []string{"herald top", "(q to quit)", "QUEUE", "IN/s", "TOPIC", "CHANNEL"} {
		if !strings.Contains(screen, w) {
			t.Errorf("top screen lacks %q:\n%s", w, screen)
		}
	}
	if alt := strings.TrimSpace(tmux("display", "-p", "-t", "top", "#{alternate_on}")); alt != "1" {
		t.Errorf("alternate screen during top: got %q, want 1", alt)
	}
	// Traffic shows as a rate once two refreshes have passed: keep it
	// flowing until the row shows one.
	for deadline := time.Now().Add(10 * time.Second); ; {
		d.Send(t, conn, "/queue/tmuxq", 5, "r")
		row := lineWith(capture(), "tmuxq")
		if f := strings.Fields(row); len(f) >= 6 && f[5] != "-" && f[5] != "0.0" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("tmuxq row after 10s of traffic: got %q, want an IN/s rate in column 6", row)
			break
		}
		time.Sleep(50 * time.Millisecond) // not synchronisation: the traffic's pace
	}
	tmux("send-keys", "-t", "top", "q")
	after := waitPane("icanon")
	if !strings.Contains(after, "EXIT=0") {
		t.Errorf("top exit: want EXIT=0 in:\n%s", after)
	}
	if strings.Contains(after, "QUEUE") {
		t.Errorf("the top view stayed on the main screen after exit:\n%s", after)
	}
	if !strings.Contains(after, " icanon") || strings.Contains(after, "-icanon") {
		t.Errorf("terminal not back in canonical mode after exit:\n%s", after)
	}
	if alt := strings.TrimSpace(tmux("display", "-p", "-t", "top", "#{alternate_on}")); alt != "0" {
		t.Errorf("alternate screen after exit: got %q, want 0", alt)
	}
	if cur := strings.TrimSpace(tmux("display", "-p", "-t", "top", "#{cursor_flag}")); cur != "1" {
		t.Errorf("cursor after exit: got flag %q, want 1 (shown)", cur)
	}
}
