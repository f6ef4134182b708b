package packaging_test

import (
	"os"
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
