package bridgeview

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestAdminDocNamesEveryField: docs/admin-api.md, GET /v1/bridges, names
// every field the admin API returns for a bridge and a direction (the
// JSON of View and DirView), and its metrics table every herald_bridge_*
// metric heraldd exports (cmd/heraldd/bridges.go).
//
// Before: refused_total, shared_stream, held_back, held_back_bytes,
// held_back_total and gaps_total were served but not documented, and so
// were herald_bridge_refused_total, _held_back_messages, _held_back_bytes
// and _gaps_total.
func TestAdminDocNamesEveryField(t *testing.T) {
	raw, err := os.ReadFile("../../docs/admin-api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "### GET /v1/bridges")
	if start < 0 {
		t.Fatal("no GET /v1/bridges section")
	}
	section := doc[start:]
	if end := strings.Index(section[4:], "\n### "); end >= 0 {
		section = section[:end+4]
	}
	for _, v := range []any{View{}, DirView{}} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !strings.Contains(section, `"`+name+`"`) && !strings.Contains(section, "`"+name+"`") {
				t.Errorf("GET /v1/bridges returns %q (%s.%s), which docs/admin-api.md does not name", name, rt.Name(), rt.Field(i).Name)
			}
		}
	}
	// The JSON keys are the tags (nothing renamed elsewhere).
	b, err := json.Marshal(DirView{SharedStream: true, LastError: "x", LastErrorAt: "x", FailingSince: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		if !strings.Contains(section, `"`+k+`"`) && !strings.Contains(section, "`"+k+"`") {
			t.Errorf("GET /v1/bridges returns %q, which docs/admin-api.md does not name", k)
		}
	}

	src, err := os.ReadFile("../../cmd/heraldd/bridges.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"(herald_bridge_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		name := m[1]
		short := "`_" + strings.TrimPrefix(name, "herald_bridge_") + "`"
		if !strings.Contains(doc, "`"+name+"`") && !strings.Contains(doc, short) {
			t.Errorf("heraldd exports %s, which docs/admin-api.md's metrics table does not name", name)
		}
	}
}
