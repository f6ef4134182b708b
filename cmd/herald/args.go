package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// reorderArgs moves flags written after a command's arguments in front of
// them, so that "herald send /queue/jobs --receipt" works as well as
// "herald send --receipt /queue/jobs" (urfave/cli stops parsing flags at the
// first argument). Only names the command defines move; everything after
// "--" stays an argument, so a body that looks like a flag can be sent as
// "herald send /queue/q -- --json".
//
// The application's own flags (--server, --login, ...) may be written
// anywhere before "--": they move in front of the command name, where the
// library looks for them ("herald send /queue/q x --server h:1"). A
// command's flag of the same name would win.
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	r := reorderer{globals: app.Flags}
	rest := r.level(app.Flags, app.Commands, args[1:], true)
	out := append([]string{args[0]}, r.hoisted...)
	return append(out, rest...)
}

type reorderer struct {
	globals []cli.Flag
	hoisted []string // global flags found below the top level
}

// hoist moves the global flag at toks[i] (and its value) to the front,
// returning how many tokens it took, or 0 if toks[i] is not one.
func (r *reorderer) hoist(toks []string, i int) int {
	f := lookupFlag(r.globals, toks[i])
	if f == nil {
		return 0
	}
	r.hoisted = append(r.hoisted, toks[i])
	if takesValue(f, toks[i]) && i+1 < len(toks) {
		r.hoisted = append(r.hoisted, toks[i+1])
		return 2
	}
	return 1
}

// level handles one command level: leading flags pass through, a
// subcommand name recurses, anything else is the leaf's argument list.
func (r *reorderer) level(flags []cli.Flag, cmds []*cli.Command, toks []string, top bool) []string {
	var out []string
	i := 0
	for i < len(toks) {
		t := toks[i]
		if t == "--" {
			return append(out, toks[i:]...)
		}
		if f := lookupFlag(flags, t); f != nil {
			out = append(out, t)
			if takesValue(f, t) && i+1 < len(toks) {
				out = append(out, toks[i+1])
				i++
			}
			i++
			continue
		}
		if !top {
			if n := r.hoist(toks, i); n > 0 {
				i += n
				continue
			}
		}
		if c := lookupCommand(cmds, t); c != nil {
			out = append(out, t)
			return append(out, r.level(c.Flags, c.Subcommands, toks[i+1:], false)...)
		}
		break
	}
	if len(cmds) > 0 {
		// Not a leaf: leave the rest to the library (it reports unknown
		// commands and flags itself).
		return append(out, toks[i:]...)
	}
	// Leaf: flags first, then "--" and the arguments in their order (the
	// "--" keeps an argument that looks like a flag an argument).
	var moved, positional []string
	for ; i < len(toks); i++ {
		t := toks[i]
		if t == "--" {
			positional = append(positional, toks[i+1:]...)
			break
		}
		if f := lookupFlag(flags, t); f != nil {
			moved = append(moved, t)
			if takesValue(f, t) && i+1 < len(toks) {
				moved = append(moved, toks[i+1])
				i++
			}
			continue
		}
		if n := r.hoist(toks, i); n > 0 {
			i += n - 1
			continue
		}
		if len(positional) == 0 && len(t) > 1 && t[0] == '-' {
			// An unknown flag before any argument: leave it to the
			// library, which reports it.
			moved = append(moved, t)
			continue
		}
		positional = append(positional, t)
	}
	out = append(out, moved...)
	if len(positional) > 0 {
		out = append(out, "--")
	}
	return append(out, positional...)
}

func lookupFlag(flags []cli.Flag, tok string) cli.Flag {
	if len(tok) < 2 || tok[0] != '-' {
		return nil
	}
	name := strings.TrimLeft(tok, "-")
	name, _, _ = strings.Cut(name, "=")
	if name == "" {
		return nil
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// takesValue reports whether flag f written as tok consumes the next token.
func takesValue(f cli.Flag, tok string) bool {
	if strings.Contains(tok, "=") {
		return false
	}
	if _, ok := f.(*cli.BoolFlag); ok {
		return false
	}
	return true
}

func lookupCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// commandPath names the command args run ("user", "list"): command names
// met in order, skipping flags and their values.
func commandPath(app *cli.App, args []string) []string {
	var path []string
	flags, cmds := app.Flags, app.Commands
	for i := 1; i < len(args); i++ {
		t := args[i]
		if t == "--" {
			break
		}
		if f := lookupFlag(append(append([]cli.Flag(nil), app.Flags...), flags...), t); f != nil {
			if takesValue(f, t) {
				i++
			}
			continue
		}
		c := lookupCommand(cmds, t)
		if c == nil {
			if strings.HasPrefix(t, "-") {
				continue
			}
			break
		}
		path = append(path, c.Name)
		flags, cmds = c.Flags, c.Subcommands
	}
	return path
}
