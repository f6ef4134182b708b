package appliance_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// An unknown key is reported at the line that writes it: the table it is
// under counts, so a key misplaced in [stomp] is not reported at the line of
// the same name in another table, nor a header's key at a value's line.
func TestConfig_UnknownKeyLine(t *testing.T) {
	for _, tc := range []struct{ name, src, key string }{
		{"misplaced key, same name in another table before it", `[log]
level = "info"
[stomp]
listen = "127.0.0.1:61613"
level = "debug"
`, `"stomp.level" at line 5`},
		{"misplaced key on line 5 of a table starting on line 2", `data_dir = "./d"
[queues]
prefetch = 10
# the next key belongs in [stomp]
listen = "127.0.0.1:61613"
`, `"queues.listen" at line 5`},
		{"a value that looks like a key, a multi-line string and array before it", `[log]
level = "info"
[stomp]
listen = """
level = "x"
"""
max_connections = 10
level = "debug"
`, `"stomp.level" at line 8`},
		{"dotted and quoted keys", `[stomp]
"listen" = "127.0.0.1:61613"
queues.prefetch = 3
`, `"stomp.queues.prefetch" at line 3`},
		{"quoted key with a dot", `[stomp]
listen = "127.0.0.1:61613"

'a.b' = 1
`, `"stomp.\"a.b\"" at line 4`},
		{"unknown table", `data_dir = "./d"

[nope]
a = 1
`, `"nope" at line 3`},
		{"array of tables", `[[multicast.channel]]
name = "a"
group = "239.255.0.1:7400"
topics = [
  "a.>", # bogus = 1
]
bogus = 2
`, `"multicast.channel.bogus" at line 7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := appliance.DefaultConfig()
			err := appliance.DecodeConfig(tc.src, &cfg)
			if err == nil || !strings.Contains(err.Error(), "unknown key "+tc.key) {
				t.Fatalf("got %v, want unknown key %s", err, tc.key)
			}
			// Every unknown key named has a line.
			for _, m := range regexp.MustCompile(`unknown key "(?:[^"\\]|\\.)*"( at line \d+)?`).FindAllStringSubmatch(err.Error(), -1) {
				if m[1] == "" {
					t.Errorf("%q without a line", m[0])
				}
			}
		})
	}
}
