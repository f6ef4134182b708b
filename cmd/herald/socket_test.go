package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin/admintest"
	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/internal/testenv"
)

// TestAdminCLI_PackagedSocketPermission is the packaged layout: the admin
// socket sits in a 0750 directory of the daemon's group (/run/herald), and a
// user outside that group cannot even look inside. Without --socket the CLI
// must still pick the system socket (not fall back to ./herald-data and say
// "is it running?"), and say which group to join, exit 77. A member of the
// group gets an answer from the same binary and the same defaults.
func TestAdminCLI_PackagedSocketPermission(t *testing.T) {
	testenv.RequireRoot(t, "groupadd", "groupdel")
	group := fmt.Sprintf("hrldg%d", os.Getpid()%100000)
	if out, err := exec.Command("groupadd", group).CombinedOutput(); err != nil {
		t.Fatalf("groupadd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("groupdel", group).Run() })
	var gid uint32
	if out, err := exec.Command("getent", "group", group).Output(); err != nil {
		t.Fatal(err)
	} else if _, err := fmt.Sscanf(strings.Split(string(out), ":")[2], "%d", &gid); err != nil {
		t.Fatalf("getent group %s: %q: %v", group, out, err)
	}

	// /tmp/herald-run-*/run (0750 root:GROUP) holds the socket, like /run/herald.
	top, err := os.MkdirTemp("", "herald-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	os.Chmod(top, 0o755)
	runDir := filepath.Join(top, "run")
	if err := os.Mkdir(runDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(runDir, 0, int(gid)); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(runDir, "admin.sock")
	admintest.Start(t, func(c *appliance.Config) { c.Admin.Socket = sock })
	if err := os.Chown(sock, 0, int(gid)); err != nil {
		t.Fatal(err)
	}

	// The binary's system socket is ours (packagers could move it the same way).
	bin := filepath.Join(top, "herald")
	args := append(append([]string{"build"}, testenv.GoBuildFlags()...),
		"-ldflags", "-X main.SystemSocket="+sock, "-o", bin, ".")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}

	asNobody := func(groups []uint32, args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "/" // no ./herald-data here
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, testenv.RaceWatch(t, &stderr)
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("run %s as nobody: %v", bin, err)
		}
		return code, stdout.String(), stderr.String()
	}

	code, stdout, stderr := asNobody(nil, "status")
	if code != exitNoPerm {
		t.Errorf("outside group %s: exit %d, want %d\nstdout: %s\nstderr: %s", group, code, exitNoPerm, stdout, stderr)
	}
	mustContain(t, "outside the group", stderr, "permission denied: join group "+group, sock, "sudo")
	if strings.Contains(stderr, "herald-data") || strings.Contains(stderr, "is it running") {
		t.Errorf("outside the group: the CLI fell back to the local socket: %s", stderr)
	}

	// await-ready does not wait out its timeout on a permission error: it
	// will not go away by itself.
	start := time.Now()
	code, _, stderr = asNobody(nil, "await-ready", "--timeout", "20s")
	if code != exitNoPerm || time.Since(start) > 10*time.Second {
		t.Errorf("await-ready outside the group: exit %d after %v, want %d at once: %s", code, time.Since(start), exitNoPerm, stderr)
	}
	mustContain(t, "await-ready outside the group", stderr, "permission denied: join group "+group)

	// Positive control: in the group, the same defaults reach the daemon.
	code, stdout, stderr = asNobody([]uint32{gid}, "status")
	if code != exitOK || !strings.Contains(stdout, "version:") {
		t.Errorf("in group %s: exit %d, want 0 and the status\nstdout: %s\nstderr: %s", group, code, stdout, stderr)
	}
}
