package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp/client"
)

// lock run gives the command the lock's name and token and exits with the
// command's status; the next run gets the next token.
func TestLockRun_TokenAndExitStatus(t *testing.T) {
	addr := startBroker(t)
	code, stdout, stderr := runCLI(t, "", "--server", addr, "lock", "run", "deploy", "--", "sh", "-c", `echo "$HERALD_LOCK_NAME $HERALD_LOCK_TOKEN"; exit 3`)
	if code != 3 || stdout != "deploy 1\n" || !strings.Contains(stderr, "exited with status 3") {
		t.Fatalf("exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "", "--server", addr, "lock", "run", "deploy", "--", "sh", "-c", `echo $HERALD_LOCK_TOKEN`)
	if code != 0 || stdout != "2\n" {
		t.Fatalf("second run: exit %d stdout %q", code, stdout)
	}
	code, _, stderr = runCLI(t, "", "--server", addr, "lock", "run", "deploy")
	if code != exitUsage || !strings.Contains(stderr, "NAME -- COMMAND") {
		t.Fatalf("no command: exit %d %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "", "--server", addr, "lock", "run", "a.*", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "wildcards") {
		t.Fatalf("bad name: exit %d %q", code, stderr)
	}
}

// --timeout: a lock held elsewhere is not waited for beyond it (status 75)
// and the command does not run.
func TestLockRun_Timeout(t *testing.T) {
	addr := startBroker(t)
	c, err := client.Dial(context.Background(), addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.SubscribeReceipt(context.Background(), "/lock/deploy", "auto")
	if err != nil {
		t.Fatal(err)
	}
	<-sub.C()
	marker := filepath.Join(t.TempDir(), "ran")
	start := time.Now()
	code, _, stderr := runCLI(t, "", "--server", addr, "lock", "run", "--timeout", "300ms", "deploy", "--", "touch", marker)
	if code != exitTimeout || time.Since(start) < 300*time.Millisecond || !strings.Contains(stderr, "--timeout") {
		t.Fatalf("exit %d after %v: %q", code, time.Since(start), stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran without the lock")
	}
}

// Several herald processes contend for one lock: the commands never
// overlap (mkdir of one directory fails for a second holder).
func TestLockRun_MutualExclusionAcrossProcesses(t *testing.T) {
	bin := buildHerald(t)
	addr := startBroker(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	var wg sync.WaitGroup
	errs := make(chan string, 20)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 3; j++ {
				cmd := exec.Command(bin, "--server", addr, "lock", "run", "crit", "--", "sh", "-c", fmt.Sprintf(`mkdir %s || exit 9; echo $HERALD_LOCK_TOKEN >> %s/tokens; sleep 0.02; rmdir %s`, in, dir, in))
				if out, err := cmd.CombinedOutput(); err != nil {
					errs <- fmt.Sprintf("%v: %s", err, out)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a holder found another inside, or failed: %s", e)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "tokens"))
	toks := strings.Fields(string(b))
	if len(toks) != 18 {
		t.Fatalf("%d runs recorded: %q", len(toks), b)
	}
	for i, tok := range toks {
		if tok != fmt.Sprint(i+1) {
			t.Fatalf("tokens in critical-section order: %v", toks)
		}
	}
}

// kill -9 of the holder's herald process ends its connection, and with it
// the lease: the waiting herald gets the lock with the next token.
func TestLockRun_KillNineOfHolderReleases(t *testing.T) {
	bin := buildHerald(t)
	addr := startBroker(t)
	holder := exec.Command(bin, "--server", addr, "lock", "run", "deploy", "--", "sh", "-c", "echo held $HERALD_LOCK_TOKEN; exec sleep 60")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-holder.Process.Pid, syscall.SIGKILL) // the orphaned sleep too
		holder.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held 1\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	waiter := exec.Command(bin, "--server", addr, "lock", "run", "deploy", "--", "sh", "-c", "echo got $HERALD_LOCK_TOKEN")
	var wout strings.Builder
	waiter.Stdout = &wout
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- waiter.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("the waiter ran while the lock was held: %v %q", err, wout.String())
	case <-time.After(500 * time.Millisecond):
	}
	holder.Process.Signal(syscall.SIGKILL) // herald only, not its command
	select {
	case err := <-done:
		if err != nil || wout.String() != "got 2\n" {
			t.Fatalf("waiter after kill -9 of the holder: %v %q", err, wout.String())
		}
	case <-time.After(20 * time.Second):
		waiter.Process.Kill()
		t.Fatal("the lock was not released 20s after kill -9 of its holder")
	}
}
