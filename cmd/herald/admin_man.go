package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

func manCommand() *cli.Command {
	return &cli.Command{
		Name:        "man",
		Usage:       "print the manual page herald(1) (roff), generated from the command definitions",
		Description: "Install it with: herald man | sudo tee /usr/share/man/man1/herald.1 >/dev/null",
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "man"); err != nil {
				return err
			}
			_, err := fmt.Fprint(cCtx.App.Writer, manPage(cCtx.App))
			return err
		},
	}
}

const manDescription = `herald talks to a Herald message appliance: it sends and receives messages
over STOMP (--server, HERALD_SERVER), reads, writes and watches the key-value
store (kv), prints the messages of a multicast channel
(listen), checks what makes multicast fail on this host (doctor, which reads the
channels from /etc/herald/herald.toml), measures a server (bench), and
administers the local daemon through
its admin socket (--socket, HERALD_SOCKET). Every admin command but top takes
--json, whose output is the admin API's JSON (docs/admin-api.md, in /usr/share/doc/herald
when packaged).

Flags may come before or after the arguments, global ones included; after --
everything is an argument. --timeout 0 means no limit.`

const manExit = `0 success
1 other error; for doctor, a check failed (the error names which); for kv put and kv del, a compare-and-set conflict
64 usage error (bad flags or arguments, a destination the server refuses)
66 no such queue, connection or key (kv get); a --file, --key-file or --config that cannot be read
69 the daemon is unavailable (not running, connection refused or lost)
75 timeout
77 permission denied on the admin socket (join the herald group, or use sudo)`

// manPage renders herald(1): every command and subcommand with its
// arguments, description and flags, then exit codes, environment and files.
// urfave/cli's own ToMan leaves out the arguments and the descriptions
// (where listen's output format is) and says section 8.
func manPage(app *cli.App) string {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH HERALD 1 \"\" \"herald %s\" \"User Commands\"\n", roffText(app.Version))
	b.WriteString(".SH NAME\nherald \\- " + roffText(app.Usage) + "\n")
	b.WriteString(".SH SYNOPSIS\n.B herald\n[global flags]\n.I command\n[flags] [arguments]\n")
	b.WriteString(".SH DESCRIPTION\n")
	roffParagraphs(&b, manDescription)
	b.WriteString(".SH \"GLOBAL OPTIONS\"\n")
	roffFlags(&b, app.Flags)
	b.WriteString(".SH COMMANDS\n")
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			p := path + " " + c.Name
			syn := p
			switch {
			case hasSubcommands(c):
				syn += " COMMAND"
			case c.ArgsUsage != "":
				syn += " [flags] " + c.ArgsUsage
			default:
				syn += " [flags]"
			}
			fmt.Fprintf(&b, ".SS \"%s\"\n", roffText(syn))
			roffParagraphs(&b, c.Usage)
			if c.Description != "" {
				roffParagraphs(&b, c.Description)
			}
			roffFlags(&b, c.Flags)
			walk(p, c.Subcommands)
		}
	}
	walk("herald", app.Commands)
	b.WriteString(".SH \"EXIT STATUS\"\n")
	for _, l := range strings.Split(manExit, "\n") {
		code, text, _ := strings.Cut(l, " ")
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", code, roffText(text))
	}
	b.WriteString(`.SH ENVIRONMENT
.TP
.B HERALD_SERVER
STOMP host:port, as \-\-server (default ` + DefaultServer + `).
.TP
.BR HERALD_LOGIN ", " HERALD_PASSCODE
STOMP credentials, as \-\-login and \-\-passcode (the environment is not visible to other users; arguments are).
.TP
.B HERALD_SOCKET
admin socket, as \-\-socket.
.SH FILES
.TP
.I ` + SystemSocket + `
the packaged daemon's admin socket (0660, group herald), used when
.I ./herald\-data/admin.sock
does not exist.
.TP
.I /etc/herald/herald.toml
the packaged daemon's configuration, where doctor reads the channels (\-\-config); see
.BR heraldd (8).
.TP
.I /usr/share/doc/herald
README.md, docs/*.md (admin API, design, multicast protocol, benchmarks) and
grafana/herald.json, a Grafana dashboard for the daemon's metrics.
.SH "SEE ALSO"
.BR heraldd (8)
`)
	return b.String()
}

// roffText escapes text for roff: backslashes, hyphens of options, and a
// leading period or quote.
func roffText(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffParagraphs writes text: paragraphs separated by blank lines, lines
// indented by two spaces or more kept as they are (examples, formats).
func roffParagraphs(b *strings.Builder, text string) {
	for _, para := range strings.Split(strings.TrimSpace(text), "\n\n") {
		b.WriteString(".PP\n")
		pre := false
		for _, l := range strings.Split(para, "\n") {
			indented := strings.HasPrefix(l, "  ")
			if indented != pre {
				if indented {
					b.WriteString(".RS\n.nf\n")
				} else {
					b.WriteString(".fi\n.RE\n")
				}
				pre = indented
			}
			if indented {
				l = strings.TrimSpace(l)
			}
			b.WriteString(roffText(l) + "\n")
		}
		if pre {
			b.WriteString(".fi\n.RE\n")
		}
	}
}

// roffFlags writes one tagged paragraph per flag: its names, its value
// placeholder, usage, default and environment variables.
func roffFlags(b *strings.Builder, flags []cli.Flag) {
	for _, f := range flags {
		df, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
			continue // hidden from --help, and so from the manual page
		}
		usage := df.GetUsage()
		placeholder := ""
		if i := strings.IndexByte(usage, '`'); i >= 0 {
			if j := strings.IndexByte(usage[i+1:], '`'); j >= 0 {
				placeholder = usage[i+1 : i+1+j]
				usage = usage[:i] + placeholder + usage[i+2+j:]
			}
		}
		if df.TakesValue() && placeholder == "" {
			placeholder = "value"
		}
		var names []string
		for _, n := range f.Names() {
			dash := "--"
			if len(n) == 1 {
				dash = "-"
			}
			names = append(names, `\fB`+roffText(dash+n)+`\fR`)
		}
		tag := strings.Join(names, ", ")
		if df.TakesValue() {
			tag += ` \fI` + roffText(placeholder) + `\fR`
		}
		def := df.GetDefaultText()
		if def == "" {
			def = df.GetValue()
		}
		switch def {
		case "", `""`, "0", "0s", "false", "[]":
		default:
			usage += " (default: " + strings.Trim(def, `"`) + ")"
		}
		if env := df.GetEnvVars(); len(env) > 0 {
			usage += " [env: " + strings.Join(env, ", ") + "]"
		}
		fmt.Fprintf(b, ".TP\n%s\n%s\n", tag, roffText(usage))
	}
}

// bashCompletion is sourced by bash: it asks herald itself for the words
// (urfave/cli's --generate-bash-completion).
const bashCompletion = `# bash completion for herald: source it, or install it with
#   herald completion bash | sudo tee /usr/share/bash-completion/completions/herald
_herald_complete() {
  local cur opts
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == "-"* ]]; then
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _herald_complete herald
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the bash completion script",
		ArgsUsage: "bash",
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 1, "completion [bash]"); err != nil {
				return err
			}
			if sh := cCtx.Args().First(); sh != "" && sh != "bash" {
				return usageErrorf("completion for %q is not available: only bash", sh)
			}
			_, err := fmt.Fprint(cCtx.App.Writer, bashCompletion)
			return err
		},
	}
}

// hasSubcommands reports whether c has commands of its own to document: the
// help subcommand the library adds (to the command being run, man itself)
// does not count.
func hasSubcommands(c *cli.Command) bool {
	for _, s := range c.Subcommands {
		if !s.Hidden && s.Name != "help" {
			return true
		}
	}
	return false
}
