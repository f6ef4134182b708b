// Package packaging_test builds the herald .deb and .rpm (packaging/build.sh,
// as `make packages` does) and proves them on this machine: contents, an
// install with dpkg that runs the installed daemon as the herald user, removal
// that keeps the journal, the rpm in a scratch root, the systemd unit through
// systemd-analyze, and the maintainer scripts' argument conventions.
//
// It needs root and dpkg, rpm, systemd-analyze, setpriv and unshare; without
// them it skips naming what to install, unless HERALD_REQUIRE_ROOT_TESTS=1,
// under which it fails. It refuses to run where a herald package is installed.
package packaging_test

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/internal/testenv"
)

// Installed paths every package must hold.
var wantFiles = []string{
	"/usr/bin/heraldd",
	"/usr/bin/herald",
	"/etc/herald/herald.toml",
	"/usr/lib/systemd/system/herald.service",
	"/usr/lib/sysusers.d/herald.conf",
	"/var/lib/herald",
	"/usr/share/bash-completion/completions/herald",
	"/usr/share/man/man1/herald.1.gz",
	"/usr/share/man/man8/heraldd.8.gz",
	"/usr/share/doc/herald/copyright",
	"/usr/share/doc/herald/LICENSE",
	"/usr/share/doc/herald/README.md",
	"/usr/share/doc/herald/grafana/herald.json",
}

// docFiles are the documents the help texts point at, shipped under
// /usr/share/doc/herald/docs: every docs/*.md of the tree.
func docFiles(t *testing.T) []string {
	t.Helper()
	mds, err := filepath.Glob("../docs/*.md")
	if err != nil || len(mds) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	var out []string
	for _, m := range mds {
		out = append(out, "/usr/share/doc/herald/docs/"+filepath.Base(m))
	}
	return out
}

// glibcNeeded is the highest GLIBC_x.y symbol version the binaries import,
// read with debug/elf (build.sh reads it with objdump: two ways to the same
// answer).
func glibcNeeded(t *testing.T, bins ...string) string {
	t.Helper()
	best := ""
	for _, bin := range bins {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		syms, err := f.ImportedSymbols()
		f.Close()
		if err != nil {
			t.Fatalf("%s: imported symbols: %v", bin, err)
		}
		for _, s := range syms {
			if v, ok := strings.CutPrefix(s.Version, "GLIBC_"); ok && versionLess(best, v) {
				best = v
			}
		}
	}
	if best == "" {
		t.Fatalf("%v import no GLIBC_ symbol version: not linked against glibc?", bins)
	}
	return best
}

// versionLess compares dotted numeric versions ("" is the least).
func versionLess(a, b string) bool {
	if a == "" {
		return b != ""
	}
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func TestVersionLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{{"", "2.2.5", true}, {"2.2.5", "2.34", true}, {"2.34", "2.4", false}, {"2.34", "2.34", false}, {"2.3.4", "2.3", false}} {
		if got := versionLess(c.a, c.b); got != c.less {
			t.Errorf("versionLess(%q, %q) = %v, want %v", c.a, c.b, got, c.less)
		}
	}
}

const (
	confPath   = "/etc/herald/herald.toml"
	unitPath   = "/usr/lib/systemd/system/herald.service"
	stateDir   = "/var/lib/herald"
	runDir     = "/run/herald"
	adminSock  = "/run/herald/admin.sock"
	maxExposed = 3.0 // systemd-analyze security: highest acceptable exposure of the unit
)

// requireRoot skips (or fails under HERALD_REQUIRE_ROOT_TESTS=1) when the test
// cannot run here.
func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("packaging: skipped in -short mode (builds and installs packages)")
	}
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	pkgs := map[string]string{
		"dpkg": "dpkg", "dpkg-deb": "dpkg", "rpm": "rpm", "systemd-analyze": "systemd",
		"setpriv": "util-linux", "unshare": "util-linux", "gcc": "gcc",
	}
	var apt []string
	for _, tool := range []string{"dpkg", "dpkg-deb", "rpm", "systemd-analyze", "setpriv", "unshare", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
			if !slices.Contains(apt, pkgs[tool]) {
				apt = append(apt, pkgs[tool])
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("needs %s", strings.Join(missing, ", "))
	if len(apt) > 0 {
		msg += fmt.Sprintf(" (apt-get install %s)", strings.Join(apt, " "))
	}
	testenv.Missing(t, testenv.RootTestsEnv, msg)
}

// run runs a command, failing the test with its output when it fails.
func run(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := runErr(timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

type packages struct{ deb, rpm, version string }

// buildPackages runs packaging/build.sh (what `make packages` runs).
func buildPackages(t *testing.T) packages {
	t.Helper()
	start := time.Now()
	out := run(t, 8*time.Minute, "bash", "build.sh")
	t.Logf("build.sh in %s:\n%s", time.Since(start).Round(time.Second), lastLines(out, 3))
	debs, _ := filepath.Glob("../dist/herald_*.deb")
	rpms, _ := filepath.Glob("../dist/herald-*.rpm")
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("build.sh: want one .deb and one .rpm in dist/, got %v %v", debs, rpms)
	}
	m := regexp.MustCompile(`^herald_([0-9][^_]*)_[a-z0-9]+\.deb$`).FindStringSubmatch(filepath.Base(debs[0]))
	if m == nil {
		t.Fatalf("deb name %s: want herald_VERSION_ARCH.deb with VERSION starting with a digit", debs[0])
	}
	if !regexp.MustCompile(`^herald-` + regexp.QuoteMeta(m[1]) + `\.[a-z0-9_]+\.rpm$`).MatchString(filepath.Base(rpms[0])) {
		t.Fatalf("rpm name %s: want herald-%s.ARCH.rpm", rpms[0], m[1])
	}
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	return packages{deb: abs(debs[0]), rpm: abs(rpms[0]), version: m[1]}
}

func TestPackages(t *testing.T) {
	requireRoot(t)
	if st, _ := runErr(10*time.Second, "dpkg-query", "-W", "-f=${db:Status-Status}", "herald"); st == "installed" {
		testenv.Missing(t, testenv.RootTestsEnv, "needs a machine without the herald package: it would replace and purge the one installed here (dpkg -r herald first)")
	}
	p := buildPackages(t)

	t.Run("DebContents", func(t *testing.T) { testDebContents(t, p) })
	t.Run("RpmContents", func(t *testing.T) { testRpmContents(t, p) })
	t.Run("RpmScratchRoot", func(t *testing.T) { testRpmScratchRoot(t, p) })
	t.Run("UnitSecurity", testUnitSecurity)
	t.Run("Scripts", testScripts)
	t.Run("DebInstallRunRemove", func(t *testing.T) { testDebInstall(t, p) })
}

func testDebContents(t *testing.T, p packages) {
	info := run(t, time.Minute, "dpkg-deb", "--info", p.deb)
	for _, want := range []string{"Package: herald", "Version: " + p.version, "conffiles", "preinst", "postinst", "prerm", "postrm"} {
		if !strings.Contains(info, want) {
			t.Errorf("dpkg-deb --info: no %q in\n%s", want, info)
		}
	}
	if cf := run(t, time.Minute, "sh", "-c", "dpkg-deb --ctrl-tarfile "+p.deb+" | tar -xO ./conffiles"); strings.TrimSpace(cf) != confPath {
		t.Errorf("conffiles: got %q, want %q", cf, confPath)
	}
	contents := run(t, time.Minute, "dpkg-deb", "--contents", p.deb)
	listed := map[string]string{}
	for _, l := range strings.Split(contents, "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 {
			listed[strings.TrimSuffix(strings.TrimPrefix(f[len(f)-1], "."), "/")] = f[0] + " " + f[1]
		}
	}
	for _, want := range append(docFiles(t), wantFiles...) {
		if _, ok := listed[want]; !ok {
			t.Errorf("dpkg-deb --contents: no %s in\n%s", want, contents)
		}
	}
	glibc := glibcNeeded(t, "../dist/build/heraldd", "../dist/build/herald")
	if dep := run(t, time.Minute, "dpkg-deb", "--field", p.deb, "Depends"); !strings.Contains(dep, "libc6 (>= "+glibc+")") {
		t.Errorf("Depends: got %q, want libc6 (>= %s): the binaries import GLIBC_%s symbols", strings.TrimSpace(dep), glibc, glibc)
	}
	man := run(t, time.Minute, "sh", "-c", "dpkg-deb --fsys-tarfile "+p.deb+" | tar -xO ./usr/share/man/man1/herald.1.gz | gzip -d")
	for _, want := range []string{".TH HERALD 1 ", `.SS "herald listen`, "#GAP", `.SS "herald queue peek`, `.SH "EXIT STATUS"`} {
		if !strings.Contains(man, want) {
			t.Errorf("herald.1 in the .deb: no %q", want)
		}
	}
	for path, want := range map[string]string{
		stateDir: "drwxr-x--- herald/herald",
		confPath: "-rw-r----- root/herald",
	} {
		if got := listed[path]; got != want {
			t.Errorf("%s in the .deb: got %q, want %q", path, got, want)
		}
	}
}

func testRpmContents(t *testing.T, p packages) {
	list := strings.Fields(run(t, time.Minute, "rpm", "-qpl", p.rpm))
	glibc := glibcNeeded(t, "../dist/build/heraldd", "../dist/build/herald")
	if req := run(t, time.Minute, "rpm", "-qp", "--requires", p.rpm); !strings.Contains(req, "glibc >= "+glibc) {
		t.Errorf("rpm --requires: want glibc >= %s in\n%s", glibc, req)
	}
	for _, want := range append(docFiles(t), wantFiles...) {
		if !slices.Contains(list, want) {
			t.Errorf("rpm -qpl: no %s in %v", want, list)
		}
	}
	q := run(t, time.Minute, "rpm", "-qp", "--qf", `[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILEFLAGS:fflags} %{FILENAMES}\n]`, p.rpm)
	for _, want := range []string{
		"drwxr-x--- herald:herald  /var/lib/herald",
		"-rw-r----- root:herald cn /etc/herald/herald.toml", // %config(noreplace)
	} {
		if !strings.Contains(q, want) {
			t.Errorf("rpm file list: no %q in\n%s", want, q)
		}
	}
	scripts := run(t, time.Minute, "rpm", "-qp", "--scripts", p.rpm)
	for _, want := range []string{"preinstall scriptlet", "postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("rpm --scripts: no %s", want)
		}
	}
}

// testRpmScratchRoot installs the rpm into an empty root (no scripts) and
// checks the files land with their owners and modes.
func testRpmScratchRoot(t *testing.T, p packages) {
	root := t.TempDir()
	// A passwd and group naming herald, as the %pre scriptlet would have made,
	// so rpm sets the owners.
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nherald:x:990:990:Herald:/var/lib/herald:/usr/sbin/nologin\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nherald:x:990:\n"), 0o644)
	out := run(t, 2*time.Minute, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "-i", "--nodeps", "--noscripts", p.rpm)
	if strings.Contains(out, "does not exist") {
		t.Errorf("rpm -i: %s", out)
	}
	got := run(t, time.Minute, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "-q", "herald")
	if !strings.HasPrefix(got, "herald-"+p.version) {
		t.Errorf("rpm -q herald in the scratch root: got %q", got)
	}
	for _, f := range wantFiles {
		if _, err := os.Lstat(filepath.Join(root, f)); err != nil {
			t.Errorf("scratch root: %v", err)
		}
	}
	checkOwner(t, filepath.Join(root, stateDir), 990, 990, 0o750|os.ModeDir)
	checkOwner(t, filepath.Join(root, confPath), 0, 990, 0o640)
	out = run(t, time.Minute, filepath.Join(root, "usr/bin/heraldd"), "--check-config", "--config", filepath.Join(root, confPath))
	if !strings.Contains(out, "configuration ok") {
		t.Errorf("installed heraldd --check-config: %s", out)
	}
}

func checkOwner(t *testing.T, path string, uid, gid int, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Uid) != uid || int(st.Gid) != gid || fi.Mode() != mode {
		t.Errorf("%s: got %d:%d %v, want %d:%d %v", path, st.Uid, st.Gid, fi.Mode(), uid, gid, mode)
	}
}

// testUnitSecurity checks the unit's hardening with systemd-analyze security,
// offline (no systemd runs here).
func testUnitSecurity(t *testing.T) {
	out, err := runErr(time.Minute, "systemd-analyze", "security", "--offline=true", "--no-pager", "herald.service")
	m := regexp.MustCompile(`Overall exposure level for herald.service: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security --offline=true herald.service: %v\n%s", err, out)
	}
	score, _ := strconv.ParseFloat(m[1], 64)
	t.Logf("systemd-analyze security: exposure %s %s", m[1], m[2])
	if score > maxExposed {
		t.Errorf("exposure %.1f is above %.1f: the unit lost hardening\n%s", score, maxExposed, out)
	}
	unit, err := os.ReadFile("herald.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, forbidden := range []string{"PrivateNetwork=", "IPAddressDeny="} {
		if bytes.Contains(unit, []byte(forbidden)) {
			t.Errorf("herald.service sets %s: that breaks multicast", forbidden)
		}
	}
}

// testScripts runs each maintainer script with deb and rpm arguments in a
// private mount namespace where /run/systemd/system exists, with systemctl,
// chown, chmod and the user tools replaced by fakes that log their calls.
func testScripts(t *testing.T) {
	dir := t.TempDir()
	logf := filepath.Join(dir, "calls")
	fakes := filepath.Join(dir, "bin")
	os.Mkdir(fakes, 0o755)
	fake := `#!/bin/sh
echo "$(basename "$0") $*" >>` + logf + `
case "$(basename "$0") $1" in
"systemctl is-active") [ "$FAKE_ACTIVE" = 1 ] ;;
"systemctl is-enabled") [ "$FAKE_ENABLED" = 1 ] ;;
"getent passwd"|"getent group") [ "$FAKE_USER" = 1 ] ;;
*) cat >/dev/null; exit 0 ;;
esac
`
	for _, name := range []string{"systemctl", "chown", "chmod", "getent", "systemd-sysusers", "useradd", "groupadd"} {
		if err := os.WriteFile(filepath.Join(fakes, name), []byte(fake), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The mutating calls each case must make, in order (queries left out).
	cases := []struct {
		name, script, args, env string
		want                    []string
	}{
		{"deb preinst install", "preinstall", "install", "", []string{"systemd-sysusers --replace=/usr/lib/sysusers.d/herald.conf -"}},
		{"deb preinst upgrade, user exists", "preinstall", "upgrade 1.0", "FAKE_USER=1", nil},
		{"deb postinst first configure", "postinstall", "configure", "", []string{"systemctl daemon-reload", "systemctl enable herald.service", "systemctl start herald.service"}},
		{"deb postinst upgrade, running", "postinstall", "configure 1.0", "FAKE_ACTIVE=1 FAKE_ENABLED=1", []string{"systemctl daemon-reload", "systemctl restart herald.service"}},
		{"deb postinst reinstall after remove", "postinstall", "configure 1.0", "FAKE_ENABLED=1", []string{"systemctl daemon-reload", "systemctl start herald.service"}},
		{"deb postinst upgrade, disabled", "postinstall", "configure 1.0", "", []string{"systemctl daemon-reload"}},
		{"deb postinst abort-upgrade", "postinstall", "abort-upgrade 2.0", "", nil},
		{"deb prerm remove", "preremove", "remove", "", []string{"systemctl stop herald.service"}},
		{"deb prerm upgrade", "preremove", "upgrade 2.0", "", nil},
		{"deb postrm remove", "postremove", "remove", "", []string{"systemctl daemon-reload"}},
		{"deb postrm purge", "postremove", "purge", "", []string{"systemctl daemon-reload"}},
		{"deb postrm upgrade", "postremove", "upgrade 2.0", "", nil},
		{"rpm pre install", "preinstall", "1", "", []string{"systemd-sysusers --replace=/usr/lib/sysusers.d/herald.conf -"}},
		{"rpm pre upgrade", "preinstall", "2", "FAKE_USER=1", nil},
		{"rpm post install", "postinstall", "1", "", []string{"systemctl daemon-reload", "systemctl enable herald.service", "systemctl start herald.service"}},
		{"rpm post upgrade", "postinstall", "2", "FAKE_ACTIVE=1 FAKE_ENABLED=1", []string{"systemctl daemon-reload", "systemctl restart herald.service"}},
		{"rpm preun erase", "preremove", "0", "", []string{"systemctl --no-reload disable --now herald.service"}},
		{"rpm preun upgrade", "preremove", "1", "", nil},
		{"rpm postun erase", "postremove", "0", "", []string{"systemctl daemon-reload"}},
		{"rpm postun upgrade", "postremove", "1", "", nil},
	}
	scriptsDir, _ := filepath.Abs("scripts")
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			os.Remove(logf)
			sh := fmt.Sprintf("mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && export PATH=%s:$PATH %s && exec sh %s/%s.sh %s",
				fakes, c.env, scriptsDir, c.script, c.args)
			out, err := runErr(30*time.Second, "unshare", "--mount", "--propagation", "private", "sh", "-c", sh)
			if err != nil {
				t.Fatalf("%s.sh %s: %v\n%s", c.script, c.args, err, out)
			}
			b, _ := os.ReadFile(logf)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if strings.HasPrefix(l, "systemctl is-") || strings.HasPrefix(l, "getent ") || strings.HasPrefix(l, "chown ") || strings.HasPrefix(l, "chmod ") || l == "" {
					continue
				}
				got = append(got, l)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("%s.sh %s: got calls %q, want %q", c.script, c.args, got, c.want)
			}
		})
	}
	// Without systemd (a container, a chroot) the install says what it did
	// not do and how to run the daemon, instead of staying silent.
	for _, args := range []string{"configure", "configure 1.0", "1", "2"} {
		t.Run("postinstall_without_systemd_"+strings.ReplaceAll(args, " ", "_"), func(t *testing.T) {
			os.Remove(logf)
			sh := fmt.Sprintf("mount -t tmpfs tmpfs /run && export PATH=%s:$PATH && exec sh %s/postinstall.sh %s", fakes, scriptsDir, args)
			out, err := runErr(30*time.Second, "unshare", "--mount", "--propagation", "private", "sh", "-c", sh)
			if err != nil {
				t.Fatalf("postinstall.sh %s: %v\n%s", args, err, out)
			}
			for _, want := range []string{"systemd is not running", "was not enabled, started", "heraldd --config /etc/herald/herald.toml"} {
				if !strings.Contains(out, want) {
					t.Errorf("postinstall.sh %s without systemd: no %q in %q", args, want, out)
				}
			}
			if b, _ := os.ReadFile(logf); bytes.Contains(b, []byte("systemctl")) {
				t.Errorf("postinstall.sh %s without systemd called systemctl: %s", args, b)
			}
		})
	}
	t.Run("useradd_without_sysusers", func(t *testing.T) {
		os.Remove(logf)
		// Only the fakes and the shell's own tools: no systemd-sysusers.
		bare := filepath.Join(dir, "bare")
		os.Mkdir(bare, 0o755)
		for _, name := range []string{"getent", "useradd", "groupadd"} {
			os.Symlink(filepath.Join(fakes, name), filepath.Join(bare, name))
		}
		for _, name := range []string{"sh", "basename", "cat"} {
			p, err := exec.LookPath(name)
			if err != nil {
				t.Fatal(err)
			}
			os.Symlink(p, filepath.Join(bare, name))
		}
		cmd := exec.Command("/bin/sh", filepath.Join(scriptsDir, "preinstall.sh"), "install")
		cmd.Env = []string{"PATH=" + bare}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("preinstall.sh install: %v\n%s", err, out)
		}
		b, _ := os.ReadFile(logf)
		if !strings.Contains(string(b), "groupadd --system herald") || !strings.Contains(string(b), "useradd --system --gid herald --home-dir /var/lib/herald") {
			t.Errorf("preinstall.sh without systemd-sysusers: got calls\n%s\nwant groupadd --system and useradd --system", b)
		}
	})
}

// daemon is heraldd started from the installed package as the herald user.
type daemon struct {
	cmd  *exec.Cmd
	done chan error
	log  *bytes.Buffer
}

func startDaemon(t *testing.T, port int) *daemon {
	t.Helper()
	d := &daemon{done: make(chan error, 1), log: &bytes.Buffer{}}
	d.cmd = exec.Command("setpriv", "--reuid", "herald", "--regid", "herald", "--init-groups",
		"/usr/bin/heraldd", "--config", confPath, "--stomp-listen", fmt.Sprintf("127.0.0.1:%d", port))
	d.cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.Dir = "/"
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() { d.stop(t) })
	out, err := runErr(30*time.Second, "setpriv", "--reuid", "herald", "--regid", "herald", "--init-groups",
		"/usr/bin/herald", "await-ready", "--socket", adminSock, "--timeout", "20s")
	if err != nil {
		t.Fatalf("herald await-ready (as herald): %v\n%s\nheraldd log:\n%s", err, out, d.log)
	}
	return d
}

// stop sends SIGTERM and waits for a clean exit; idempotent.
func (d *daemon) stop(t *testing.T) {
	if d.cmd.ProcessState != nil || d.cmd.Process == nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("heraldd exited with %v\n%s", err, d.log)
		}
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
		t.Errorf("heraldd did not stop within 30s of SIGTERM\n%s", d.log)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// testDebInstall installs the .deb, runs the installed daemon as herald, sends
// and receives through the installed CLI, removes the package (the journal
// stays), reinstalls it and finds the message sent before the removal.
func testDebInstall(t *testing.T, p packages) {
	_, userErr := user.Lookup("herald")
	hadUser, hadState, hadRun := userErr == nil, exists(stateDir), exists(runDir)
	t.Cleanup(func() {
		if out, err := runErr(2*time.Minute, "dpkg", "--purge", "herald"); err != nil {
			t.Errorf("cleanup: dpkg --purge herald: %v\n%s", err, out)
		}
		if !hadRun {
			os.RemoveAll(runDir)
		}
		if !hadState {
			os.RemoveAll(stateDir)
		}
		if !hadUser {
			runErr(time.Minute, "userdel", "herald")
			runErr(time.Minute, "groupdel", "herald")
		}
	})

	out := run(t, 2*time.Minute, "dpkg", "-i", p.deb)
	t.Logf("dpkg -i:\n%s", lastLines(out, 4))
	if !exists("/run/systemd/system") && !strings.Contains(out, "systemd is not running") {
		t.Errorf("dpkg -i without systemd: no word that the service was not started:\n%s", out)
	}
	u, err := user.Lookup("herald")
	if err != nil {
		t.Fatalf("dpkg -i did not create the herald user: %v", err)
	}
	if u.HomeDir != stateDir {
		t.Errorf("herald's home: got %s, want %s", u.HomeDir, stateDir)
	}
	if _, err := user.LookupGroup("herald"); err != nil {
		t.Errorf("dpkg -i did not create the herald group: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid >= 1000 {
		t.Errorf("herald uid %d is not a system uid", uid)
	}
	checkOwner(t, stateDir, uid, gid, 0o750|os.ModeDir)
	checkOwner(t, confPath, 0, gid, 0o640)
	if got := strings.TrimSpace(run(t, time.Minute, "dpkg-query", "-W", "-f=${Conffiles}", "herald")); !strings.HasPrefix(got, confPath+" ") {
		t.Errorf("dpkg-query Conffiles: got %q, want %s", got, confPath)
	}
	if got := run(t, time.Minute, "/usr/bin/heraldd", "--version"); !strings.Contains(got, p.version) {
		t.Errorf("heraldd --version: got %q, want %s", got, p.version)
	}
	if got := run(t, time.Minute, "setpriv", "--reuid", "herald", "--regid", "herald", "--init-groups",
		"/usr/bin/heraldd", "--check-config", "--config", confPath); !strings.Contains(got, "configuration ok") {
		t.Errorf("heraldd --check-config as herald: %s", got)
	}
	if b, _ := os.ReadFile("/usr/share/bash-completion/completions/herald"); !bytes.Contains(b, []byte("complete ")) {
		t.Errorf("bash completion: no complete command in\n%s", b)
	}
	for _, page := range []string{"/usr/share/man/man8/heraldd.8.gz", "/usr/share/man/man1/herald.1.gz"} {
		if out, err := runErr(time.Minute, "man", "-l", page); err != nil && !strings.Contains(err.Error(), "executable file not found") {
			t.Errorf("man -l %s: %v\n%s", page, err, out)
		}
	}
	for _, doc := range docFiles(t) {
		src := filepath.Join("..", "docs", filepath.Base(doc))
		if a, b := readOrEmpty(src), readOrEmpty(doc); a == "" || a != b {
			t.Errorf("%s is not the tree's %s", doc, src)
		}
	}

	t.Run("SystemdAnalyzeVerify", func(t *testing.T) {
		out, err := runErr(time.Minute, "systemd-analyze", "verify", unitPath)
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
		}
	})

	// A configuration error must not make systemd restart heraldd in a
	// loop: its exit status (78) is in the unit's RestartPreventExitStatus.
	t.Run("ConfigErrorNotRestarted", func(t *testing.T) {
		var prevent []string
		for _, l := range strings.Split(readOrEmpty(unitPath), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "RestartPreventExitStatus="); ok {
				prevent = append(prevent, strings.Fields(v)...)
			}
		}
		bad := filepath.Join(t.TempDir(), "bad.toml")
		if err := os.WriteFile(bad, []byte("[stomp]\nmax_connections = -1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := exec.Command("/usr/bin/heraldd", "--config", bad, "--check-config").Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !slices.Contains(prevent, strconv.Itoa(ee.ExitCode())) {
			t.Errorf("heraldd with an invalid configuration: %v; the unit's RestartPreventExitStatus is %q, want it to hold that exit status", err, prevent)
		}
	})

	// What systemd's RuntimeDirectory=herald would create.
	if err := os.MkdirAll(runDir, 0o750); err != nil {
		t.Fatal(err)
	}
	os.Chown(runDir, uid, gid)

	port := freePort(t)
	server := fmt.Sprintf("127.0.0.1:%d", port)
	queue := fmt.Sprintf("/queue/pkg.%d", time.Now().UnixNano())
	herald := func(args ...string) string {
		t.Helper()
		return run(t, 30*time.Second, "/usr/bin/herald", append([]string{"--server", server}, args...)...)
	}

	d := startDaemon(t, port)
	herald("send", "--receipt", queue, "hello")
	if got := strings.TrimSpace(herald("receive", "--count", "1", "--timeout", "10s", queue)); got != "hello" {
		t.Fatalf("herald receive: got %q, want hello", got)
	}
	if !exists(filepath.Join(stateDir, "herald.db")) {
		t.Errorf("no journal in %s", stateDir)
	}
	herald("send", "--receipt", queue, "kept across remove")
	d.stop(t)

	out = run(t, 2*time.Minute, "dpkg", "-r", "herald")
	if exists("/usr/bin/heraldd") {
		t.Errorf("dpkg -r left /usr/bin/heraldd")
	}
	if !exists(filepath.Join(stateDir, "herald.db")) {
		t.Fatalf("dpkg -r deleted the journal %s/herald.db\n%s", stateDir, out)
	}
	if !exists(confPath) {
		t.Errorf("dpkg -r deleted the conffile %s", confPath)
	}
	// A local change to the conffile survives a reinstall.
	f, err := os.OpenFile(confPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("# local change\n")
	f.Close()

	run(t, 2*time.Minute, "dpkg", "-i", p.deb)
	if b, _ := os.ReadFile(confPath); !bytes.HasSuffix(b, []byte("# local change\n")) {
		t.Errorf("reinstall replaced the locally changed %s", confPath)
	}
	d = startDaemon(t, port)
	if got := strings.TrimSpace(herald("receive", "--count", "1", "--timeout", "10s", queue)); got != "kept across remove" {
		t.Errorf("after remove and reinstall: got %q, want the message sent before", got)
	}
	d.stop(t)

	out = run(t, 2*time.Minute, "dpkg", "--purge", "herald")
	if !exists(filepath.Join(stateDir, "herald.db")) {
		t.Errorf("dpkg --purge deleted the journal: it must keep %s\n%s", stateDir, out)
	}
	if exists(confPath) {
		t.Errorf("dpkg --purge kept %s", confPath)
	}
}

func readOrEmpty(p string) string { b, _ := os.ReadFile(p); return string(b) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
