// Command kvpeers measures a key-value store, Herald's (/kv/ over STOMP) or
// etcd's (v3 gRPC API), with the same shape for both, for bench/kv-peers.sh:
//
//	kvpeers -target herald -addr 127.0.0.1:61614 -case put -writers 4 -duration 10s
//	kvpeers -target etcd -addr 127.0.0.1:2479 -case cas -writers 4
//	kvpeers -target herald -addr ... -case fanout -watchers 20 -puts 500
//	kvpeers -table runs.jsonl      # Markdown table of medians and ratios
//
// Cases:
//   - put: each writer (its own connection) puts keys of its own, one
//     request outstanding, waiting for the answer (Herald: the RECEIPT, once
//     the change is in the journal; etcd: the Put response, once committed);
//   - cas: writers race compare-and-set on one counter key with a read-free
//     retry (Herald: if-revision, a conflict's kv-conflict gives the current
//     revision; etcd: a Txn If ModRevision = N Then Put Else Get); counted:
//     successful CAS per second, conflicts per success;
//   - fanout: watchers (each its own connection) watch a prefix; one writer
//     puts a key, waits until every watcher has the change, then puts the
//     next; latency from before the put to the arrival at each watcher.
//
// It prints one JSON line per run. It is a module of its own (bench/kvpeers/
// go.mod) so that the etcd client does not enter Herald's go.mod.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// result is one run.
type result struct {
	Target   string  `json:"target"`
	Case     string  `json:"case"`
	Writers  int     `json:"writers,omitempty"`
	Watchers int     `json:"watchers,omitempty"`
	Size     int     `json:"size"`
	Seconds  float64 `json:"seconds"`
	Ops      int64   `json:"ops"`
	OpsPerS  float64 `json:"ops_per_s"`
	// cas
	ConflictsPerOp float64 `json:"conflicts_per_op,omitempty"`
	// fanout, microseconds: each watcher's delivery, and the last of each put
	P50us     float64 `json:"p50_us,omitempty"`
	P99us     float64 `json:"p99_us,omitempty"`
	LastP50us float64 `json:"last_p50_us,omitempty"`
	LastP99us float64 `json:"last_p99_us,omitempty"`
}

// kv is the little a case needs of a store.
type kv interface {
	put(ctx context.Context, key string, val []byte) error
	// cas puts if key is at rev (0: absent); else returns the current revision.
	cas(ctx context.Context, key string, val []byte, rev int64) (ok bool, current int64, err error)
	// watch calls fn for every change under prefix after the call returns.
	watch(ctx context.Context, prefix string, fn func(key string)) error
	close()
}

func main() {
	target := flag.String("target", "herald", "herald or etcd")
	addr := flag.String("addr", "", "host:port of the store (Herald's STOMP, etcd's client URL without http://)")
	cs := flag.String("case", "put", "put, cas or fanout")
	writers := flag.Int("writers", 1, "writers (put, cas)")
	watchers := flag.Int("watchers", 20, "watchers (fanout)")
	puts := flag.Int("puts", 500, "puts (fanout)")
	duration := flag.Duration("duration", 10*time.Second, "how long (put, cas)")
	warmup := flag.Duration("warmup", time.Second, "not counted, before the duration (put, cas)")
	size := flag.Int("size", 100, "value bytes")
	prefix := flag.String("prefix", "kvpeers", "key prefix (Herald: the bucket)")
	table := flag.String("table", "", "print the Markdown table of the runs in this JSON-lines file and exit")
	flag.Parse()
	if *table != "" {
		if err := printTable(*table); err != nil {
			fail(err)
		}
		return
	}
	dial := func() (kv, error) {
		switch *target {
		case "herald":
			return dialHerald(*addr)
		case "etcd":
			return dialEtcd(*addr)
		}
		return nil, fmt.Errorf("-target %q: want herald or etcd", *target)
	}
	val := []byte(strings.Repeat("v", *size))
	var r result
	var err error
	switch *cs {
	case "put":
		r, err = runPut(dial, *writers, *duration, *warmup, *prefix, val, false)
	case "cas":
		r, err = runPut(dial, *writers, *duration, *warmup, *prefix, val, true)
	case "fanout":
		r, err = runFanout(dial, *watchers, *puts, *prefix, val)
	default:
		err = fmt.Errorf("-case %q: want put, cas or fanout", *cs)
	}
	if err != nil {
		fail(err)
	}
	r.Target, r.Case, r.Size = *target, *cs, *size
	json.NewEncoder(os.Stdout).Encode(r)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "kvpeers: %v\n", err)
	os.Exit(1)
}

// runPut runs writers putting (or CASing one counter) for warmup+duration,
// counting the operations done in duration.
func runPut(dial func() (kv, error), writers int, duration, warmup time.Duration, prefix string, val []byte, cas bool) (result, error) {
	stores := make([]kv, writers)
	for i := range stores {
		s, err := dial()
		if err != nil {
			return result{}, err
		}
		defer s.close()
		stores[i] = s
	}
	var counting atomic.Bool
	var ops, conflicts atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rev int64
			for i := 0; ctx.Err() == nil; i++ {
				if !cas {
					if err := s.put(ctx, fmt.Sprintf("%s.w%d.k%d", prefix, w, i%100), val); err != nil {
						errs <- err
						return
					}
					if counting.Load() {
						ops.Add(1)
					}
					continue
				}
				ok, cur, err := s.cas(ctx, prefix+".counter", val, rev)
				if err != nil {
					errs <- err
					return
				}
				if !counting.Load() {
					rev = cur
					continue
				}
				if ok {
					ops.Add(1)
				} else {
					conflicts.Add(1)
				}
				rev = cur
			}
		}()
	}
	time.Sleep(warmup)
	counting.Store(true)
	start := time.Now()
	select {
	case <-time.After(duration):
	case err := <-errs:
		return result{}, err
	}
	counting.Store(false)
	secs := time.Since(start).Seconds()
	n := ops.Load()
	cancel()
	wg.Wait()
	r := result{Case: "put", Writers: writers, Seconds: secs, Ops: n, OpsPerS: float64(n) / secs}
	if cas && n > 0 {
		r.ConflictsPerOp = float64(conflicts.Load()) / float64(n)
	}
	return r, nil
}

// runFanout: watchers on prefix, one writer, one put at a time.
func runFanout(dial func() (kv, error), watchers, puts int, prefix string, val []byte) (result, error) {
	type arrival struct {
		key string
		at  time.Time
	}
	arrivals := make(chan arrival, watchers*4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < watchers; i++ {
		s, err := dial()
		if err != nil {
			return result{}, err
		}
		defer s.close()
		if err := s.watch(ctx, prefix+".fan", func(key string) { arrivals <- arrival{key, time.Now()} }); err != nil {
			return result{}, err
		}
	}
	w, err := dial()
	if err != nil {
		return result{}, err
	}
	defer w.close()
	var each, last []float64
	start := time.Now()
	for i := 0; i < puts; i++ {
		key := prefix + ".fan.k" + strconv.Itoa(i)
		t0 := time.Now()
		if err := w.put(ctx, key, val); err != nil {
			return result{}, err
		}
		var lastAt time.Duration
		for got := 0; got < watchers; {
			select {
			case a := <-arrivals:
				if a.key != key {
					return result{}, fmt.Errorf("watcher got %s while waiting for %s", a.key, key)
				}
				d := a.at.Sub(t0)
				each = append(each, float64(d.Microseconds()))
				lastAt = max(lastAt, d)
				got++
			case <-time.After(30 * time.Second):
				return result{}, fmt.Errorf("put %d: only %d of %d watchers had it after 30s", i, got, watchers)
			}
		}
		last = append(last, float64(lastAt.Microseconds()))
	}
	secs := time.Since(start).Seconds()
	return result{Watchers: watchers, Seconds: secs, Ops: int64(puts), OpsPerS: float64(puts) / secs,
		P50us: pct(each, 50), P99us: pct(each, 99), LastP50us: pct(last, 50), LastP99us: pct(last, 99)}, nil
}

func pct(v []float64, p int) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

// ---- Herald ------------------------------------------------------------

type herald struct{ c *client.Conn }

func dialHerald(addr string) (kv, error) {
	c, err := client.Dial(context.Background(), addr, client.Options{DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	return &herald{c: c}, nil
}

func (h *herald) close() { h.c.Close() }

func (h *herald) put(ctx context.Context, key string, val []byte) error {
	r, err := h.c.SendReceipt(ctx, "/kv/"+key, val)
	if err == nil && r.Get("revision") == "" {
		err = fmt.Errorf("put %s: receipt without revision", key)
	}
	return err
}

func (h *herald) cas(ctx context.Context, key string, val []byte, rev int64) (bool, int64, error) {
	r, err := h.c.SendReceipt(ctx, "/kv/"+key, val, stomp.Header{Key: "if-revision", Value: strconv.FormatInt(rev, 10)})
	if err != nil {
		return false, 0, err
	}
	if c := r.Get("kv-conflict"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		return false, n, err
	}
	n, err := strconv.ParseInt(r.Get("revision"), 10, 64)
	return true, n, err
}

func (h *herald) watch(ctx context.Context, prefix string, fn func(string)) error {
	sub, err := h.c.SubscribeReceipt(ctx, "/kv/"+prefix+".>", "auto")
	if err != nil {
		return err
	}
	for m := range sub.C() { // the snapshot, up to its marker
		if m.Get("kv-snapshot-complete") != "" {
			break
		}
	}
	go func() {
		for m := range sub.C() {
			fn(strings.TrimPrefix(m.Get("destination"), "/kv/"))
		}
	}()
	return nil
}

// ---- etcd --------------------------------------------------------------

type etcd struct{ c *clientv3.Client }

func dialEtcd(addr string) (kv, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &etcd{c: c}, nil
}

func (e *etcd) close() { e.c.Close() }

func (e *etcd) put(ctx context.Context, key string, val []byte) error {
	_, err := e.c.Put(ctx, key, string(val))
	return err
}

func (e *etcd) cas(ctx context.Context, key string, val []byte, rev int64) (bool, int64, error) {
	r, err := e.c.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(val))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, 0, err
	}
	if r.Succeeded {
		return true, r.Header.Revision, nil
	}
	kvs := r.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return false, 0, nil
	}
	return false, kvs[0].ModRevision, nil
}

func (e *etcd) watch(ctx context.Context, prefix string, fn func(string)) error {
	// The watch is in place once etcd acknowledges its creation.
	wctx := clientv3.WithRequireLeader(ctx)
	ch := e.c.Watch(wctx, prefix+".", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	select {
	case wr, ok := <-ch:
		if !ok || !wr.Created {
			return errors.New("etcd watch not created")
		}
	case <-time.After(10 * time.Second):
		return errors.New("etcd watch: no created notification within 10s")
	}
	go func() {
		for wr := range ch {
			for _, ev := range wr.Events {
				fn(string(ev.Kv.Key))
			}
		}
	}()
	return nil
}

// ---- table -------------------------------------------------------------

func printTable(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	type key struct {
		cs      string
		writers int
	}
	runs := map[key]map[string][]result{}
	var order []key
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("%s: %v", file, err)
		}
		k := key{r.Case, r.Writers + r.Watchers}
		if runs[k] == nil {
			runs[k] = map[string][]result{}
			order = append(order, k)
		}
		runs[k][r.Target] = append(runs[k][r.Target], r)
	}
	med := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	ops := func(r result) float64 { return r.OpsPerS }
	fmt.Println("| case | Herald | etcd | Herald/etcd | runs (Herald / etcd) |")
	fmt.Println("|---|---|---|---|---|")
	for _, k := range order {
		h, e := runs[k]["herald"], runs[k]["etcd"]
		ratio := func(a, b float64) string {
			if b == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", a/b)
		}
		n := fmt.Sprintf("%d / %d", len(h), len(e))
		switch k.cs {
		case "put", "cas":
			name := fmt.Sprintf("%s, %d writers, ops/s (higher is better)", k.cs, k.writers)
			hv, ev := med(h, ops), med(e, ops)
			fmt.Printf("| %s | %.0f | %.0f | %s | %s |\n", name, hv, ev, ratio(hv, ev), n)
			if k.cs == "cas" {
				c := func(r result) float64 { return r.ConflictsPerOp }
				fmt.Printf("| cas, %d writers, conflicts per success | %.2f | %.2f | | %s |\n", k.writers, med(h, c), med(e, c), n)
			}
		case "fanout":
			for _, m := range []struct {
				name string
				f    func(result) float64
			}{
				{"p50 µs, each watcher", func(r result) float64 { return r.P50us }},
				{"p99 µs, each watcher", func(r result) float64 { return r.P99us }},
				{"p50 µs, last of the watchers", func(r result) float64 { return r.LastP50us }},
				{"p99 µs, last of the watchers", func(r result) float64 { return r.LastP99us }},
			} {
				hv, ev := med(h, m.f), med(e, m.f)
				fmt.Printf("| fan-out to %d watchers, %s (lower is better) | %.0f | %.0f | %s | %s |\n", k.writers, m.name, hv, ev, ratio(hv, ev), n)
			}
		}
	}
	return sc.Err()
}
