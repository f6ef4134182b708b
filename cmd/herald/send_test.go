package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
)

// runCLI runs the CLI in-process and returns its exit code and output.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"herald"}, args...), strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestCLI_ExitCodes(t *testing.T) {
	down := closedAddr(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", nil, exitUsage, "herald: no command given"},
		{"unknown command", []string{"frob"}, exitUsage, `unknown command "frob"`},
		{"send without DEST", []string{"send"}, exitUsage, "wrong number of arguments"},
		{"send too many args", []string{"send", "/q", "a", "b"}, exitUsage, "wrong number of arguments"},
		{"send unknown flag", []string{"send", "--bogus", "/q"}, exitUsage, "see: herald send --help"},
		{"send bad header", []string{"send", "--header", "novalue", "/q", "x"}, exitUsage, "want key=value"},
		{"send reserved header", []string{"send", "--header", "receipt=1", "/q", "x"}, exitUsage, "set by herald itself"},
		{"send server down", []string{"--server", down, "send", "/q", "x"}, exitUnavailable, "is heraldd running? start it with: heraldd"},
		{"receive without DEST", []string{"receive"}, exitUsage, "wrong number of arguments"},
		{"receive bad ack", []string{"receive", "--ack", "client", "/q"}, exitUsage, "want auto or client-individual"},
		{"receive negative count", []string{"receive", "--count", "-1", "/q"}, exitUsage, "must not be negative"},
		{"receive server down", []string{"--server", down, "receive", "/q"}, exitUnavailable, "is heraldd running?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", tt.args...)
			if code != tt.code {
				t.Errorf("exit code: got %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if !strings.HasPrefix(stderr, "herald: ") || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr: got %q, want \"herald: ...%s...\"", stderr, tt.stderr)
			}
		})
	}
}

func TestCLI_ServerEnv(t *testing.T) {
	down := closedAddr(t)
	t.Setenv("HERALD_SERVER", down)
	code, _, stderr := runCLI(t, "", "send", "/q", "x")
	if code != exitUnavailable || !strings.Contains(stderr, down) {
		t.Errorf("got %d %q, want %d naming %s", code, stderr, exitUnavailable, down)
	}
}

// TestLineBuffered: herald send leaves a frame in the connection's buffer only while a whole
// next line is already read (reading it cannot wait on stdin, so nothing is held back).
func TestLineBuffered(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("a\nb\nc"), 16)
	var got []bool
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			got = append(got, err == nil && lineBuffered(br))
		}
		if err != nil {
			break
		}
	}
	// "a": "b\n" is buffered; "b": only "c" (no line end yet); "c": the end.
	if want := []bool{true, false, false}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
