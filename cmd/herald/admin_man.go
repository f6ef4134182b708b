package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func manCommand() *cli.Command {
	return &cli.Command{
		Name:        "man",
		Usage:       "print the manual page (roff), generated from the command definitions",
		Description: "Install it with: herald man | sudo tee /usr/share/man/man1/herald.1 >/dev/null",
		Action: func(cCtx *cli.Context) error {
			if err := checkArgs(cCtx, 0, 0, "man"); err != nil {
				return err
			}
			app := cCtx.App
			if app.Description == "" {
				app.Description = manDescription
			}
			man, err := app.ToMan()
			if err != nil {
				return fmt.Errorf("man: %w", err)
			}
			_, err = fmt.Fprint(app.Writer, man)
			return err
		},
	}
}

const manDescription = `herald talks to a Herald message appliance: send and receive messages over
STOMP (--server, HERALD_SERVER), and administer the local daemon through its
admin socket (--socket, HERALD_SOCKET; default ./herald-data/admin.sock, else
/run/herald/admin.sock). Every admin command takes --json, whose output is the
admin API's JSON (docs/admin-api.md).

Exit codes: 0 success, 1 other error, 64 usage error, 66 no such queue or
connection, 69 daemon unavailable, 75 timeout, 77 permission denied on the
admin socket.`

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
