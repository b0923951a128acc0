package dogpile

// What a process shows of its Caches: DebugHandler's page, and the
// AnyCache view of a Cache that it and dogpileotel's Observer.Watch read.

import (
	"fmt"
	"net/http"
	"reflect"

	"github.com/dogpile-go/dogpile/internal/debugpage"
)

// An AnyCache is a [Cache] of any value type, or one wrapped by [HideKeys]:
// what [DebugHandler] shows, and dogpileotel's Observer.Watch exports. Every
// *Cache[T] satisfies it, and nothing outside this package does (it has an
// unexported method), so that a page or a metric always reports a Cache's
// own figures, and methods may be added to it later.
type AnyCache interface {
	// Prefix returns the Cache's key prefix (see [WithPrefix]), which
	// identifies it on the page and in metrics.
	Prefix() string
	// Stats is [Cache.Stats].
	Stats() Stats
	// HotKeys is [Cache.HotKeys], with names hidden after [HideKeys].
	HotKeys(n int) []HotKey

	keysHidden() bool
}

var _ AnyCache = (*Cache[int])(nil)

// Prefix returns c's key prefix: the one given to [WithPrefix], or the
// default "dogpile:".
func (c *Cache[T]) Prefix() string { return c.opts.prefix }

func (c *Cache[T]) keysHidden() bool { return false }

// HideKeys returns c with the names of its keys hidden: its HotKeys name
// each key by its rank, "#1" for the most read, on [DebugHandler]'s page and
// in dogpileotel's metrics alike. It wraps one Cache, not the page, because
// whether a name may be shown depends on the key space: one page can show
// product IDs and hide session tokens. It panics if c is nil.
func HideKeys(c AnyCache) AnyCache {
	mustCache("HideKeys", c)
	return hiddenKeys{c}
}

type hiddenKeys struct{ AnyCache }

func (h hiddenKeys) HotKeys(n int) []HotKey {
	hot := h.AnyCache.HotKeys(n)
	for i := range hot {
		hot[i].Key = fmt.Sprintf("#%d", i+1)
	}
	return hot
}

func (hiddenKeys) keysHidden() bool { return true }

// debugHotKeys is how many hot keys the page shows per Cache.
const debugHotKeys = 20

// debugAlarms are the fields of Stats whose being above zero the page marks
// as worth a look.
var debugAlarms = []string{"DecodeErrors", "ComputeErrors", "RemoteErrors", "Unavailable", "NearLate", "NearOff",
	"NearInconsistent", "SourceInconsistent"}

// DebugHandler returns a read-only http.Handler, in the manner of
// net/http/pprof and expvar, that shows each Cache of caches by its prefix:
// every [Stats] counter, the hit ratio, the near tier's share, the share of
// sampled hits found inconsistent, and its 20 hottest keys. HTML for a
// person, JSON with ?format=json; GET and HEAD only (else 405). It shows
// key names, never values, and hides names after [HideKeys]. Mount it on a
// port only operators reach:
//
//	mux.Handle("/debug/dogpile", dogpile.DebugHandler(users, dogpile.HideKeys(sessions)))
//
// It panics if a cache is nil.
func DebugHandler(caches ...AnyCache) http.Handler {
	for _, c := range caches {
		mustCache("DebugHandler", c)
	}
	return debugpage.Handler(func() []debugpage.Cache {
		page := make([]debugpage.Cache, len(caches))
		for i, c := range caches {
			page[i] = debugFigures(c)
		}
		return page
	})
}

// debugFigures is what the page shows of c. Stats goes as it is, so that a
// counter added to it shows up on the page with no change here.
func debugFigures(c AnyCache) debugpage.Cache {
	s := c.Stats()
	p := debugpage.Cache{
		Prefix: c.Prefix(), KeysHidden: c.keysHidden(), Stats: s,
		Alarms: debugAlarms,
		Ratios: []debugpage.Ratio{
			{Name: "HitRatio", Of: "Hits / (Hits + Misses)", Num: s.Hits, Den: s.Hits + s.Misses},
			{Name: "NearShare", Of: "NearHits / Hits", Num: s.NearHits, Den: s.Hits},
			// The samplers' findings: any inconsistency is a bug to chase
			// (WithConsistencySampling, WithSourceCheck).
			{Name: "NearInconsistency", Of: "NearInconsistent / NearSampled", Num: s.NearInconsistent, Den: s.NearSampled, Alarm: true},
			{Name: "SourceInconsistency", Of: "SourceInconsistent / SourceSampled", Num: s.SourceInconsistent, Den: s.SourceSampled, Alarm: true},
		},
	}
	for _, h := range c.HotKeys(debugHotKeys) {
		p.HotKeys = append(p.HotKeys, debugpage.HotKey{Key: h.Key, Reads: h.Reads, Misses: h.Misses, Computes: h.Computes, Waits: h.Waits})
	}
	return p
}

// mustCache panics on a nil cache, a nil *Cache too: a programmer error,
// better found at set-up than on the page's first request.
func mustCache(fn string, c AnyCache) {
	if v := reflect.ValueOf(c); c == nil || v.Kind() == reflect.Pointer && v.IsNil() {
		panic("dogpile: nil cache given to " + fn + " (a programmer error)")
	}
}
