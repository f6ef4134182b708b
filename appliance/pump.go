package appliance

import "sync"

// pump submits the journal work that journal completions produced: a
// completion feeds a queue's core and adds the queue here; it never
// submits itself, so the journal's completion goroutine never waits for
// the journal's intake.
type pump struct {
	mu     sync.Mutex
	queued map[*queue]bool
	order  []*queue
	wake   chan struct{}
}

func newPump() *pump {
	return &pump{queued: map[*queue]bool{}, wake: make(chan struct{}, 1)}
}

// add asks for q's outbox to be flushed. It never blocks.
func (p *pump) add(q *queue) {
	p.mu.Lock()
	if !p.queued[q] {
		p.queued[q] = true
		p.order = append(p.order, q)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run flushes queued queues until stop is closed, and once more then.
func (p *pump) run(stop <-chan struct{}) {
	for {
		select {
		case <-p.wake:
		case <-stop:
			p.flushAll()
			return
		}
		p.flushAll()
	}
}

func (p *pump) flushAll() {
	for {
		p.mu.Lock()
		qs := p.order
		p.order = nil
		clear(p.queued)
		p.mu.Unlock()
		if len(qs) == 0 {
			return
		}
		for _, q := range qs {
			q.flush()
		}
	}
}
