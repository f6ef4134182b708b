package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// herald man is a section 1 page that documents every command and
// subcommand with its arguments, description and flags (listen's output
// format included), the exit codes and the files; groff renders it
// without a warning.
func TestMan_Section1AllCommands(t *testing.T) {
	code, man, stderr := runCLI(t, "", "man")
	if code != 0 {
		t.Fatalf("herald man: exit %d: %s", code, stderr)
	}
	if !strings.HasPrefix(man, `.TH HERALD 1 `) {
		t.Errorf("want a section 1 title line, got %q", strings.SplitN(man, "\n", 2)[0])
	}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			path := prefix + " " + c.Name
			if !strings.Contains(man, `.SS "`+roffText(path)) {
				t.Errorf("no section for %q", path)
			}
			walk(path, c.Subcommands)
		}
	}
	walk("herald", newApp(nil, nil, nil).Commands)
	for _, want := range []string{
		`herald send [flags] DEST [BODY]`,    // ArgsUsage
		`#GAP`, `#SESSION`, `topic<TAB>body`, // listen's output format
		`.SH "EXIT STATUS"`, `77`, `.SH FILES`, `/run/herald/admin.sock`, `/usr/share/doc/herald`,
		`\-\-reconnect`, `HERALD_SERVER`,
	} {
		if !strings.Contains(man, want) {
			t.Errorf("man page lacks %q", want)
		}
	}
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff not installed (apt-get install groff-base): rendering not checked")
	}
	cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(man)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("groff -man -ww: %v: %s", err, out)
	}
}
