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
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := append([]string{args[0]}, reorderLevel(app.Flags, app.Commands, args[1:])...)
	return out
}

// reorderLevel handles one command level: leading flags pass through, a
// subcommand name recurses, anything else is the leaf's argument list.
func reorderLevel(flags []cli.Flag, cmds []*cli.Command, toks []string) []string {
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
		if c := lookupCommand(cmds, t); c != nil {
			out = append(out, t)
			return append(out, reorderLevel(c.Flags, c.Subcommands, toks[i+1:])...)
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
