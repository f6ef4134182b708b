package appliance_test

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/herald-mq/herald/appliance"
)

// shippedConfig is the file the packages install as /etc/herald/herald.toml.
const shippedConfig = "../packaging/herald.toml"

// TestShippedConfig_Decodes checks the packaged config decodes strictly,
// validates, and sets every key to its default except the two the packaged
// service changes.
func TestShippedConfig_Decodes(t *testing.T) {
	cfg, err := appliance.LoadConfig(shippedConfig)
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := appliance.DefaultConfig()
	want.DataDir = "/var/lib/herald"
	want.Admin.Socket = "/run/herald/admin.sock"
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("shipped config differs from the defaults:\ngot  %+v\nwant %+v", cfg, want)
	}
}

// commentedKey matches a commented-out table header or key line of the
// shipped file's examples ("# [[multicast.channel]]", "# ttl = 1").
var commentedKey = regexp.MustCompile(`^# (\[\[?[a-z_.]+\]\]?|[a-z_]+ = .*)$`)

// TestShippedConfig_DocumentsEveryKey checks every key of Config (walked by
// reflection over the toml tags) appears in the shipped file, set or in a
// commented example, and that the commented examples are valid too.
func TestShippedConfig_DocumentsEveryKey(t *testing.T) {
	src, err := os.ReadFile(shippedConfig)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(src), "\n") {
		if commentedKey.MatchString(l) {
			l = strings.TrimPrefix(l, "# ")
		}
		lines = append(lines, l)
	}
	uncommented := strings.Join(lines, "\n")

	cfg := appliance.DefaultConfig()
	if err := appliance.DecodeConfig(uncommented, &cfg); err != nil {
		t.Fatalf("the file with its examples uncommented does not decode: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the file with its examples uncommented does not validate: %v", err)
	}
	var probe appliance.Config
	md, err := toml.Decode(uncommented, &probe)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, k := range md.Keys() {
		documented[k.String()] = true
	}
	keys := tomlKeys(reflect.TypeOf(appliance.Config{}), "")
	if len(keys) < 50 {
		t.Fatalf("walked only %d keys of Config: got %v", len(keys), keys)
	}
	var missing []string
	for _, k := range keys {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Errorf("keys of appliance.Config not documented in %s (add each with its default, commented out if it has none): %s",
			shippedConfig, strings.Join(missing, ", "))
	}
}

// tomlKeys lists the dotted TOML key of every leaf field of struct type t;
// arrays of tables ([[x.y]]) contribute the keys of their element type.
func tomlKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		key := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct && !isTextValue(ft):
			keys = append(keys, tomlKeys(ft, key+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && !isTextValue(ft.Elem()):
			keys = append(keys, tomlKeys(ft.Elem(), key+".")...)
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// isTextValue reports whether t is written as one TOML value (Duration).
func isTextValue(t reflect.Type) bool {
	type textUnmarshaler interface{ UnmarshalText([]byte) error }
	return reflect.PointerTo(t).Implements(reflect.TypeFor[textUnmarshaler]())
}
