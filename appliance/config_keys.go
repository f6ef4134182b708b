package appliance

import (
	"github.com/BurntSushi/toml"

	"github.com/herald-mq/herald/appliance/auth"
)

// keyPositions maps each key and table of TOML text, by its whole path
// ("stomp.listen", "multicast.channel"), to the first line that writes it,
// so that an unknown key is reported where it is. The path counts the table
// header above the key ([stomp], [[multicast.channel]]) and the parts of a
// dotted or quoted key; values are skipped whole (strings of every kind,
// multi-line arrays and inline tables, comments), so text inside them is
// never taken for a key. A key inside an inline table or an array is found
// through its closest enclosing path (unknownKeyLine).
//
// It reads text the TOML parser has accepted; on anything else it stops
// early rather than guess.
func keyPositions(src string) map[string]int {
	out := map[string]int{}
	record := func(path []string, line int) {
		k := toml.Key(path).String()
		if _, seen := out[k]; !seen {
			out[k] = line
		}
	}
	var table []string
	line := 1
	i := 0
	skipSpace := func() {
		for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
			i++
		}
	}
	for i < len(src) {
		skipSpace()
		if i >= len(src) {
			break
		}
		switch c := src[i]; {
		case c == '\n':
			line++
			i++
		case c == '\r':
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '[':
			i++
			if i < len(src) && src[i] == '[' {
				i++
			}
			path, ok := readKey(src, &i, line, ']')
			if !ok {
				return out
			}
			table = path
			record(table, line)
			for i < len(src) && src[i] == ']' {
				i++
			}
		default:
			path, ok := readKey(src, &i, line, '=')
			if !ok || i >= len(src) || src[i] != '=' {
				return out
			}
			full := append(append([]string(nil), table...), path...)
			record(full, line)
			i++
			if i, line = skipValue(src, i, line); i < 0 {
				return out
			}
		}
	}
	return out
}

// readKey reads a bare, quoted or dotted key at src[*i] up to (not past)
// the byte end, returning its parts.
func readKey(src string, i *int, line int, end byte) ([]string, bool) {
	var parts []string
	for *i < len(src) {
		for *i < len(src) && (src[*i] == ' ' || src[*i] == '\t') {
			*i++
		}
		if *i >= len(src) {
			return nil, false
		}
		switch c := src[*i]; {
		case c == end:
			return parts, len(parts) > 0
		case c == '.':
			*i++
		case c == '"' || c == '\'':
			j, _ := auth.SkipTOMLString(src, *i, line)
			raw := src[*i : j+1]
			if c == '"' {
				var v struct{ K string }
				if _, err := toml.Decode("K = "+raw, &v); err != nil {
					return nil, false
				}
				parts = append(parts, v.K)
			} else {
				parts = append(parts, raw[1:len(raw)-1])
			}
			*i = j + 1
		case c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
			j := *i
			for j < len(src) && (src[j] == '_' || src[j] == '-' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			parts = append(parts, src[*i:j])
			*i = j
		default:
			return nil, false
		}
	}
	return nil, false
}

// skipValue skips the value starting at src[i] to the end of its line (the
// line its last bracket closes on), returning the index of that newline (or
// len(src)) and the line number there; -1 if the value never ends.
func skipValue(src string, i, line int) (int, int) {
	depth := 0
	for ; i < len(src); i++ {
		switch c := src[i]; c {
		case '\n':
			if depth == 0 {
				return i, line
			}
			line++
		case '"', '\'':
			i, line = auth.SkipTOMLString(src, i, line)
		case '#':
			for i+1 < len(src) && src[i+1] != '\n' {
				i++
			}
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		}
	}
	if depth != 0 {
		return -1, line
	}
	return i, line
}

// unknownKeyLine is the line of key k, or of its closest enclosing path
// (a key inside an inline table or an array); 0 if none is known.
func unknownKeyLine(pos map[string]int, k toml.Key) int {
	for n := len(k); n > 0; n-- {
		if l, ok := pos[toml.Key(k[:n]).String()]; ok {
			return l
		}
	}
	return 0
}
