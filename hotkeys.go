package dogpile

import "github.com/dogpile-go/dogpile/internal/hotkeys"

// A HotKey is a key of a Cache and what this process did for it over the
// last one to two minutes, as [Cache.HotKeys] reports it.
type HotKey struct {
	// Key is the caller's key, as passed to Fetch, FetchMany or Get (not
	// the Redis key).
	Key string
	// Reads estimates the Fetch and Get calls (and FetchMany keys) that
	// read Key: its hits and its misses. Hits are sampled, one in 64 of
	// the Cache's, each sample counting 64 (see [Cache.HotKeys] for the
	// error); misses are counted one by one.
	Reads uint64
	// Misses, Computes and Waits count Key's misses (in Reads too), compute
	// calls (each FetchMany compute counts once for each of its keys) and
	// waits for another process's compute, exactly, since Key last entered
	// the report's summary: lower bounds.
	Misses, Computes, Waits uint64
}

// HotKeys returns the n keys of c that this process read most over the last
// one to two minutes (the current window and the whole minute before it),
// most reads first (ties in key order), fewer if fewer were read. It returns
// nil if n ≤ 0; n above 256 is taken as 256. Keys come from data: log them,
// and put them in a metric's attributes only bounded, as dogpileotel's
// Observer.Watch does. [DebugHandler] shows them; [HideKeys] hides them.
//
// Memory is bounded whatever the key space: about 62 KB per Cache, and the
// strings of at most 512 keys. Misses, Computes and Waits are exact while a
// key is reported; Reads is an estimate, within N/256 of the key's reads (N:
// all reads over the span), plus about 8√h for a key of h hits (hits are
// sampled, one in 64). A hit pays a multiplication and a test for this.
// docs/design.md, "Hot keys", tells how.
func (c *Cache[T]) HotKeys(n int) []HotKey {
	top := c.hot.Top(n)
	if top == nil {
		return nil
	}
	hot := make([]HotKey, len(top))
	for i, e := range top {
		hot[i] = HotKey{Key: e.Key, Reads: e.Reads, Misses: e.Misses, Computes: e.Computes, Waits: e.Waits}
	}
	return hot
}

// hotHit records the hit numbered n, if it is sampled (see hotkeys.Sampled):
// a near hit costs about a hundred nanoseconds, a record about 70.
func (c *core[T]) hotHit(key string, n uint64) {
	if hotkeys.Sampled(n) {
		c.hot.Add(key, hotkeys.Counts{Reads: hotkeys.SampleRate})
	}
}

// hotEvent records a miss, compute or wait of e, each costing a round trip
// at least: never sampled, so that these counts are exact.
func (c *core[T]) hotEvent(e *Event) {
	var d hotkeys.Counts
	switch e.Kind {
	case EventMiss:
		d = hotkeys.Counts{Reads: 1, Misses: 1}
	case EventComputeStart:
		d.Computes = 1
		for _, k := range e.Keys { // a FetchMany compute: one for each key
			c.hot.Add(k, d)
		}
		if len(e.Keys) > 0 {
			return
		}
	case EventWaitStart:
		d.Waits = 1
	default:
		return
	}
	c.hot.Add(e.Key, d)
}
