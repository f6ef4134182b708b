package auth

import (
	"strings"
	"testing"
	"time"
)

// TestUsers_NestingBoundAfterQuotes: checkNesting is the bound that keeps deeply nested text from the TOML
// parser, whose "cost grows fast with depth". A multi-line basic string
// may end with up to two quotes just inside its closing delimiter
// ("""x"""" is the string x"), but checkNesting ends it at the first three
// quotes and takes the fourth for the start of a one-line string, which
// hides everything after it on that line: an array nested far deeper than
// maxUsersNesting reaches the parser.
func TestUsers_NestingBoundAfterQuotes(t *testing.T) {
	const depth = 200
	src := `x = ["""a"""", ` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "]\n"
	if err := checkNesting(src); err == nil {
		// Show that the parser indeed got it.
		start := time.Now()
		_, err := DecodeUsers([]byte(src))
		t.Fatalf("a users file nested %d deep passed checkNesting (the bound is %d); DecodeUsers then answered %v after %s", depth+1, maxUsersNesting, err, time.Since(start))
	}
}
