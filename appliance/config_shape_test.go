package appliance_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// TestConfig_DeepNestingRefusedFast: text nesting tables, arrays or dotted
// keys far deeper than any config is refused before the TOML parser sees it
// (an 8,000-deep inline table took seconds and gigabytes), in well under a
// second, naming the limit and the line.
func TestConfig_DeepNestingRefusedFast(t *testing.T) {
	for name, src := range map[string]string{
		"inline tables, 8000 deep":              "\n[stomp]\nx = " + strings.Repeat("{a=", 8000) + "1" + strings.Repeat("}", 8000) + "\n",
		"arrays, 8000 deep":                     "\n\nx = " + strings.Repeat("[", 8000) + "1" + strings.Repeat("]", 8000) + "\n",
		"dotted key, 12000 deep":                "\n\n" + strings.Repeat("a.", 12000) + "a = 1\n",
		"dotted table header":                   "\n\n[" + strings.Repeat("a.", 12000) + "a]\n",
		"dotted keys in inline tables, 33 deep": "\n\nx = " + strings.Repeat("{a.a.a.a.a.a.a.a.a.a.a = ", 3) + "1" + strings.Repeat("}", 3) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg := appliance.DefaultConfig()
			start := time.Now()
			err := appliance.DecodeConfig(src, &cfg)
			took := time.Since(start)
			if want := "line 3: tables, arrays and dotted keys nested more than 32 deep"; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error containing %q", err, want)
			}
			if took > 100*time.Millisecond {
				t.Errorf("refusing took %s, want under 100ms", took)
			}
		})
	}
	// Brackets, braces and dots inside strings and comments do not nest; 32
	// deep is within the limit (the parser then refuses the unknown key).
	for name, src := range map[string]string{
		"brackets in strings and comments": "[[multicast.channel]] # [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n" +
			"name = \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{{{\\\"[[[[\"\ngroup = '239.255.0.1:7400[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[['\n" +
			"topics = [\"\"\"\n" + strings.Repeat("a.", 40) + "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n\"\"\"]\nkey = '''" + strings.Repeat("{.", 40) + "'''\n",
		"32 deep": "x = " + strings.Repeat("[", 32) + "1" + strings.Repeat("]", 32) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg := appliance.DefaultConfig()
			err := appliance.DecodeConfig(src, &cfg)
			if err != nil && strings.Contains(err.Error(), "nested more than") {
				t.Fatalf("got %v, want no nesting error", err)
			}
		})
	}
}

// TestConfig_KeyLevelsRefusedFast: 1 MiB of keys each within the depth limit
// (31-deep inline tables took 3.7 s and 640 MB to parse) is refused before
// parsing, fast, naming the limit; a config of 1,000 queue policies (every
// key set) is well within it, decodes and validates.
func TestConfig_KeyLevelsRefusedFast(t *testing.T) {
	fill := func(line func(i int) string) string {
		var b strings.Builder
		for i := 0; b.Len() < 1<<20-200; i++ {
			b.WriteString(line(i))
		}
		return b.String()
	}
	for name, src := range map[string]string{
		"31-deep inline tables": fill(func(i int) string {
			return fmt.Sprintf("x%d = %s1%s\n", i, strings.Repeat("{a=", 31), strings.Repeat("}", 31))
		}),
		"31-deep dotted keys": fill(func(i int) string { return fmt.Sprintf("x%d%s = 1\n", i, strings.Repeat(".a", 30)) }),
		"flat keys":           fill(func(i int) string { return fmt.Sprintf("%x=1\n", i) }),
	} {
		t.Run(name, func(t *testing.T) {
			cfg := appliance.DefaultConfig()
			start := time.Now()
			err := appliance.DecodeConfig(src, &cfg)
			took := time.Since(start)
			if want := "more than 100000 key levels in all, the limit"; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error containing %q", err, want)
			}
			if took > 100*time.Millisecond {
				t.Errorf("refusing took %s, want under 100ms", took)
			}
		})
	}
	t.Run("1000 queue policies", func(t *testing.T) {
		var b strings.Builder
		for i := range 1000 {
			fmt.Fprintf(&b, "[[queues.policy]]\nmatch = \"orders%d.>\"\nprefetch = 5\nmax_deliveries = 3\nredelivery_delay_min = \"1s\"\n"+
				"redelivery_delay_max = \"5s\"\nack_timeout = \"1s\"\nmax_messages = 10\nmax_bytes = 100\nfull_policy = \"block\"\nblock_timeout = \"1s\"\n", i)
		}
		cfg := appliance.DefaultConfig()
		if err := appliance.DecodeConfig(b.String(), &cfg); err != nil {
			t.Fatalf("decode: got %v, want no error", err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("validate: got %v, want no error", err)
		}
		if n := len(cfg.Queues.Policies); n != 1000 {
			t.Fatalf("got %d policies, want 1000", n)
		}
	})
}

// TestConfig_SizeLimit: a config text over 1 MiB is refused before parsing,
// by DecodeConfig and by LoadConfig (which reads no more than the limit).
func TestConfig_SizeLimit(t *testing.T) {
	const want = "config larger than 1048576 bytes (1 MiB)"
	big := strings.Repeat("# padding\n", (1<<20)/10+1)
	cfg := appliance.DefaultConfig()
	if err := appliance.DecodeConfig(big, &cfg); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("DecodeConfig of %d bytes: got %v, want an error containing %q", len(big), err, want)
	}
	if err := appliance.DecodeConfig(big[:1<<20], &cfg); err != nil {
		t.Errorf("DecodeConfig of exactly 1 MiB of comments: got %v, want no error", err)
	}
	path := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(path, []byte(big+big), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := appliance.LoadConfig(path); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("LoadConfig of %d bytes: got %v, want an error containing %q", 2*len(big), err, want)
	}
}
