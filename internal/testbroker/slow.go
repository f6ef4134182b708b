package testbroker

import (
	"sync/atomic"
	"time"

	"github.com/herald-mq/herald/appliance"
)

// slowOps hands each batch holding an op of kind to the journal late.
type slowOps struct {
	appliance.Journal
	appliance.StreamJournal
	kind  appliance.OpKind
	delay *atomic.Int64 // ns
}

// SlowOps is a Wrap (Options.Wrap) that hands each batch holding an op of
// kind to the journal *delay nanoseconds late, from its own goroutine: an
// operation of a few such batches (a purge's parts, a stream delete's
// steps) outlasts what a test lets its caller wait. The journal keeps its
// streams (appliance.StreamJournal).
func SlowOps(kind appliance.OpKind, delay *atomic.Int64) func(appliance.Journal) appliance.Journal {
	return func(j appliance.Journal) appliance.Journal {
		sj, _ := j.(appliance.StreamJournal)
		return &slowOps{Journal: j, StreamJournal: sj, kind: kind, delay: delay}
	}
}

func (j *slowOps) Submit(b *appliance.Batch) {
	for _, op := range b.Ops {
		if op.Kind == j.kind {
			go func() {
				time.Sleep(time.Duration(j.delay.Load()))
				j.Journal.Submit(b)
			}()
			return
		}
	}
	j.Journal.Submit(b)
}
