package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
)

// Linearizability of the key-value store (issue 15): concurrent clients
// over real TCP put, compare-and-set, delete and get (kv-get) keys of one
// bucket of a real heraldd with a real SQLite journal; every call and return is timed
// on one monotonic clock, and the history is checked by Porcupine against
// a sequential model: a bucket whose revision grows by one per change, each
// key holding a value and the revision of its last change.
//
// What the model demands of every operation:
//   - put: the receipt's revision is the bucket's revision + 1;
//   - compare-and-set (if-revision N): if the key is at N (0: absent), the
//     same as a put; otherwise a kv-conflict carrying the key's revision;
//   - delete: of a key that exists, the same as a put (the key is then
//     absent); of one that does not, kv-noop and no revision;
//   - get: the key's value and revision, or its absence, and a snapshot
//     marker equal to the bucket's revision.
//
// An operation whose outcome is unknown (the daemon was killed before the
// answer) has an unknown output, and the model lets it take effect or not
// (a nondeterministic step: both states). It returns when the daemon it was
// sent to was reaped after SIGKILL: whatever it did, it did before. A get
// whose answer was lost is left out (it changed nothing).

const linKeys = 2

// linInput is one operation.
type linInput struct {
	Op    byte // 'p' put, 'c' compare-and-set, 'd' delete, 'g' get
	Key   int
	Value string
	IfRev uint64
}

// linOutput is what the server answered.
type linOutput struct {
	Unknown  bool   // no answer (the connection died)
	Rev      uint64 // put, CAS: the new revision; get: the key's
	Conflict bool   // CAS refused
	Noop     bool   // delete of a key that does not exist
	Current  uint64 // CAS refused: the key's revision
	Exists   bool   // get
	Value    string // get
	Marker   uint64 // get: kv-snapshot-complete
}

// linState is the model's state: comparable, so == is its equality.
type linState struct {
	Rev  uint64
	Vals [linKeys]string
	Revs [linKeys]uint64 // 0: the key does not exist
}

func linApply(s linState, in linInput) linState {
	s.Rev++
	s.Vals[in.Key], s.Revs[in.Key] = in.Value, s.Rev
	if in.Op == 'd' {
		s.Vals[in.Key], s.Revs[in.Key] = "", 0
	}
	return s
}

// linStep is the model's step: the states the bucket may be in after the
// operation, none if the answer is impossible. An unknown write may or may
// not have taken effect: both states.
func linStep(state, input, output any) []any {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	switch in.Op {
	case 'p':
		if out.Unknown {
			return []any{s, linApply(s, in)}
		}
		if out.Rev == s.Rev+1 {
			return []any{linApply(s, in)}
		}
	case 'd':
		exists := s.Revs[in.Key] != 0
		switch {
		case out.Unknown && exists:
			return []any{s, linApply(s, in)}
		case out.Unknown:
			return []any{s}
		case exists && !out.Noop && out.Rev == s.Rev+1:
			return []any{linApply(s, in)}
		case !exists && out.Noop:
			return []any{s}
		}
	case 'c':
		match := s.Revs[in.Key] == in.IfRev
		switch {
		case out.Unknown && match:
			return []any{s, linApply(s, in)}
		case out.Unknown:
			return []any{s}
		case match && !out.Conflict && out.Rev == s.Rev+1:
			return []any{linApply(s, in)}
		case !match && out.Conflict && out.Current == s.Revs[in.Key]:
			return []any{s}
		}
	case 'g':
		exists := s.Revs[in.Key] != 0
		ok := out.Exists == exists && out.Marker == s.Rev
		if exists {
			ok = ok && out.Value == s.Vals[in.Key] && out.Rev == s.Revs[in.Key]
		}
		if ok {
			return []any{s}
		}
	}
	return nil
}

var linModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{linState{}} },
	Step: linStep,
	Hash: func(state any) uint64 {
		s := state.(linState)
		h := s.Rev*0x9e3779b97f4a7c15 ^ s.Revs[0]*31 ^ s.Revs[1]*131
		for _, v := range s.Vals {
			for i := 0; i < len(v); i++ {
				h = h*1099511628211 ^ uint64(v[i])
			}
		}
		return h
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		res := fmt.Sprintf("%+v", out)
		if out.Unknown {
			res = "unknown"
		}
		switch in.Op {
		case 'p':
			return fmt.Sprintf("put(k%d, %s) -> %s", in.Key, in.Value, res)
		case 'c':
			return fmt.Sprintf("cas(k%d, %s, if %d) -> %s", in.Key, in.Value, in.IfRev, res)
		case 'd':
			return fmt.Sprintf("del(k%d) -> %s", in.Key, res)
		}
		return fmt.Sprintf("get(k%d) -> %s", in.Key, res)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(linState)) },
}).ToModel()

// linCheck checks history; on a failure it writes Porcupine's
// visualisation next to the test's temporary files and names it.
func linCheck(t *testing.T, history []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(linModel, history, 2*time.Minute)
	if res != porcupine.Ok {
		f, err := os.CreateTemp("", "herald-kv-linearizability-*.html")
		if err == nil {
			porcupine.Visualize(linModel, info, f)
			f.Close()
			t.Logf("Porcupine's view of the history: %s", f.Name())
		}
	}
	return res
}

// The checker can fail: histories that are not linearizable are refused,
// and the same shapes made legal are accepted.
func TestKVLinearizability_CheckerRejects(t *testing.T) {
	op := func(client int, in linInput, call, ret int64, out linOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	put := func(k int, v string) linInput { return linInput{Op: 'p', Key: k, Value: v} }
	cas := func(k int, v string, n uint64) linInput { return linInput{Op: 'c', Key: k, Value: v, IfRev: n} }
	get := func(k int) linInput { return linInput{Op: 'g', Key: k} }
	del := func(k int) linInput { return linInput{Op: 'd', Key: k} }
	for _, tc := range []struct {
		name string
		h    []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"stale read after a completed put", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, get(0), 20, 30, linOutput{Exists: false, Marker: 0}),
		}, porcupine.Illegal},
		{"read concurrent with the put may see either", []porcupine.Operation{
			op(0, put(0, "a"), 0, 30, linOutput{Rev: 1}),
			op(1, get(0), 10, 20, linOutput{Exists: false, Marker: 0}),
		}, porcupine.Ok},
		{"two create-only CAS both succeed", []porcupine.Operation{
			op(0, cas(0, "a", 0), 0, 10, linOutput{Rev: 1}),
			op(1, cas(0, "b", 0), 0, 10, linOutput{Rev: 2}),
		}, porcupine.Illegal},
		{"two create-only CAS, one conflicts", []porcupine.Operation{
			op(0, cas(0, "a", 0), 0, 10, linOutput{Rev: 1}),
			op(1, cas(0, "b", 0), 0, 10, linOutput{Conflict: true, Current: 1}),
		}, porcupine.Ok},
		{"revision reused", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, put(1, "b"), 20, 30, linOutput{Rev: 1}),
		}, porcupine.Illegal},
		{"lost update: a receipted put gone after a later one of another key", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, put(1, "b"), 20, 30, linOutput{Rev: 2}),
			op(2, get(0), 40, 50, linOutput{Exists: false, Marker: 2}),
		}, porcupine.Illegal},
		{"an unknown put may have happened", []porcupine.Operation{
			op(0, put(0, "a"), 0, math.MaxInt64, linOutput{Unknown: true}),
			op(1, get(0), 20, 30, linOutput{Exists: true, Value: "a", Rev: 1, Marker: 1}),
		}, porcupine.Ok},
		{"an unknown put may not have happened", []porcupine.Operation{
			op(0, put(0, "a"), 0, math.MaxInt64, linOutput{Unknown: true}),
			op(1, get(0), 20, 30, linOutput{Exists: false, Marker: 0}),
		}, porcupine.Ok},
		{"an unknown put cannot be seen before its call", []porcupine.Operation{
			op(1, get(0), 0, 10, linOutput{Exists: true, Value: "a", Rev: 1, Marker: 1}),
			op(0, put(0, "a"), 20, math.MaxInt64, linOutput{Unknown: true}),
		}, porcupine.Illegal},
		{"an unknown write cannot take effect after the daemon died", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Unknown: true}),
			op(1, get(0), 20, 30, linOutput{Exists: false, Marker: 0}),
			op(1, get(0), 40, 50, linOutput{Exists: true, Value: "a", Rev: 1, Marker: 1}),
		}, porcupine.Illegal},
		{"an unknown CAS on a stale revision cannot take effect", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, cas(0, "b", 5), 20, 30, linOutput{Unknown: true}),
			op(2, get(0), 40, 50, linOutput{Exists: true, Value: "b", Rev: 2, Marker: 2}),
		}, porcupine.Illegal},
		{"a deleted key read back", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, del(0), 20, 30, linOutput{Rev: 2}),
			op(2, get(0), 40, 50, linOutput{Exists: true, Value: "a", Rev: 1, Marker: 2}),
		}, porcupine.Illegal},
		{"a delete that moves no revision", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, del(0), 20, 30, linOutput{Rev: 2}),
			op(2, get(0), 40, 50, linOutput{Exists: false, Marker: 1}),
		}, porcupine.Illegal},
		{"a delete, then the key is absent and the bucket one revision on", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, del(0), 20, 30, linOutput{Rev: 2}),
			op(2, get(0), 40, 50, linOutput{Exists: false, Marker: 2}),
			op(2, del(0), 60, 70, linOutput{Noop: true}),
		}, porcupine.Ok},
		{"a no-op delete of a key that exists", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, del(0), 20, 30, linOutput{Noop: true}),
		}, porcupine.Illegal},
		{"conflict naming a wrong current revision", []porcupine.Operation{
			op(0, put(0, "a"), 0, 10, linOutput{Rev: 1}),
			op(1, cas(0, "b", 7), 20, 30, linOutput{Conflict: true, Current: 2}),
		}, porcupine.Illegal},
	} {
		if got := porcupine.CheckOperationsTimeout(linModel, tc.h, 10*time.Second); got != tc.want {
			t.Errorf("%s: checker says %v, want %v", tc.name, got, tc.want)
		}
	}
}

// linRecorder collects the history of every client.
type linRecorder struct {
	t0    time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	kills []int64 // when each killed daemon had been reaped
}

// killed records that the daemon is dead (after SIGKILL and wait).
func (r *linRecorder) killed() {
	t := r.now()
	r.mu.Lock()
	r.kills = append(r.kills, t)
	r.mu.Unlock()
}

func (r *linRecorder) now() int64 { return int64(time.Since(r.t0)) }

func (r *linRecorder) add(op porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// history returns the operations, each unknown one returning at the first
// kill after its call (no kill: never).
func (r *linRecorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := append([]porcupine.Operation(nil), r.ops...)
	for i := range h {
		if !h[i].Output.(linOutput).Unknown {
			continue
		}
		h[i].Return = math.MaxInt64
		for _, k := range r.kills {
			if k >= h[i].Call {
				h[i].Return = k
				break
			}
		}
	}
	return h
}

func linDest(k int) string { return "/kv/lin.k" + strconv.Itoa(k) }

// linWrite sends a put or CAS and returns its outcome; err says the
// outcome is unknown.
func linWrite(c *client.Conn, in linInput) (linOutput, error) {
	var hdrs []stomp.Header
	switch in.Op {
	case 'c':
		hdrs = append(hdrs, stomp.Header{Key: "if-revision", Value: strconv.FormatUint(in.IfRev, 10)})
	case 'd':
		hdrs = append(hdrs, stomp.Header{Key: "kv-operation", Value: "DEL"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.SendReceipt(ctx, linDest(in.Key), []byte(in.Value), hdrs...)
	if err != nil {
		return linOutput{}, err
	}
	if r.Get("kv-noop") == "true" {
		return linOutput{Noop: true}, nil
	}
	if v := r.Get("kv-conflict"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		return linOutput{Conflict: true, Current: n}, err
	}
	n, err := strconv.ParseUint(r.Get("revision"), 10, 64)
	return linOutput{Rev: n}, err
}

// linGet reads one key with kv-get.
func linGet(c *client.Conn, k int) (linOutput, error) {
	sub, err := c.Subscribe(linDest(k), "auto", stomp.Header{Key: "kv-get", Value: "true"})
	if err != nil {
		return linOutput{}, err
	}
	var out linOutput
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case m, ok := <-sub.C():
			if !ok {
				return out, errors.New("subscription ended")
			}
			if v := m.Get("kv-snapshot-complete"); v != "" {
				out.Marker, err = strconv.ParseUint(v, 10, 64)
				if err != nil {
					return out, err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return out, sub.Unsubscribe(ctx)
			}
			out.Exists, out.Value = true, string(m.Body)
			if out.Rev, err = strconv.ParseUint(m.Get("revision"), 10, 64); err != nil {
				return out, err
			}
		case <-c.Done():
			return out, c.Err()
		case <-timeout.C:
			return out, errors.New("no snapshot marker within 10s")
		}
	}
}

// linClientLoop runs one client until stop: random puts, CAS (with the
// revision it last saw, create-only, or a stale one) and gets. With
// crashes, a failed operation is recorded as unknown (gets: dropped) and
// the client dials again; without, a failure fails the test.
func linClientLoop(t *testing.T, id int, addr string, rec *linRecorder, stop <-chan struct{}, crashes bool) {
	rng := rand.New(rand.NewPCG(uint64(id), 15))
	var seen [linKeys]uint64
	var c *client.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if c == nil {
			var err error
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			c, err = client.Dial(ctx, addr, client.Options{DialTimeout: 200 * time.Millisecond})
			cancel()
			if err != nil {
				if !crashes {
					t.Errorf("client %d: dial: %v", id, err)
					return
				}
				c = nil
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		k := rng.IntN(linKeys)
		in := linInput{Op: 'g', Key: k}
		switch p := rng.IntN(10); {
		case p < 4:
			in = linInput{Op: 'p', Key: k, Value: fmt.Sprintf("c%d-%d", id, i)}
		case p == 7:
			in = linInput{Op: 'd', Key: k}
		case p < 7:
			in = linInput{Op: 'c', Key: k, Value: fmt.Sprintf("c%d-%d", id, i), IfRev: seen[k]}
			switch rng.IntN(5) {
			case 0:
				in.IfRev = 0
			case 1:
				in.IfRev = seen[k] / 2
			}
		}
		call := rec.now()
		var out linOutput
		var err error
		if in.Op == 'g' {
			out, err = linGet(c, k)
		} else {
			out, err = linWrite(c, in)
		}
		ret := rec.now()
		if err != nil {
			if !crashes {
				t.Errorf("client %d: %c k%d: %v", id, in.Op, k, err)
				return
			}
			c.Close()
			c = nil
			if in.Op != 'g' {
				rec.add(porcupine.Operation{ClientId: id, Input: in, Call: call, Output: linOutput{Unknown: true}, Return: math.MaxInt64})
			}
			continue
		}
		switch {
		case out.Conflict:
			seen[k] = out.Current
		case in.Op == 'd', in.Op == 'g' && !out.Exists:
			seen[k] = 0
		default:
			seen[k] = out.Rev
		}
		rec.add(porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
	}
}

func linSummary(h []porcupine.Operation) (puts, cas, conflicts, dels, gets, unknown int) {
	for _, op := range h {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		switch {
		case out.Unknown:
			unknown++
		case in.Op == 'p':
			puts++
		case in.Op == 'd':
			dels++
		case in.Op == 'c' && out.Conflict:
			conflicts++
		case in.Op == 'c':
			cas++
		default:
			gets++
		}
	}
	return
}

// linRequireChecked checks the history, then shows the checker is awake on
// this very history: with one get's answer changed to a value never
// written, it must be refused.
func linRequireChecked(t *testing.T, h []porcupine.Operation) {
	t.Helper()
	puts, cas, conflicts, dels, gets, unknown := linSummary(h)
	t.Logf("%d operations: %d puts, %d CAS applied, %d CAS conflicts, %d deletes, %d gets, %d unknown", len(h), puts, cas, conflicts, dels, gets, unknown)
	if puts < 20 || cas < 5 || conflicts < 5 || dels < 5 || gets < 20 {
		t.Fatalf("too few operations of some kind to say anything (puts %d, CAS %d, conflicts %d, deletes %d, gets %d)", puts, cas, conflicts, dels, gets)
	}
	start := time.Now()
	if res := linCheck(t, h); res != porcupine.Ok {
		t.Fatalf("the history is not linearizable (checker: %v)", res)
	}
	t.Logf("checked in %v", time.Since(start).Round(time.Millisecond))
	for i, op := range h {
		if in, out := op.Input.(linInput), op.Output.(linOutput); in.Op == 'g' && out.Exists {
			bad := append([]porcupine.Operation(nil), h...)
			out.Value = "never written"
			bad[i].Output = out
			if res := porcupine.CheckOperationsTimeout(linModel, bad, 2*time.Minute); res != porcupine.Illegal {
				t.Fatalf("a get answering a value never written was not refused (checker: %v)", res)
			}
			return
		}
	}
	t.Fatal("no get found a key: the history tells nothing")
}

// Five clients for two seconds against one heraldd.
func TestKVLinearizability_ConcurrentClients(t *testing.T) {
	if testing.Short() {
		t.Skip("linearizability test skipped in -short mode")
	}
	addr := freeAddr(t)
	startChild(t, t.TempDir(), addr)
	rec := &linRecorder{t0: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := 0; id < 5; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			linClientLoop(t, id, addr, rec, stop, false)
		}()
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	linRequireChecked(t, rec.history())
}

// The same while heraldd is killed with SIGKILL and restarted on the same
// data directory three times: writes whose answer was lost are left open;
// everything receipted before a kill must be seen after it, revisions
// never reused.
func TestKVLinearizability_KillNineRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := filepath.Join(t.TempDir(), "data")
	addr := freeAddr(t)
	d := startChild(t, dir, addr)
	rec := &linRecorder{t0: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := 0; id < 5; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			linClientLoop(t, id, addr, rec, stop, true)
		}()
	}
	for round := 0; round < 3; round++ {
		time.Sleep(time.Duration(500+150*round) * time.Millisecond)
		d.kill()
		rec.killed()
		d = startChild(t, dir, addr)
	}
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()
	h := rec.history()
	if _, _, _, _, _, unknown := linSummary(h); unknown == 0 {
		t.Logf("no write was caught by a kill (all answered): the crash rounds checked durability only")
	}
	linRequireChecked(t, h)
}
