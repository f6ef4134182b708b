package mcdoctor

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// igmpSample is /proc/net/igmp as Linux prints it (on a little-endian host), with a 10-character
// interface name whose colon is attached.
const igmpSample = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n" +
	"1\tlo        :     1      V3\n" +
	"\t\t\t\t010000E0     1 0:00000000\t\t0\n" +
	"2\teth0      :     2      V2\n" +
	"\t\t\t\t015BFFEF     3 0:00000000\t\t0\n" +
	"\t\t\t\t010000E0     1 0:00000000\t\t0\n" +
	"3\tenp0s31f6x:     1      V3\n" +
	"\t\t\t\t010000E0     1 0:00000000\t\t0\n"

func TestParseIGMP(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the sample is in little-endian order")
	}
	got := parseIGMP([]byte(igmpSample))
	if len(got) != 3 {
		t.Fatalf("got %d interfaces, want 3: %v", len(got), got)
	}
	eth0 := got["eth0"]
	if eth0 == nil || eth0.version != "V2" {
		t.Fatalf("eth0: %+v, want version V2", eth0)
	}
	if u := eth0.groups[netip.MustParseAddr("239.255.91.1")]; u != 3 {
		t.Errorf("eth0 239.255.91.1 users %d, want 3 (groups %v)", u, eth0.groups)
	}
	if u := eth0.groups[netip.MustParseAddr("224.0.0.1")]; u != 1 {
		t.Errorf("eth0 224.0.0.1 users %d, want 1", u)
	}
	if l := got["enp0s31f6x"]; l == nil || l.version != "V3" || len(l.groups) != 1 {
		t.Errorf("enp0s31f6x: %+v", l)
	}
}

// nftDoc wraps chains and rules (JSON objects) into an `nft -j list ruleset` document.
func nftDoc(objs ...string) []byte {
	return []byte(`{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}, {"table": {"family": "inet", "name": "t", "handle": 1}}, ` +
		strings.Join(objs, ", ") + `]}`)
}

func chain(family, hook, policy string) string {
	return fmt.Sprintf(`{"chain": {"family": %q, "table": "t", "name": "input", "handle": 1, "type": "filter", "hook": %q, "prio": 0, "policy": %q}}`, family, hook, policy)
}

func rule(family string, handle int, exprs ...string) string {
	return fmt.Sprintf(`{"rule": {"family": %q, "table": "t", "chain": "input", "handle": %d, "expr": [%s]}}`, family, handle, strings.Join(exprs, ", "))
}

func dport(op, right string) string {
	return fmt.Sprintf(`{"match": {"op": %q, "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": %s}}`, op, right)
}

const (
	drop    = `{"drop": null}`
	accept  = `{"accept": null}`
	reject  = `{"reject": {"type": "icmpx", "expr": "port-unreachable"}}`
	numgen  = `{"match": {"op": "==", "left": {"numgen": {"mode": "random", "mod": 10, "offset": 0}}, "right": 0}}`
	isUDP   = `{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "udp"}}`
	counter = `{"counter": {"packets": 0, "bytes": 0}}`
)

func TestParseNft(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  []byte
		want string // the findings: "drop:where" joined by "|"
	}{
		{"no rules", nftDoc(chain("inet", "input", "accept")), ""},
		{"drop the port", nftDoc(chain("inet", "input", "accept"), rule("inet", 2, dport("==", "7491"), counter, drop)),
			"drop:table inet t chain input rule handle 2"},
		{"reject a range", nftDoc(chain("inet", "input", "accept"), rule("inet", 3, isUDP, dport("==", `{"range": [7000, 7500]}`), reject)),
			"drop:table inet t chain input rule handle 3"},
		{"drop a set holding it", nftDoc(chain("ip", "input", "accept"), rule("ip", 4, dport("==", `{"set": [53, {"range": [7400, 7499]}]}`), drop)),
			"drop:table ip t chain input rule handle 4"},
		{"another port", nftDoc(chain("inet", "input", "accept"), rule("inet", 2, dport("==", "7490"), drop)), ""},
		{"a set without it", nftDoc(chain("inet", "input", "accept"), rule("inet", 2, dport("==", `{"set": [53, 7490]}`), drop)), ""},
		{"every port but it", nftDoc(chain("inet", "input", "accept"), rule("inet", 2, dport("!=", "7491"), drop)), ""},
		{"every port but another", nftDoc(chain("inet", "input", "accept"), rule("inet", 2, dport("!=", "53"), drop)),
			"drop:table inet t chain input rule handle 2"},
		{"random loss", nftDoc(chain("inet", "input", "accept"), rule("inet", 2, dport("==", "7491"), numgen, drop)),
			"some:table inet t chain input rule handle 2"},
		{"drop everything", nftDoc(chain("inet", "input", "accept"), rule("inet", 5, counter, drop)),
			"drop:table inet t chain input rule handle 5"},
		{"accepted first", nftDoc(chain("inet", "input", "accept"), rule("inet", 2, dport("==", "7491"), accept), rule("inet", 3, drop)), ""},
		{"policy drop", nftDoc(chain("inet", "input", "drop")), "drop:table inet t chain input (hook input) has policy drop"},
		{"policy drop, port accepted", nftDoc(chain("inet", "input", "drop"), rule("inet", 2, isUDP, dport("==", "7491"), accept)), ""},
		{"policy drop, accepted only sometimes", nftDoc(chain("inet", "input", "drop"), rule("inet", 2, dport("==", "7491"), numgen, accept)),
			"drop:table inet t chain input (hook input) has policy drop"},
		{"bridge family", nftDoc(chain("bridge", "input", "drop"), rule("bridge", 2, drop)), ""},
		{"forward hook", nftDoc(chain("inet", "forward", "drop")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := parseNft(tc.doc, 7491)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range fs {
				kind := "drop"
				if f.drop == nftDropSome {
					kind = "some"
				}
				got = append(got, kind+":"+f.where)
			}
			g := strings.Join(got, "|")
			if tc.want == "" && g != "" || tc.want != "" && !strings.HasPrefix(g, tc.want) {
				t.Errorf("got %q, want %q", g, tc.want)
			}
		})
	}
	if _, err := parseNft([]byte("not json"), 7491); err == nil {
		t.Error("parseNft accepted text that is not JSON")
	}
}

func TestParseIptablesSave(t *testing.T) {
	save := `*filter
:INPUT ACCEPT [0:0]
-A INPUT -p udp -m udp --dport 7491 -j DROP
-A INPUT -p udp -m multiport --dports 53,7000:7500 -j REJECT --reject-with icmp-port-unreachable
-A INPUT -p udp -m udp --dport 7490 -j DROP
-A INPUT -p tcp -m tcp --dport 7491 -j DROP
-A INPUT -p udp -m udp --dport 7491 -j ACCEPT
COMMIT
`
	got := parseIptablesSave([]byte(save), 7491)
	if len(got) != 2 || !strings.Contains(got[0], "--dport 7491 -j DROP") || !strings.Contains(got[1], "7000:7500") {
		t.Errorf("got %q, want the two rules dropping udp 7491", got)
	}
	if got := parseIptablesSave([]byte("-A INPUT -j DROP\n"), 7491); len(got) != 1 {
		t.Errorf("a rule dropping everything: got %q", got)
	}
}

// The parsers read the output of the kernel and of nft and iptables-save: no input may make them
// panic or loop.
func FuzzParseNft(f *testing.F) {
	f.Add(nftDoc(chain("inet", "input", "drop"), rule("inet", 2, dport("==", `{"set": [53, {"range": [7400, 7499]}]}`), numgen, drop)), uint16(7491))
	f.Add([]byte(`{"nftables": [{"rule": {"expr": [{"match": {"left": 1, "right": {"range": [1]}}}]}}]}`), uint16(1))
	f.Fuzz(func(t *testing.T, b []byte, port uint16) {
		fs, err := parseNft(b, port)
		if err != nil && fs != nil {
			t.Fatalf("findings %v with error %v", fs, err)
		}
	})
}

func FuzzParseIGMP(f *testing.F) {
	f.Add([]byte(igmpSample))
	f.Add([]byte("1\tx:\n\t\tZZ 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for name, st := range parseIGMP(b) {
			if st == nil || st.groups == nil {
				t.Fatalf("interface %q without state", name)
			}
		}
		parseIptablesSave(b, 7491)
	})
}
