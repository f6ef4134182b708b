package journal

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The journal stores headers as its own blob: its code knows no STOMP.
func TestJournal_NoSTOMPImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.Contains(p, "/stomp") {
				t.Errorf("%s imports %s; the journal must not depend on the STOMP codec", f, p)
			}
		}
	}
}
