package appliance_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herald-mq/herald/appliance"
	"github.com/herald-mq/herald/appliance/stomp"
	"github.com/herald-mq/herald/appliance/stomp/client"
	"github.com/herald-mq/herald/journal"
	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver, for the fault-injecting side connection
)

// The lone-SEND inline commit (journal.Store.CommitNow, called by the
// broker's intake) under failures: the other fault tests wrap the journal
// in a faultJournal, which is not a Committer, so the inline path never
// runs there. Here the broker sees the real *journal.Store, observed by
// cnfJournal, and failures are real SQL failures: a trigger on the
// messages table refuses every row whose body contains "poison" (the
// statement fails inside the transaction, which is rolled back).

// cnfPoisonTrigger makes SQLite abort the insert of any message whose
// body contains "poison", as a failing disk would fail the commit.
const cnfPoisonTrigger = `CREATE TRIGGER IF NOT EXISTS test_poison BEFORE INSERT ON messages
	WHEN instr(NEW.body, CAST('poison' AS BLOB)) > 0
	BEGIN SELECT RAISE(ABORT, 'injected fault: poison message refused'); END`

// cnfInline is one batch CommitNow committed (and ran the Done of).
type cnfInline struct {
	body string // the enqueued message's body ("" for other batches)
	err  error  // what its Done got
}

// cnfJournal is the real journal (its Submit, Load, ...) and a
// Committer: CommitNow is the real Store's, with every batch it committed
// inline recorded in order, with the error its Done received.
type cnfJournal struct {
	appliance.Journal
	store *journal.Store

	// closed is set once Close of the store returned: CommitNow must
	// not commit anything afterwards.
	closed          atomic.Bool
	inlineAfterShut atomic.Int64

	mu     sync.Mutex
	inline []cnfInline
}

var _ appliance.Committer = (*cnfJournal)(nil)

func (j *cnfJournal) CommitNow(b *appliance.Batch) bool {
	shut := j.closed.Load()
	done := b.Done
	b.Done = func(bb *appliance.Batch, err error) {
		j.mu.Lock()
		j.inline = append(j.inline, cnfInline{body: cnfBody(bb), err: err})
		j.mu.Unlock()
		if done != nil {
			done(bb, err)
		}
	}
	if j.store.CommitNow(b) {
		if shut {
			j.inlineAfterShut.Add(1)
		}
		return true
	}
	b.Done = done // refused: b is the caller's to submit, untouched
	return false
}

// inlineResult reports whether the batch enqueueing body was committed
// inline, and the error its Done got then.
func (j *cnfJournal) inlineResult(body string) (bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, c := range j.inline {
		if c.body == body {
			return true, c.err
		}
	}
	return false, nil
}

func (j *cnfJournal) inlineLog() []cnfInline {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.inline)
}

func cnfBody(b *appliance.Batch) string {
	if len(b.Ops) == 1 && b.Ops[0].Kind == appliance.OpEnqueue {
		return string(b.Ops[0].Msg.Body)
	}
	return ""
}

// startCommitNow starts a broker whose journal is the real store seen
// through a cnfJournal; with poison, the poison trigger is installed in
// the database before the broker opens (and stays across restarts).
func startCommitNow(t *testing.T, poison bool) (*testBroker, *cnfJournal) {
	t.Helper()
	cj := &cnfJournal{}
	tb := startWrapped(t, nil, func(j appliance.Journal) appliance.Journal {
		s := j.(*journal.Store)
		if poison {
			cnfExec(t, s.Path(), cnfPoisonTrigger)
		}
		cj.Journal, cj.store = j, s
		cj.closed.Store(false)
		return cj
	})
	return tb, cj
}

// cnfSideDB opens a second connection pool on the journal's database file.
func cnfSideDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// cnfExec runs stmt on the journal's database through a side connection.
func cnfExec(t *testing.T, path, stmt string) {
	t.Helper()
	db := cnfSideDB(t, path)
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// cnfPoisonRows counts the message rows whose body contains "poison", in
// any queue (a row left under a rolled-back queue id included).
func cnfPoisonRows(t *testing.T, path string) int {
	t.Helper()
	db := cnfSideDB(t, path)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM messages WHERE instr(body, CAST('poison' AS BLOB)) > 0`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// cnfStored lists the bodies of queue's messages in the journal, in ID
// order.
func cnfStored(t *testing.T, s *journal.Store, queue string) []string {
	t.Helper()
	var out []string
	var after uint64
	for {
		ms, err := s.Load(context.Background(), queue, after, 500)
		if err != nil {
			t.Fatalf("load %s: %v", queue, err)
		}
		if len(ms) == 0 {
			return out
		}
		for _, m := range ms {
			out = append(out, string(m.Body))
			after = m.ID
		}
	}
}

// cnfSend writes a lone durable SEND with a receipt on r (nothing else
// buffered: the broker may commit it inline) and returns the answer.
func cnfSend(r *raw, dest, body, receipt string) *stomp.Frame {
	r.t.Helper()
	r.write("SEND\ndestination:" + dest + "\npersistent:true\nreceipt:" + receipt + "\ncontent-type:text/plain\n\n" + body + "\x00")
	return r.frame()
}

// cnfWantReceipt checks that f is the RECEIPT of receipt and returns its
// message-id.
func cnfWantReceipt(t *testing.T, f *stomp.Frame, receipt string) uint64 {
	t.Helper()
	if f.Command != stomp.CmdReceipt || f.Get("receipt-id") != receipt {
		t.Fatalf("got %s %v %q, want RECEIPT receipt-id:%s", f.Command, f.Headers, f.Body, receipt)
	}
	id, err := strconv.ParseUint(f.Get("message-id"), 10, 64)
	if err != nil || id == 0 {
		t.Fatalf("RECEIPT %s: message-id %q", receipt, f.Get("message-id"))
	}
	return id
}

// cnfSendPoison sends a poison message on a new connection and checks
// the failure as a client sees it: an ERROR "message not stored" naming
// the receipt and saying why, never a RECEIPT, then the connection
// closes. It reports whether the failed commit was the inline one, and
// returns the ERROR.
func cnfSendPoison(t *testing.T, tb *testBroker, cj *cnfJournal, dest, body, receipt string) (bool, *stomp.Frame) {
	t.Helper()
	r := dialRaw(t, tb)
	r.connect("1.2")
	f := cnfSend(r, dest, body, receipt)
	if f.Command != stomp.CmdError {
		t.Fatalf("poison SEND %s: got %s %v, want ERROR", receipt, f.Command, f.Headers)
	}
	if f.Get("receipt-id") != receipt || f.Get("message") != "message not stored" || !strings.Contains(string(f.Body), "injected fault") {
		t.Fatalf("poison SEND %s: ERROR %v %q, want receipt-id:%s, message not stored and the cause", receipt, f.Headers, f.Body, receipt)
	}
	r.closed() // the ERROR was the last frame: no RECEIPT follows
	if cj == nil {
		return false, f
	}
	inline, err := cj.inlineResult(body)
	if inline && err == nil {
		t.Fatalf("poison SEND %s committed inline without error, yet the client got an ERROR", receipt)
	}
	return inline, f
}

// TestCommitNowFault_FailedInlineSendGetsError: a lone durable SEND with a
// receipt whose inline commit fails (a real SQL failure inside
// CommitNow's transaction) gets an ERROR naming its receipt and never a
// RECEIPT; the message is not delivered, not counted, and not in the
// journal, also after a restart; the broker goes on: the next SEND
// commits inline to the same queue (created in the rolled-back
// transaction) and is delivered exactly once.
func TestCommitNowFault_FailedInlineSendGetsError(t *testing.T) {
	tb, cj := startCommitNow(t, true)
	const dest, queue = "/queue/cnf.fail", "cnf.fail"
	before := tb.Store.Stats()
	// The checkpointer may hold the writer for a moment (CommitNow then
	// leaves the SEND to the writer): try until one failed inline.
	var poisoned []string
	for try := 0; ; try++ {
		body := "poison-" + strconv.Itoa(try)
		poisoned = append(poisoned, body)
		if inline, _ := cnfSendPoison(t, tb, cj, dest, body, "p"+strconv.Itoa(try)); inline {
			break
		}
		if try == 9 {
			t.Fatalf("no poison SEND of 10 committed inline (inline log %v)", cj.inlineLog())
		}
	}
	after := tb.Store.Stats()
	if after.Inline == before.Inline || after.FailedCommits == before.FailedCommits {
		t.Fatalf("journal stats: inline %d -> %d, failed commits %d -> %d: want the failed inline commit counted",
			before.Inline, after.Inline, before.FailedCommits, after.FailedCommits)
	}

	// The next SENDs, on a new connection, succeed; again inline (a few
	// tries, as above).
	c := dialRaw(t, tb)
	c.connect("1.2")
	var good []string
	var lastID uint64
	for try := 0; ; try++ {
		body := "good-" + strconv.Itoa(try)
		id := cnfWantReceipt(t, cnfSend(c, dest, body, "g"+strconv.Itoa(try)), "g"+strconv.Itoa(try))
		if id <= lastID {
			t.Fatalf("message-id %d after %d", id, lastID)
		}
		lastID = id
		good = append(good, body)
		inline, err := cj.inlineResult(body)
		if inline && err != nil {
			t.Fatalf("%s: RECEIPT, but its inline commit failed: %v", body, err)
		}
		if inline {
			break
		}
		if try == 9 {
			t.Fatalf("no good SEND of 10 committed inline after the failure (inline log %v)", cj.inlineLog())
		}
	}
	if v, _ := tb.B.Queue(queue); v.Messages != len(good) {
		t.Fatalf("queue %s counts %d messages, want %d (the failed ones not counted)", queue, v.Messages, len(good))
	}
	assertRecount(t, tb)
	if got := cnfStored(t, tb.Store, queue); !slices.Equal(got, good) {
		t.Fatalf("journal holds %q, want %q", got, good)
	}

	tb.Restart()
	if got := cnfStored(t, tb.Store, queue); !slices.Equal(got, good) {
		t.Fatalf("after a restart the journal holds %q, want %q", got, good)
	}
	if n := cnfPoisonRows(t, tb.Store.Path()); n != 0 {
		t.Fatalf("%d rows of failed SENDs in the journal after a restart", n)
	}
	sub, err := tb.Dial(t).SubscribeReceipt(ctxT(t), dest, "auto")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range good {
		if m := recv(t, sub); string(m.Body) != want {
			t.Fatalf("got %q, want %q (failed: %q)", m.Body, want, poisoned)
		}
	}
	expectNone(t, sub, 200*time.Millisecond)
}

// cnfWriterOnly hides the store's CommitNow: every batch goes through the
// writer goroutine (the path the faultJournal tests exercise).
type cnfWriterOnly struct{ appliance.Journal }

// TestCommitNowFault_InlineFailsLikeWriter: a SEND whose commit fails
// gets the same ERROR (command, message, receipt-id, cause) whether
// CommitNow committed it on the connection's goroutine or the writer
// goroutine did.
func TestCommitNowFault_InlineFailsLikeWriter(t *testing.T) {
	const dest = "/queue/cnf.alike"
	tb, cj := startCommitNow(t, true)
	var inlineErr *stomp.Frame
	for try := 0; inlineErr == nil; try++ {
		if try == 10 {
			t.Fatalf("no poison SEND of 10 committed inline (inline log %v)", cj.inlineLog())
		}
		if inline, f := cnfSendPoison(t, tb, cj, dest, "poison", "r1"); inline {
			inlineErr = f
		}
	}
	wb := startWrapped(t, nil, func(j appliance.Journal) appliance.Journal {
		cnfExec(t, j.(*journal.Store).Path(), cnfPoisonTrigger)
		return cnfWriterOnly{j}
	})
	_, writerErr := cnfSendPoison(t, wb, nil, dest, "poison", "r1")
	if st := wb.Store.Stats(); st.Inline != 0 || st.FailedCommits == 0 {
		t.Fatalf("writer-only broker: %d inline commits, %d failed: want 0 and the failure", st.Inline, st.FailedCommits)
	}
	for _, k := range []string{"message", "receipt-id", "content-type"} {
		if a, b := inlineErr.Get(k), writerErr.Get(k); a != b {
			t.Errorf("ERROR header %s: %q inline, %q from the writer", k, a, b)
		}
	}
	if string(inlineErr.Body) != string(writerErr.Body) {
		t.Errorf("ERROR body: %q inline, %q from the writer", inlineErr.Body, writerErr.Body)
	}
}

// TestCommitNowFault_FailureBetweenSuccesses: inline commits that succeed,
// fail, succeed on the same queue, round after round: every successful
// SEND is receipted with a rising message-id and delivered exactly once
// in order, before and after a restart; no failed one is.
func TestCommitNowFault_FailureBetweenSuccesses(t *testing.T) {
	tb, cj := startCommitNow(t, true)
	const dest, queue, rounds = "/queue/cnf.mixed", "cnf.mixed", 8
	c := dialRaw(t, tb) // the good SENDs' connection lives on
	c.connect("1.2")
	var good []string
	var lastID uint64
	sendGood := func(body string) {
		t.Helper()
		id := cnfWantReceipt(t, cnfSend(c, dest, body, body), body)
		if id <= lastID {
			t.Fatalf("%s: message-id %d after %d", body, id, lastID)
		}
		lastID = id
		good = append(good, body)
	}
	for i := range rounds {
		n := strconv.Itoa(i)
		sendGood("a" + n)
		cnfSendPoison(t, tb, cj, dest, "poison"+n, "p"+n)
		sendGood("b" + n)
	}
	// The pattern itself ran inline at least once: success, failure,
	// success, consecutive inline commits.
	log := cj.inlineLog()
	triples := 0
	for k := 0; k+2 < len(log); k++ {
		a, p, b := log[k], log[k+1], log[k+2]
		if strings.HasPrefix(a.body, "a") && a.err == nil && strings.HasPrefix(p.body, "poison") && p.err != nil &&
			strings.HasPrefix(b.body, "b") && b.err == nil && a.body[1:] == p.body[6:] && b.body[1:] == p.body[6:] {
			triples++
		}
	}
	if triples == 0 {
		t.Fatalf("no round committed success, failure, success inline (inline log %v)", log)
	}
	t.Logf("%d of %d rounds entirely inline", triples, rounds)
	for _, l := range log {
		if strings.HasPrefix(l.body, "poison") != (l.err != nil) {
			t.Fatalf("inline commit of %q: error %v", l.body, l.err)
		}
	}
	assertRecount(t, tb)

	tb.Restart()
	if got := cnfStored(t, tb.Store, queue); !slices.Equal(got, good) {
		t.Fatalf("after a restart the journal holds %q, want %q", got, good)
	}
	if n := cnfPoisonRows(t, tb.Store.Path()); n != 0 {
		t.Fatalf("%d rows of failed SENDs in the journal", n)
	}
	sub, err := tb.Dial(t).SubscribeReceipt(ctxT(t), dest, "auto", hdr("prefetch-count", "100"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range good {
		if m := recv(t, sub); string(m.Body) != want {
			t.Fatalf("got %q, want %q", m.Body, want)
		}
	}
	expectNone(t, sub, 200*time.Millisecond)
}

// cnfRace runs producers, each on its own connection sending lone
// receipted SENDs one at a time until one fails, calls shut once enough
// were receipted, and returns the bodies receipted and those that were
// not (ERROR or connection closed).
func cnfRace(t *testing.T, tb *testBroker, dest string, producers int, shut func()) (receipted, unanswered []string) {
	t.Helper()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		count  atomic.Int64
		enough = make(chan struct{})
		once   sync.Once
	)
	const before = 150 // receipts before the shutdown starts
	for g := range producers {
		c, err := client.Dial(ctxT(t), tb.Addr, client.Options{DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				body := fmt.Sprintf("g%d-%d", g, k)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := c.SendReceipt(ctx, dest, []byte(body), hdr("persistent", "true"))
				cancel()
				mu.Lock()
				if err == nil {
					receipted = append(receipted, body)
				} else {
					unanswered = append(unanswered, body)
				}
				mu.Unlock()
				if err != nil {
					once.Do(func() { close(enough) }) // never hang on an early failure
					return
				}
				if count.Add(1) == before {
					once.Do(func() { close(enough) })
				}
			}
		}()
	}
	<-enough
	shut()
	wg.Wait()
	return receipted, unanswered
}

// cnfCheckRace checks, after the race and a restart, that every receipted
// message is in the journal, exactly once, and nothing that was not sent.
func cnfCheckRace(t *testing.T, tb *testBroker, queue string, receipted, unanswered []string) {
	t.Helper()
	stored := cnfStored(t, tb.Store, queue)
	seen := map[string]int{}
	for _, b := range stored {
		seen[b]++
	}
	for b, n := range seen {
		if n > 1 {
			t.Errorf("%q stored %d times", b, n)
		}
	}
	for _, b := range receipted {
		if seen[b] == 0 {
			t.Errorf("%q got a RECEIPT but is not in the journal after reopening", b)
		}
		delete(seen, b)
	}
	lost := 0
	for _, b := range unanswered {
		if seen[b] > 0 {
			lost++ // committed, its RECEIPT cut off by the shutdown: allowed
		}
		delete(seen, b)
	}
	for b := range seen {
		t.Errorf("%q is in the journal but was never sent", b)
	}
	t.Logf("%d receipted, %d unanswered (%d of them stored nonetheless), %d stored", len(receipted), len(unanswered), lost, len(stored))
}

// TestCommitNowFault_StoreCloseRace: the journal is closed under a running
// broker while producers send lone receipted SENDs (committed inline when
// the journal is idle): a RECEIPT only for a message that is in the
// journal after reopening, never an inline commit once Close returned.
func TestCommitNowFault_StoreCloseRace(t *testing.T) {
	for round := range 3 {
		tb, cj := startCommitNow(t, false)
		const dest, queue = "/queue/cnf.close", "cnf.close"
		inline0 := tb.Store.Stats().Inline
		receipted, unanswered := cnfRace(t, tb, dest, 4, func() {
			if err := tb.Store.Close(context.Background()); err != nil {
				t.Errorf("close journal: %v", err)
			}
			cj.closed.Store(true)
		})
		inline := tb.Store.Stats().Inline - inline0
		if inline == 0 {
			t.Errorf("round %d: no SEND committed inline: the race did not exercise CommitNow", round)
		}
		// A lone SEND on an idle broker whose journal is closed: refused
		// inline, failed by Submit: an ERROR, no RECEIPT.
		r := dialRaw(t, tb)
		r.connect("1.2")
		if f := cnfSend(r, dest, "late", "late"); f.Command != stomp.CmdError || f.Get("receipt-id") != "late" {
			t.Errorf("round %d: SEND after the journal closed: got %s %v, want ERROR receipt-id:late", round, f.Command, f.Headers)
		}
		if n := cj.inlineAfterShut.Load(); n != 0 {
			t.Errorf("round %d: %d batches committed inline after the journal's Close returned", round, n)
		}
		tb.Restart()
		cnfCheckRace(t, tb, queue, receipted, unanswered)
		t.Logf("round %d: %d inline commits", round, inline)
	}
}

// TestCommitNowFault_BrokerCloseRace: the broker, then its journal, shut
// down (as heraldd stops) while producers send lone receipted SENDs: a
// RECEIPT only for a message that is in the journal after restarting.
func TestCommitNowFault_BrokerCloseRace(t *testing.T) {
	for round := range 3 {
		tb, _ := startCommitNow(t, false)
		const dest, queue = "/queue/cnf.stop", "cnf.stop"
		s := tb.Store
		inline0 := s.Stats().Inline
		receipted, unanswered := cnfRace(t, tb, dest, 4, tb.Stop)
		inline := s.Stats().Inline - inline0
		if inline == 0 {
			t.Errorf("round %d: no SEND committed inline: the race did not exercise CommitNow", round)
		}
		tb.Restart()
		cnfCheckRace(t, tb, queue, receipted, unanswered)
		t.Logf("round %d: %d inline commits", round, inline)
	}
}

// cnfOpen opens a journal on path, closed with the test.
func cnfOpen(t *testing.T, cfg journal.Config) *journal.Store {
	t.Helper()
	s := journal.New(cfg)
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func cnfEnq(queue, body string) []appliance.Op {
	return []appliance.Op{{Kind: appliance.OpEnqueue, Msg: &appliance.Message{Queue: queue, Body: []byte(body)}}}
}

// cnfHoldWriteLock takes SQLite's write lock on path from a side
// connection: the journal's writer then waits in its BEGIN IMMEDIATE,
// holding the batches it took. The returned func lets go.
func cnfHoldWriteLock(t *testing.T, path string) func() {
	t.Helper()
	db := cnfSideDB(t, path)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// cnfUntouched checks that a batch CommitNow refused was left alone.
func cnfUntouched(t *testing.T, what string, b *appliance.Batch, ran *atomic.Bool) {
	t.Helper()
	if ran.Load() || b.Lone || b.Ops[0].Msg.ID != 0 {
		t.Fatalf("%s: CommitNow refused but touched the batch: Done ran %v, Lone %v, message ID %d", what, ran.Load(), b.Lone, b.Ops[0].Msg.ID)
	}
}

// TestCommitNowFault_StoreRefuses: journal.Store.CommitNow leaves its
// batch untouched (no Done, nothing stored) and returns false while an
// earlier batch is queued (the writer waits for the database), while an
// earlier batch's completion is pending (committed, handed to the
// completion goroutine, which is busy; the writer idle), and once the
// store is closed. When it commits after them, completions keep
// submission order.
func TestCommitNowFault_StoreRefuses(t *testing.T) {
	path := t.TempDir() + "/herald.db"
	// One batch per transaction: the second batch below waits in the
	// intake while the first commits, so the first's completion goes to
	// the completion goroutine.
	s := cnfOpen(t, journal.Config{Path: path, MaxBatchOps: 1})
	ctx := context.Background()

	var mu sync.Mutex
	var order []string
	record := func(name string) func(*appliance.Batch, error) {
		return func(b *appliance.Batch, err error) {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
	}

	// Queued: the writer holds x, waiting for the write lock.
	unlock := cnfHoldWriteLock(t, path)
	commits0 := s.Stats().Commits
	releaseX := make(chan struct{})
	var releaseOnce sync.Once
	letXGo := func() { releaseOnce.Do(func() { close(releaseX) }) }
	t.Cleanup(letXGo) // before the store's Close, which waits for x's completion
	xDone := make(chan struct{})
	x := &appliance.Batch{Ops: cnfEnq("q", "x"), Done: func(b *appliance.Batch, err error) {
		<-releaseX // the completion goroutine is busy with x
		record("x")(b, err)
		close(xDone)
	}}
	s.Submit(x)
	y := &appliance.Batch{Ops: cnfEnq("q", "y"), Done: record("y")}
	s.Submit(y)
	var ran atomic.Bool
	z := &appliance.Batch{Ops: cnfEnq("q", "z"), Wait: true}
	z.Done = func(b *appliance.Batch, err error) {
		ran.Store(true)
		record("z")(b, err)
	}
	if s.CommitNow(z) {
		t.Fatal("CommitNow committed while earlier batches were queued")
	}
	if n := s.Stats().Commits; n != commits0 {
		t.Fatalf("%d commits while the database was locked", n-commits0)
	}
	cnfUntouched(t, "queued", z, &ran)

	// Pending completion: x and y commit; x's completion blocks the
	// completion goroutine and y's waits behind it; the writer is idle.
	unlock()
	waitFor(t, 5*time.Second, "x and y committed", func() bool { return s.Stats().Commits >= commits0+2 })
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		if s.CommitNow(z) {
			t.Fatal("CommitNow committed while earlier completions were pending")
		}
	}
	cnfUntouched(t, "completion pending", z, &ran)
	if ms, err := s.Load(ctx, "q", 0, 10); err != nil || len(ms) != 2 {
		t.Fatalf("journal holds %d messages (%v), want x and y only", len(ms), err)
	}

	// Everything completed: CommitNow commits z, after x and y.
	letXGo()
	<-xDone
	deadline := time.Now().Add(5 * time.Second)
	for !s.CommitNow(z) {
		// The completion goroutine counts x's and y's completions just
		// after running them.
		if time.Now().After(deadline) {
			t.Fatal("CommitNow still refuses with everything completed")
		}
		time.Sleep(50 * time.Microsecond)
	}
	if !ran.Load() || !z.Lone {
		t.Fatalf("CommitNow returned true: Done ran %v, Lone %v", ran.Load(), z.Lone)
	}
	mu.Lock()
	got := slices.Clone(order)
	mu.Unlock()
	if !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("completions ran in order %v, want [x y z]", got)
	}
	if !(x.Ops[0].Msg.ID < y.Ops[0].Msg.ID && y.Ops[0].Msg.ID < z.Ops[0].Msg.ID) {
		t.Fatalf("message IDs x %d y %d z %d, want rising", x.Ops[0].Msg.ID, y.Ops[0].Msg.ID, z.Ops[0].Msg.ID)
	}

	// Closed: refused, and a Submit then fails the batch.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ran.Store(false)
	w := &appliance.Batch{Ops: cnfEnq("q", "w"), Wait: true, Done: func(*appliance.Batch, error) { ran.Store(true) }}
	if s.CommitNow(w) {
		t.Fatal("CommitNow committed on a closed journal")
	}
	cnfUntouched(t, "closed", w, &ran)
	errc := make(chan error, 1)
	w.Done = func(_ *appliance.Batch, err error) { errc <- err }
	s.Submit(w)
	if err := <-errc; !errors.Is(err, journal.ErrClosed) {
		t.Fatalf("Submit after Close: %v, want ErrClosed", err)
	}
	r := cnfOpen(t, journal.Config{Path: path})
	if got := cnfStored(t, r, "q"); !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("reopened journal holds %q, want [x y z]", got)
	}
}

// TestCommitNowFault_StoreCloseRaceDirect: submitters that each wait for
// their batch (CommitNow, else Submit) race journal.Store.Close, and go
// on after it returned: every batch's Done runs exactly once; a batch
// whose Done got nil is in the journal after reopening, one whose Done
// got an error (ErrClosed) is not (nothing of a failed batch is applied);
// after Close returned CommitNow commits nothing and every batch fails.
func TestCommitNowFault_StoreCloseRaceDirect(t *testing.T) {
	for round := range 3 {
		path := fmt.Sprintf("%s/herald-%d.db", t.TempDir(), round)
		s := cnfOpen(t, journal.Config{Path: path, Sync: "normal"})
		var (
			mu            sync.Mutex
			ok, failed    []string
			doneTwice     atomic.Int64
			closeReturned atomic.Bool
			inlineAfter   atomic.Int64
			inline        atomic.Int64
			count         atomic.Int64
			wg            sync.WaitGroup
			enough        = make(chan struct{})
			closed        = make(chan struct{}) // Close returned
			once          sync.Once
		)
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				postClose := 0
				for k := 0; ; k++ {
					body := fmt.Sprintf("g%d-%d", g, k)
					res := make(chan error, 2)
					var calls atomic.Int32
					b := &appliance.Batch{Ops: cnfEnq("q", body), Wait: true, Done: func(_ *appliance.Batch, err error) {
						if calls.Add(1) > 1 {
							doneTwice.Add(1)
						}
						res <- err
					}}
					shut := closeReturned.Load()
					if s.CommitNow(b) {
						inline.Add(1)
						if shut {
							inlineAfter.Add(1)
						}
					} else {
						s.Submit(b)
					}
					err := <-res
					mu.Lock()
					if err == nil {
						ok = append(ok, body)
					} else {
						failed = append(failed, body)
					}
					mu.Unlock()
					if err != nil {
						if !errors.Is(err, journal.ErrClosed) {
							t.Errorf("%s: %v, want ErrClosed", body, err)
						}
						once.Do(func() { close(enough) })
						// Go on until a few batches were tried after
						// Close returned: those must fail too.
						if shut {
							if postClose++; postClose == 3 {
								return
							}
						} else {
							<-closed
						}
						continue
					}
					if shut {
						t.Errorf("%s: stored after Close returned", body)
						return
					}
					if count.Add(1) == 200 {
						once.Do(func() { close(enough) })
					}
				}
			}()
		}
		<-enough
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		closeReturned.Store(true)
		close(closed)
		wg.Wait()
		if n := doneTwice.Load(); n != 0 {
			t.Fatalf("%d batches completed twice", n)
		}
		if n := inlineAfter.Load(); n != 0 {
			t.Fatalf("%d batches committed inline after Close returned", n)
		}
		if inline.Load() == 0 {
			t.Fatal("no batch committed inline: the race did not exercise CommitNow")
		}
		r := cnfOpen(t, journal.Config{Path: path})
		stored := cnfStored(t, r, "q")
		slices.Sort(stored)
		slices.Sort(ok)
		if !slices.Equal(stored, ok) {
			t.Fatalf("round %d: journal holds %d messages, %d completed without error (failed: %d)\nstored %q\nok %q",
				round, len(stored), len(ok), len(failed), stored, ok)
		}
		t.Logf("round %d: %d stored (%d inline), %d failed with ErrClosed", round, len(ok), inline.Load(), len(failed))
	}
}
