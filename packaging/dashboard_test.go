package packaging_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/internal/testenv"
)

// The Grafana dashboard shipped in /usr/share/doc/herald/grafana.
const dashboardFile = "grafana/herald.json"

// dashboard is the part of Grafana's dashboard JSON model the test reads.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *dsRef          `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *dsRef `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: not JSON: %v", dashboardFile, err)
	}
	return d
}

// exprs returns every PromQL expression of the dashboard: panel targets and
// the first argument of the variables' label_values(...), with the label
// each variable reads.
func (d dashboard) exprs(t *testing.T) (exprs []string, varLabels map[string]string) {
	t.Helper()
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	varLabels = map[string]string{}
	lv := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query: %v", v.Name, err)
		}
		m := lv.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(EXPR, LABEL)", v.Name, q.Query)
		}
		exprs = append(exprs, m[1])
		varLabels[m[1]] = m[2]
	}
	return exprs, varLabels
}

// TestDashboard_Model checks the dashboard's shape: a Prometheus
// datasource variable every panel and variable uses, unique panel ids, a
// 24-column grid without overlaps, an expression in every target.
func TestDashboard_Model(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and schemaVersion >= 30", d.UID, d.Title, d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"prometheus"` {
			hasDS = true
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s: datasource %+v, want ${datasource}", v.Name, v.Datasource)
		}
	}
	if !hasDS {
		t.Errorf("no datasource variable named datasource of type prometheus")
	}
	ids := map[int]string{}
	type cell struct{ x, y int }
	used := map[cell]string{}
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside 24 columns", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if o, ok := used[cell{x, y}]; ok {
					t.Fatalf("panel %q overlaps %q at %d,%d", p.Title, o, x, y)
				}
				used[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no targets", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("panel %q: target %+v without expr or refId", p.Title, tg)
			}
		}
	}
	// The panels the operators asked for, by the metrics they must use.
	exprs, _ := d.exprs(t)
	all := strings.Join(exprs, "\n")
	for _, m := range []string{"herald_connections", "herald_queue_enqueued_total", "herald_queue_deliveries_total",
		"herald_queue_messages", "herald_journal_commit_duration_seconds_bucket", "herald_channel_losses_total",
		"herald_channel_repairs_total", "herald_output_backpressure_total", "herald_queue_blocked_sends_total",
		"herald_stream_appends_total", "herald_stream_cursor_lag"} {
		if !strings.Contains(all, m) {
			t.Errorf("no panel uses %s", m)
		}
	}
}

// TestPromQLNames checks the expression scanner the dashboard test relies on.
func TestPromQLNames(t *testing.T) {
	for _, tc := range []struct {
		expr   string
		names  []string
		labels []string // metric:label
	}{
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket{instance=~"$instance", x!="1"}[$__rate_interval])))`,
			[]string{"a_bucket"}, []string{"a_bucket:instance", "a_bucket:x", "*:le"}},
		{`time() - (b_seconds{i="a,b{c}"} > 0)`, []string{"b_seconds"}, []string{"b_seconds:i"}},
		{`rate(c_total[5m]) / rate(d_total[5m]) or vector(0)`, []string{"c_total", "d_total"}, nil},
		{`topk(10, rate(e{topic=~".*"}[1m]))`, []string{"e"}, []string{"e:topic"}},
		{`sum without (queue) (f) + on(instance) group_left(version) g offset 5m`, []string{"f", "g"},
			[]string{"*:queue", "*:instance", "*:version"}},
		{`{__name__="h"}`, []string{"h"}, nil},
	} {
		names, labels, err := promqlNames(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		sort.Strings(names)
		if !slices.Equal(names, tc.names) {
			t.Errorf("%s: names %v, want %v", tc.expr, names, tc.names)
		}
		var got []string
		for _, l := range labels {
			got = append(got, l.metric+":"+l.label)
		}
		sort.Strings(got)
		want := slices.Clone(tc.labels)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: labels %v, want %v", tc.expr, got, want)
		}
	}
	if _, _, err := promqlNames(`rate(x[5m]`); err == nil {
		t.Errorf("unbalanced parentheses: no error")
	}
}

type labelUse struct{ metric, label string } // metric "*": a by/on/without list

var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
	// aggregations, which may be followed by "by (...)" rather than "("
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
}

// promqlNames scans a PromQL expression (Grafana variables allowed) for the
// metric names it selects and the labels it names: in a selector's braces
// (tied to its metric) and in by/without/on/ignoring/group_left/group_right
// lists. A name followed by "(" is a function. It is a scanner, not a
// parser: enough for the expressions a dashboard holds, and it fails on
// unbalanced brackets rather than guess.
func promqlNames(expr string) (names []string, labels []labelUse, err error) {
	s := expr
	var depth []byte
	lastMetric := ""
	expectList := false // after by/without/on/...: the next (...) is a label list
	seen := map[string]bool{}
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, nil, fmt.Errorf("unterminated string at %d", i)
			}
			i = j + 1
		case c == '$': // Grafana variable: $name, ${name}, $__rate_interval
			i++
			if i < len(s) && s[i] == '{' {
				for i < len(s) && s[i] != '}' {
					i++
				}
				i++
				continue
			}
			for i < len(s) && isIdent(s[i], false) {
				i++
			}
		case c == '[': // range or subquery: durations, variables
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return nil, nil, fmt.Errorf("unclosed [ at %d", i)
			}
			i += j + 1
		case c == '{':
			j := strings.IndexByte(s[i:], '}')
			for j >= 0 && strings.Count(s[i:i+j], `"`)%2 == 1 { // a } inside a quoted value
				k := strings.IndexByte(s[i+j+1:], '}')
				if k < 0 {
					j = -1
					break
				}
				j += k + 1
			}
			if j < 0 {
				return nil, nil, fmt.Errorf("unclosed { at %d", i)
			}
			body := s[i+1 : i+j]
			for _, m := range regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')`).FindAllStringSubmatch(body, -1) {
				if m[1] == "__name__" && m[2] == "=" {
					n := strings.Trim(m[3], `"'`)
					if !seen[n] {
						seen[n] = true
						names = append(names, n)
					}
					continue
				}
				if lastMetric != "" {
					labels = append(labels, labelUse{lastMetric, m[1]})
				}
			}
			lastMetric = ""
			i += j + 1
		case c == '(':
			if expectList {
				j := strings.IndexByte(s[i:], ')')
				if j < 0 {
					return nil, nil, fmt.Errorf("unclosed label list at %d", i)
				}
				for _, l := range strings.Split(s[i+1:i+j], ",") {
					if l = strings.TrimSpace(l); l != "" {
						labels = append(labels, labelUse{"*", l})
					}
				}
				expectList = false
				i += j + 1
				continue
			}
			depth = append(depth, '(')
			lastMetric = ""
			i++
		case c == ')':
			if len(depth) == 0 {
				return nil, nil, fmt.Errorf("unbalanced ) at %d", i)
			}
			depth = depth[:len(depth)-1]
			lastMetric = ""
			i++
		case isIdent(c, true):
			j := i
			for j < len(s) && isIdent(s[j], false) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && s[k] == ' ' {
				k++
			}
			i = j
			lastMetric = ""
			switch {
			case word == "by" || word == "without" || word == "on" || word == "ignoring" || word == "group_left" || word == "group_right":
				expectList = k < len(s) && s[k] == '('
			case k < len(s) && s[k] == '(' && !promqlKeywords[word]:
				// a function call
			case k < len(s) && s[k] == '(':
				// an aggregation
			case promqlKeywords[word]:
			default:
				if !seen[word] {
					seen[word] = true
					names = append(names, word)
				}
				lastMetric = word
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == 'e' || isIdent(s[i], false)) {
				i++ // numbers and durations (5m)
			}
		default:
			lastMetric = ""
			i++ // operators, commas
		}
	}
	if len(depth) != 0 {
		return nil, nil, fmt.Errorf("unbalanced ( in %q", expr)
	}
	return names, labels, nil
}

// scrape parses Prometheus text exposition: metric name -> label names.
func scrape(r io.Reader) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lre := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			return nil, fmt.Errorf("bad sample line %q", line)
		}
		name := line[:end]
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		if line[end] == '{' {
			close := strings.LastIndexByte(line, '}')
			for _, m := range lre.FindAllStringSubmatch(line[end+1:close], -1) {
				out[name][m[1]] = true
			}
		}
	}
	return out, sc.Err()
}

// TestDashboard_MetricsExist runs the real heraldd, with metrics on and a
// multicast channel (in a network namespace this test creates), gives every
// labelled family a member (a queue, a topic), scrapes /metrics and checks
// that every metric the dashboard's expressions select is exported, with
// the labels they name. Prometheus' target labels (instance, job) are added
// by the scrape, not the daemon.
func TestDashboard_MetricsExist(t *testing.T) {
	d := loadDashboard(t)
	exprs, varLabels := d.exprs(t)
	nw := testenv.NewNet(t, "hgd-", 79, "app")
	ns := nw.NS["app"]

	dir := t.TempDir()
	bin := filepath.Join(dir, "heraldd")
	args := append(append([]string{"build"}, testenv.GoBuildFlags()...), "-o", bin, "../cmd/heraldd")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go build heraldd: %v: %s", err, out)
	}
	stompAddr := nw.Addr["app"].String() + ":61613"
	const metricsAddr = "127.0.0.1:9464" // inside the namespace: nothing else listens there
	cfg := fmt.Sprintf(`data_dir = %q
[stomp]
listen = %q
[auth]
allow_anonymous = true
[admin]
socket = %q
metrics_listen = %q
[log]
level = "warn"
[[multicast.channel]]
name = "dash"
group = "239.255.79.1:7400"
interface = "eth0"
ttl = 1
topics = ["dash.>"]
`, filepath.Join(dir, "data"), stompAddr, filepath.Join(dir, "admin.sock"), metricsAddr)
	cfgPath := filepath.Join(dir, "heraldd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "--config", cfgPath)
	cmd.Stderr = testenv.RaceWatch(t, os.Stderr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGKILL); cmd.Wait() })

	// A queue, a topic on the channel: their labelled series exist from then on.
	var c *client.Conn
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := nw.In("app", func() error {
			var err error
			c, err = client.Dial(context.Background(), stompAddr, client.Options{DialTimeout: time.Second})
			return err
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heraldd not answering on %s: %v", stompAddr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.SendReceipt(ctx, "/queue/dash", []byte("q")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendReceipt(ctx, "/topic/dash.cpu", []byte("t")); err != nil {
		t.Fatal(err)
	}
	// A stream with a durable cursor: its per-stream and per-cursor series.
	if _, err := c.SendReceipt(ctx, "/stream/dash", []byte("s")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscribeReceipt(ctx, "/stream/dash", "client", stomp.Header{Key: "x-stream-consumer", Value: "dash"}); err != nil {
		t.Fatal(err)
	}

	var exported map[string]map[string]bool
	err := nw.In("app", func() error {
		// Dialled on this thread, which is in the namespace (an
		// http.Transport would dial from another one).
		conn, err := net.DialTimeout("tcp", metricsAddr, 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", metricsAddr)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		exported, err = scrape(resp.Body)
		return err
	})
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	if len(exported) < 20 {
		t.Fatalf("scrape: only %d metrics exported: %v", len(exported), exported)
	}

	allLabels := map[string]bool{"instance": true, "job": true}
	for _, ls := range exported {
		for l := range ls {
			allLabels[l] = true
		}
	}
	checked := 0
	for _, e := range exprs {
		names, labels, err := promqlNames(e)
		if err != nil {
			t.Errorf("expression %q: %v", e, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("expression %q selects no metric", e)
		}
		for _, n := range names {
			checked++
			if exported[n] == nil {
				t.Errorf("expression %q: metric %s is not exported by heraldd", e, n)
			}
		}
		if l, ok := varLabels[e]; ok {
			labels = append(labels, labelUse{names[0], l})
		}
		for _, l := range labels {
			switch {
			case l.label == "instance" || l.label == "job":
			case l.metric == "*":
				if !allLabels[l.label] {
					t.Errorf("expression %q: no exported metric has the label %s", e, l.label)
				}
			case exported[l.metric] != nil && !exported[l.metric][l.label]:
				t.Errorf("expression %q: %s has no label %s (it has %v)", e, l.metric, l.label, exported[l.metric])
			}
		}
	}
	t.Logf("%d expressions, %d metric references checked", len(exprs), checked)
}
