package main

import (
	"encoding/json"
	"io"
	"sort"
	"strings"

	"github.com/herald-mq/herald/appliance/auth"
)

// userEntry is one row of herald user list --json.
type userEntry struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"` // "user" or "group"
	HasPassword bool     `json:"has_password"`
	Groups      []string `json:"groups"`
	Read        []string `json:"read"`
	Write       []string `json:"write"`
	Create      []string `json:"create"`
}

func listUsers(w io.Writer, f *auth.File, asJSON bool) error {
	var out []userEntry
	nz := func(l []string) []string {
		if l == nil {
			return []string{}
		}
		return l
	}
	for name, u := range f.Users {
		out = append(out, userEntry{Name: name, Kind: "user", HasPassword: u.Password != "", Groups: nz(u.Groups), Read: nz(u.Read), Write: nz(u.Write), Create: nz(u.Create)})
	}
	for name, g := range f.Groups {
		out = append(out, userEntry{Name: name, Kind: "group", Groups: []string{}, Read: nz(g.Read), Write: nz(g.Write), Create: nz(g.Create)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind > out[j].Kind // users first
		}
		return out[i].Name < out[j].Name
	})
	if asJSON {
		if out == nil {
			out = []userEntry{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // patterns keep their '>'
		return enc.Encode(map[string]any{"users": out})
	}
	t := newTable(w, "KIND", "NAME", "PASSWORD", "GROUPS", "READ", "WRITE", "CREATE")
	join := func(l []string) string {
		if len(l) == 0 {
			return "-"
		}
		return strings.Join(l, ",")
	}
	for _, e := range out {
		pw := "-"
		if e.Kind == "user" {
			pw = "no"
			if e.HasPassword {
				pw = "yes"
			}
		}
		t.row(e.Kind, e.Name, pw, join(e.Groups), join(e.Read), join(e.Write), join(e.Create))
	}
	if len(out) == 0 {
		t.row("(no users)")
	}
	return t.flush()
}
