package appliance_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/herald-mq/herald/appliance"
)

// errInjected is the failure faultJournal reports.
var errInjected = errors.New("injected journal failure (disk I/O error)")

// faultJournal wraps the real journal: it fails the batches fail picks
// (reported on the journal's own completion goroutine, in order, nothing
// applied), fails loads while failLoads is set, and counts every Submit
// made from inside a completion (which must never happen).
type faultJournal struct {
	appliance.Journal

	mu   sync.Mutex
	fail func(b *appliance.Batch) bool

	failLoads           atomic.Bool
	failed              atomic.Int64
	completionGID       atomic.Int64
	submitsInCompletion atomic.Int64
}

func (j *faultJournal) setFail(f func(b *appliance.Batch) bool) {
	j.mu.Lock()
	j.fail = f
	j.mu.Unlock()
}

func (j *faultJournal) Submit(b *appliance.Batch) {
	if gid := j.completionGID.Load(); gid != 0 && goid() == gid {
		j.submitsInCompletion.Add(1)
	}
	j.mu.Lock()
	fail := j.fail
	j.mu.Unlock()
	done := b.Done
	if fail != nil && fail(b) {
		j.failed.Add(1)
		j.Journal.Submit(&appliance.Batch{Ops: []appliance.Op{{Kind: appliance.OpBarrier}}, Done: func(*appliance.Batch, error) {
			j.completionGID.Store(goid())
			done(b, errInjected)
		}})
		return
	}
	b.Done = func(bb *appliance.Batch, err error) {
		j.completionGID.Store(goid())
		done(bb, err)
	}
	j.Journal.Submit(b)
}

func (j *faultJournal) Load(ctx context.Context, queue string, after uint64, limit int) ([]*appliance.Message, error) {
	if j.failLoads.Load() {
		return nil, errInjected
	}
	return j.Journal.Load(ctx, queue, after, limit)
}

// goid is the current goroutine's id (tests only).
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		n, _ := strconv.ParseInt(string(b[:i]), 10, 64)
		return n
	}
	return 0
}

// hasOp reports whether b has an operation of kind k.
func hasOp(b *appliance.Batch, k appliance.OpKind) bool {
	for _, op := range b.Ops {
		if op.Kind == k {
			return true
		}
	}
	return false
}

// startFaulty starts a broker whose journal is wrapped by a faultJournal.
func startFaulty(t *testing.T, mutate func(*appliance.Config)) (*testBroker, *faultJournal) {
	t.Helper()
	fj := &faultJournal{}
	tb := startWrapped(t, mutate, func(j appliance.Journal) appliance.Journal {
		fj.Journal = j
		return fj
	})
	t.Cleanup(func() {
		if n := fj.submitsInCompletion.Load(); n > 0 {
			t.Errorf("%d journal submits from inside a journal completion; completions must only signal", n)
		}
	})
	return tb, fj
}
