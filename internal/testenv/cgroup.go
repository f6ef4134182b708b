package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cgroup is a memory cgroup a test made (v2, or v1's memory controller):
// the processes started through Wrap run in it, under its limit.
type Cgroup struct {
	dir string
	v2  bool
}

// NewMemoryCgroup creates a cgroup with a memory limit of limit bytes (no
// swap; limit 0: no limit, memory.max "max") and removes it when t ends, killing what still runs in it. It
// skips (fails under HERALD_REQUIRE_ROOT_TESTS=1) without root or a
// writable memory controller.
func NewMemoryCgroup(t testing.TB, limit int64) *Cgroup {
	t.Helper()
	RequireRoot(t)
	name := fmt.Sprintf("herald-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	var cg *Cgroup
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		cg = &Cgroup{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
		// The memory controller must be enabled for the root's children.
		os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory"), 0)
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		cg = &Cgroup{dir: filepath.Join("/sys/fs/cgroup/memory", name)}
	} else {
		Missing(t, RootTestsEnv, "needs a memory cgroup controller (cgroup v2 with memory, or v1's /sys/fs/cgroup/memory)")
		return nil
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		Missing(t, RootTestsEnv, "needs to create a memory cgroup: "+err.Error())
		return nil
	}
	t.Cleanup(cg.remove)
	lim := strconv.FormatInt(limit, 10)
	if cg.v2 {
		if limit <= 0 {
			lim = "max"
		}
		cg.write(t, "memory.max", lim)
		cg.write(t, "memory.swap.max", "0")
	} else {
		if limit <= 0 {
			lim = "-1"
		}
		cg.write(t, "memory.limit_in_bytes", lim)
		os.WriteFile(filepath.Join(cg.dir, "memory.memsw.limit_in_bytes"), []byte(lim), 0) // absent without swap accounting
	}
	return cg
}

func (c *Cgroup) write(t testing.TB, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(v), 0); err != nil {
		t.Fatalf("cgroup %s: %v", file, err)
	}
}

// Wrap returns a command line that runs argv inside the cgroup, with
// extra shell commands (for example "ulimit -n 512") run first.
func (c *Cgroup) Wrap(pre string, argv ...string) []string {
	script := fmt.Sprintf("echo $$ > %s && %s exec \"$@\"", filepath.Join(c.dir, "cgroup.procs"), pre)
	return append([]string{"/bin/sh", "-c", script, "sh"}, argv...)
}

// Peak is the most memory the cgroup has used, in bytes.
func (c *Cgroup) Peak() int64 {
	if c.v2 {
		return c.readInt("memory.peak")
	}
	return c.readInt("memory.max_usage_in_bytes")
}

// Current is the memory the cgroup uses now.
func (c *Cgroup) Current() int64 {
	if c.v2 {
		return c.readInt("memory.current")
	}
	return c.readInt("memory.usage_in_bytes")
}

// OOMKills is how many processes the kernel killed in the cgroup for want
// of memory.
func (c *Cgroup) OOMKills() int64 {
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	b, _ := os.ReadFile(filepath.Join(c.dir, file))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func (c *Cgroup) readInt(file string) int64 {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return -1
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// remove kills what runs in the cgroup and removes it.
func (c *Cgroup) remove() {
	for range 50 {
		b, _ := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
		pids := strings.Fields(string(b))
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := os.Remove(c.dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
