package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/internal/testenv"
)

// The packaged unit runs heraldd with PrivateUsers=yes: in a user namespace
// that maps only root and the herald user. SO_PEERCRED then gives every
// other caller, such as the members of the herald group whom the docs let
// use the admin socket, as the overflow uid 65534, and the audit log said
// uid=65534 for all of them. Here heraldd runs in a user namespace that
// maps root alone (as unshare --user --map-root-user does as root), a
// caller of uid 4242 (group root: the socket's mode 0660 lets it in)
// changes the log level with herald: its line must not claim uid 65534 but
// say the uid is not mapped, with the caller's pid. Root, mapped, is
// logged as uid 0. Before the fix the line said uid=65534.
func TestAdminAudit_UnmappedUID(t *testing.T) {
	testenv.RequireRoot(t)
	base := t.TempDir()
	// Let uid 4242 (group root) reach the socket: its own mode decides.
	for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	sock := filepath.Join(base, "admin.sock")
	addr := freeAddr(t)
	d := exec.Command(os.Args[0], "--data-dir", filepath.Join(base, "data"), "--stomp-listen", addr, "--admin-socket", sock, "--log-level", "info")
	d.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
	d.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	var log logBuf
	d.Stderr = testenv.RaceWatch(t, &log)
	if err := d.Start(); err != nil {
		testenv.Missing(t, testenv.RootTestsEnv, "needs user namespaces: "+err.Error())
	}
	t.Cleanup(func() {
		d.Process.Kill()
		d.Wait()
	})
	dial2(t, addr).Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for admin.NewClient(sock).Ready(ctx) != nil {
		if ctx.Err() != nil {
			t.Fatalf("admin socket %s not ready in 30s\n%s", sock, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	bin := buildHerald(t, t.TempDir())
	os.Chmod(filepath.Dir(bin), 0o755)
	// setLevel runs herald log-level as uid:0 and returns the audit line.
	setLevel := func(uid int, level string) (pid int, line string) {
		t.Helper()
		from := len(log.String())
		c := exec.Command(bin, "log-level", level)
		c.Env = append(os.Environ(), "HERALD_SOCKET="+sock)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: 0}}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("herald log-level %s as uid %d: %v\n%s", level, uid, err, out)
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			for _, l := range strings.Split(log.String()[from:], "\n") {
				if strings.Contains(l, "admin: log level changed") {
					return c.Process.Pid, l
				}
			}
		}
		t.Fatalf("no audit line for herald log-level %s as uid %d\n%s", level, uid, log.String()[from:])
		return 0, ""
	}
	pid, line := setLevel(4242, "debug")
	t.Logf("uid 4242: %s", line)
	if strings.Contains(line, "uid=65534") || !strings.Contains(line, "uid=unmapped") || !strings.Contains(line, fmt.Sprintf("pid=%d", pid)) {
		t.Errorf("audit of a caller whose uid the daemon's user namespace does not map: %q, want uid=unmapped and pid=%d, not the overflow uid 65534", line, pid)
	}
	pid, line = setLevel(0, "info")
	if !strings.Contains(line+" ", "uid=0 ") || !strings.Contains(line, fmt.Sprintf("pid=%d", pid)) {
		t.Errorf("audit of root, mapped: %q, want uid=0 and pid=%d", line, pid)
	}
}
