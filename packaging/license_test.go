package packaging_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The project is under Apache-2.0: the text at the root, and the packages
// say so (the copyright file, the package metadata).
func TestLicense_ApacheShipped(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"../LICENSE", "Apache License\n                           Version 2.0, January 2004"},
		{"copyright", "License: Apache-2.0"},
		{"nfpm.yaml", "license: Apache-2.0"},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%s does not contain %q", c.file, c.want)
		}
	}
	b, _ := os.ReadFile("copyright")
	if strings.Contains(string(b), "unspecified") || strings.Contains(string(b), "statically linked") {
		t.Errorf("copyright still says the license is unspecified or the binaries are statically linked")
	}
}

// The copyright file names every third-party module compiled into the
// binaries (one per line, as go list reports them), and says how they are
// linked: Go code and SQLite compiled in, the C library dynamically.
func TestCopyright_NamesEveryModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}", "../cmd/heraldd", "../cmd/herald").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	b, err := os.ReadFile("copyright")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			named[f[0]] = true
		}
	}
	done := map[string]bool{}
	for _, m := range strings.Fields(string(out)) {
		if m == "github.com/herald-mq/herald" || named[m] || done[m] {
			continue
		}
		done[m] = true
		t.Errorf("copyright does not name the module %s (compiled into the binaries), with its license", m)
	}
	flat := strings.Join(strings.Fields(string(b)), " ")
	for _, want := range []string{"dynamically linked against the GNU C library", "compiled in"} {
		if !strings.Contains(flat, want) {
			t.Errorf("copyright does not say %q", want)
		}
	}
}
