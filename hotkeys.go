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
// one to two minutes, most reads first (ties in key order), fewer if fewer
// were read. It returns nil if n ≤ 0; n above 256 is taken as 256. Keys come
// from data: log them, and put them in a metric's attributes only bounded,
// as dogpileotel's Observer.Watch does (the top n of each prefix). [DebugHandler]
// shows them on a page; [HideKeys] names them by rank instead.
//
// The span is the current window, begun less than a minute ago, and the
// whole minute before it: windows start every minute from c's first read.
//
// Memory is bounded whatever the key space: each window monitors at most 256
// keys (Space-Saving: once it is full, a key it does not monitor replaces the
// least-read one and inherits its reads). That is about 62 KB for the two
// windows, allocated at c's first read, and the strings of up to 512 keys.
//
// Reads has two errors:
//   - The summary's: Reads may exceed the reads recorded for the key by at
//     most N/256, N being all the reads recorded over the span; or fall short
//     by as much, if the key was monitored in only one of the two windows (the
//     other window's are left out).
//   - The sampling's: hits are recorded one in 64, picked by the Cache's hit
//     count (a Weyl sequence, so keys read in turn are sampled alike), each
//     record counting 64; misses are recorded one by one. For a key with h
//     hits spread among other keys' at random, the estimate is off by about
//     8√h (one standard deviation): 8 % at 10,000 hits, 1 % at 640,000. A
//     key with fewer than 64 hits may show none of them, or 64.
//
// Recording costs every hit a multiplication and a test, and one hit in 64 a
// mutex and a map lookup (about 70 ns); every miss, compute and wait takes
// them too.
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
