package appliance

import (
	"context"

	"github.com/herald-mq/herald/appliance/kvcore"
)

// KVEntry is one key-value change as the journal stores it (OpKV), and a
// live key as it reads it back.
type KVEntry = kvcore.Entry

// KVJournal is the part of a journal that stores key-value buckets
// (/kv/BUCKET.KEY). A journal without it has no key-value store: SEND and
// SUBSCRIBE to /kv/ are refused.
type KVJournal interface {
	// KVLoad calls fn, at startup, with every bucket's revision counter
	// (an entry with Op 0 and no key) and every live key.
	KVLoad(ctx context.Context, fn func(e KVEntry) error) error
	// KVHistory calls fn with the kept revisions of a live key (each
	// put's History says how many), oldest first; a delete drops them.
	KVHistory(ctx context.Context, bucket, key string, fn func(e KVEntry) error) error
}
