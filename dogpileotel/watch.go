package dogpileotel

// Figures that no event carries, read from the Caches at each collection:
// the hot keys (dogpile.Cache.HotKeys) and the samplers' counts (Stats).

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/dogpile-go/dogpile"
)

// allHotKeys is more keys than a Cache's HotKeys ever reports (256).
const allHotKeys = 1 << 10

// defaultHotKeys is how many keys of each prefix the hot-key gauge reports
// unless WithHotKeys says otherwise.
const defaultHotKeys = 10

// WithHotKeys sets how many of the hottest keys of each watched prefix the
// gauge dogpile.cache.hot_key.reads reports (see [Observer.Watch]): n
// series per prefix at most, each labelled with its key. The default is
// 10; 0 reports none. It panics if n is negative.
func WithHotKeys(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("dogpileotel: WithHotKeys(%d): negative (a programmer error)", n))
	}
	return func(c *config) { c.hotKeys = n }
}

type watchInstruments struct {
	meter                 metric.Meter
	hotKeys               int
	hotReads              metric.Int64ObservableGauge
	sampled, inconsistent metric.Int64ObservableCounter
}

func newWatchInstruments(m metric.Meter, hotKeys int) (watchInstruments, error) {
	w := watchInstruments{meter: m, hotKeys: hotKeys}
	var errs [3]error
	w.hotReads, errs[0] = m.Int64ObservableGauge("dogpile.cache.hot_key.reads", metric.WithUnit("{read}"),
		metric.WithDescription("estimated reads of each of the keys this process read most over the last one to two minutes"))
	w.sampled, errs[1] = m.Int64ObservableCounter("dogpile.cache.check.sampled", metric.WithUnit("{hit}"),
		metric.WithDescription("hits checked in the background: check=near against Redis, check=source against the source of truth"))
	w.inconsistent, errs[2] = m.Int64ObservableCounter("dogpile.cache.check.inconsistent", metric.WithUnit("{hit}"),
		metric.WithDescription("checked hits found inconsistent: a bug to chase, not a rate to tune"))
	return w, cmp.Or(errs[0], errs[1], errs[2])
}

// Watch has o report what caches count but send no event for, read at
// each collection: the hottest keys of each prefix, as the gauge
// dogpile.cache.hot_key.reads [key_prefix, key] (see [WithHotKeys]), and
// the checks of [dogpile.WithConsistencySampling] (check=near) and
// [dogpile.WithSourceCheck] (check=source), as the counters
// dogpile.cache.check.sampled and dogpile.cache.check.inconsistent
// [key_prefix, check]. Caches that share a prefix are summed, as their
// events are. The returned stop ends the watch, for Caches closed while
// the program runs on; Watch itself keeps caches until then.
//
// The gauge is the one metric labelled with keys, which come from data.
// Each collection reports at most n keys per prefix, so a backend sees a
// new series only when a key enters the top n: few for a stable head of
// hot keys, more for a churning one. For a Cache whose key names must not
// leave the process, watch [dogpile.HideKeys](c): its keys are labelled
// by rank, "#1" to "#n" (Caches of one prefix hidden so are summed by
// rank, which says how hot their hottest keys are, not which).
//
// Watch panics if a cache is nil.
func (o *Observer) Watch(caches ...dogpile.AnyCache) (stop func()) {
	for _, c := range caches {
		if v := reflect.ValueOf(c); c == nil || v.Kind() == reflect.Pointer && v.IsNil() {
			panic("dogpileotel: nil cache given to Watch (a programmer error)")
		}
	}
	w := &o.watch
	caches = slices.Clone(caches)
	reg, err := w.meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		w.observe(ob, caches)
		return nil
	}, w.hotReads, w.sampled, w.inconsistent)
	if err != nil {
		panic("dogpileotel: " + err.Error() + " (a programmer error)")
	}
	return func() { _ = reg.Unregister() }
}

// prefixFigures are the figures of one prefix's Caches, summed.
type prefixFigures struct {
	near, source [2]uint64 // sampled, inconsistent
	hot          map[string]uint64
}

func (w *watchInstruments) observe(ob metric.Observer, caches []dogpile.AnyCache) {
	var prefixes []string
	byPrefix := map[string]*prefixFigures{}
	shared := map[string]int{} // Caches per prefix
	for _, c := range caches {
		shared[c.Prefix()]++
	}
	for _, c := range caches {
		p := c.Prefix()
		f := byPrefix[p]
		if f == nil {
			f = &prefixFigures{hot: map[string]uint64{}}
			byPrefix[p] = f
			prefixes = append(prefixes, p)
		}
		s := c.Stats()
		f.near[0], f.near[1] = f.near[0]+s.NearSampled, f.near[1]+s.NearInconsistent
		f.source[0], f.source[1] = f.source[0]+s.SourceSampled, f.source[1]+s.SourceInconsistent
		// Caches that share a prefix each give all they hold: a key just
		// below one Cache's top n may be in the top n of their sum.
		n := w.hotKeys
		if shared[p] > 1 && n > 0 {
			n = allHotKeys
		}
		for _, h := range c.HotKeys(n) {
			f.hot[h.Key] += h.Reads
		}
	}
	for _, p := range prefixes {
		f, prefix := byPrefix[p], attribute.String("key_prefix", p)
		for check, n := range map[string][2]uint64{"near": f.near, "source": f.source} {
			attrs := metric.WithAttributes(prefix, attribute.String("check", check))
			ob.ObserveInt64(w.sampled, int64(n[0]), attrs)
			ob.ObserveInt64(w.inconsistent, int64(n[1]), attrs)
		}
		for _, k := range top(f.hot, w.hotKeys) {
			ob.ObserveInt64(w.hotReads, int64(f.hot[k]), metric.WithAttributes(prefix, attribute.String("key", k)))
		}
	}
}

// top returns the n keys of reads with the most, ties in key order: the
// bound on the gauge's series, when Caches of one prefix bring more.
func top(reads map[string]uint64, n int) []string {
	keys := make([]string, 0, len(reads))
	for k := range reads {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(reads[b], reads[a]), cmp.Compare(a, b)) })
	return keys[:min(n, len(keys))]
}
