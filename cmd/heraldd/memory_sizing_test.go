package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/admin"
	"github.com/herald-mq/herald/internal/testenv"
)

// The packaged unit has ProcSubset=pid, which hides /proc/meminfo, and the
// default memory budget (memory.budget_bytes = 0) is 40% of the smaller of
// the cgroup's memory.max and the RAM, read there. With memory.max "max"
// (MemoryMax=infinity, or a unit without MemoryMax) the budget silently
// fell back to 1 GiB whatever the machine, and the Go memory limit was not
// set; with a memory.max above the RAM it was 40% of that limit, more than
// the machine has. Here heraldd runs in a mount namespace whose /proc is
// mounted with subset=pid, as systemd does, in a cgroup of each kind: its
// budget must be 40% of the RAM (sysinfo(2) gives it), and its log must
// say where the figure came from. Before the fix the budget was 1 GiB, and
// 80% of the RAM, with nothing logged.
func TestMemorySizing_MeminfoHidden(t *testing.T) {
	testenv.RequireRoot(t, "unshare", "mount")
	ram := hostMemTotal(t)
	want := max(ram*2/5, 64<<20)
	for _, c := range []struct {
		name  string
		limit int64
	}{
		{"memory.max=max", 0},
		{"memory.max=2xRAM", 2 * ram},
	} {
		t.Run(c.name, func(t *testing.T) {
			cg := testenv.NewMemoryCgroup(t, c.limit)
			dir := t.TempDir()
			sock := filepath.Join(dir, "admin.sock")
			addr := freeAddr(t)
			argv := cg.Wrap("", "unshare", "--mount", "--propagation", "private", "sh", "-c",
				`mount -t proc -o subset=pid proc /proc && test ! -e /proc/meminfo && exec "$@"`, "sh",
				os.Args[0], "--data-dir", filepath.Join(dir, "data"), "--stomp-listen", addr, "--admin-socket", sock, "--log-level", "info")
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "HERALDD_TEST_CHILD=1")
			var log logBuf
			cmd.Stdout = &log
			cmd.Stderr = testenv.RaceWatch(t, &log)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() {
				cmd.Process.Kill()
				<-done
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for admin.NewClient(sock).Ready(ctx) != nil {
				select {
				case err := <-done:
					done <- err
					if strings.Contains(log.String(), "subset") || strings.Contains(log.String(), "mount") {
						testenv.Missing(t, testenv.RootTestsEnv, "needs to mount /proc with subset=pid (Linux 5.8) in a mount namespace: "+log.String())
					}
					t.Fatalf("heraldd exited: %v\n%s", err, log.String())
				default:
				}
				if ctx.Err() != nil {
					t.Fatalf("admin socket not ready in 30s\n%s", log.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			st, err := admin.NewClient(sock).Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Totals.MemoryBudget; got != want {
				t.Errorf("default memory budget with /proc/meminfo hidden and %s: %d bytes, want %d (40%% of the RAM, %d)", c.name, got, want, ram)
			}
			var line string
			for _, l := range strings.Split(log.String(), "\n") {
				if strings.Contains(l, "memory sized") {
					line = l
				}
			}
			t.Logf("%s", line)
			if !strings.Contains(line, "sysinfo") || !strings.Contains(line, fmt.Sprintf("memory_budget_bytes=%d", want)) {
				t.Errorf("no log line saying the memory was sized from sysinfo(2) (/proc/meminfo hidden): %q\n%s", line, log.String())
			}
		})
	}
}

// hostMemTotal is MemTotal of /proc/meminfo, in bytes.
func hostMemTotal(t *testing.T) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}
