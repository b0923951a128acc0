// Package dogpileotel records OpenTelemetry metrics and spans for dogpile
// caches and locks. It lives in a module of its own so that dogpile itself
// does not depend on OpenTelemetry.
//
//	obs := dogpileotel.New() // the global meter and tracer providers
//	users := dogpile.New[User](rdb, dogpile.WithObserver(obs.Cache))
//	obs.Watch(users) // hot keys and the samplers' counts
//	m := lock.NewMutex(rdb, "job", lock.WithObserver(obs.Lock))
//
// Metrics (attributes in brackets; never a lock name, nor a key but for the
// top n of hot_key.reads: they come from data and would make a series per
// value):
//
//	dogpile.cache.requests          counter    [key_prefix, result: hit|near|stale|miss|notfound]
//	dogpile.cache.computes          counter    [key_prefix, refresh, error, not_found]
//	dogpile.cache.compute.duration  histogram  s [key_prefix, refresh, error, not_found]
//	dogpile.cache.wait.duration     histogram  s [key_prefix, wake: push|poll|takeover|failed|timeout|error]
//	dogpile.cache.near.invalidations counter   [key_prefix, flush]
//	dogpile.cache.tag.invalidations counter    [key_prefix, tag_prefix]
//	dogpile.lock.acquire.duration   histogram  s [lock, obtained]
//	dogpile.lock.events             counter    [lock, event: obtained|not_obtained|extended|lost|released]
//
// and for the Caches given to [Observer.Watch], read at each collection:
//
//	dogpile.cache.hot_key.reads     gauge      [key_prefix, key] (the n hottest keys, see WithHotKeys)
//	dogpile.cache.check.sampled     counter    [key_prefix, check: near|source]
//	dogpile.cache.check.inconsistent counter   [key_prefix, check: near|source]
//
// where lock is the primitive ("mutex", "semaphore", "rwmutex",
// "multimutex", "redlock"), and tag_prefix the kind of an invalidated tag,
// never the tag itself (see [WithTagLabel]). A "not found" (dogpile.ErrNotFound) is an
// answer, not an error: result=notfound, error=false with not_found=true,
// and no error status on the spans. Nor is a compute that Cache.Close
// ended (its Err is dogpile.ErrClosed): a deploy raises no compute errors.
//
// Spans: a miss's compute ("dogpile.compute") and a wait for another
// process's compute ("dogpile.wait"), children of the caller's span; the
// compute's own spans (a database query) are children of dogpile.compute.
// Spans carry the key prefix, not the key.
//
// For the Redis commands themselves, instrument the client with go-redis's
// redisotel (InstrumentTracing, InstrumentMetrics).
package dogpileotel

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/lock"
)

const scope = "github.com/dogpile-go/dogpile/dogpileotel"

// An Observer records metrics and spans. Its Cache and Lock methods are
// the observers to pass to dogpile.WithObserver and lock.WithObserver.
type Observer struct {
	tracer   trace.Tracer
	tagLabel func(tag string) string

	requests, computes, lockEvents, invalidations, tagInvalidations metric.Int64Counter
	computeTime, waitTime, acquire                                  metric.Float64Histogram

	watch watchInstruments // read by Watch's callbacks
}

// An Option configures an Observer.
type Option func(*config)

type config struct {
	meters   metric.MeterProvider
	tracers  trace.TracerProvider
	tagLabel func(tag string) string
	hotKeys  int
}

// WithMeterProvider sets the meter provider; the default is the global one.
func WithMeterProvider(p metric.MeterProvider) Option { return func(c *config) { c.meters = p } }

// WithTracerProvider sets the tracer provider; the default is the global
// one.
func WithTracerProvider(p trace.TracerProvider) Option { return func(c *config) { c.tracers = p } }

// WithTagLabel sets the tag_prefix attribute of an invalidated tag to
// label(tag). The default keeps what comes before the tag's first ':'
// ("team:7" is "team") and "" for a tag without one. label must return one
// of a few values: tags come from data, and each value makes a series.
func WithTagLabel(label func(tag string) string) Option {
	return func(c *config) { c.tagLabel = label }
}

// tagKind is the default tag label: the part of tag before its first ':'.
func tagKind(tag string) string {
	kind, _, found := strings.Cut(tag, ":")
	if !found {
		return ""
	}
	return kind
}

// New returns an Observer on the given (or the global) providers. It
// panics if an instrument cannot be created, which only an invalid
// provider does (a programmer error).
func New(opts ...Option) *Observer {
	c := config{meters: otel.GetMeterProvider(), tracers: otel.GetTracerProvider(), tagLabel: tagKind, hotKeys: defaultHotKeys}
	for _, o := range opts {
		o(&c)
	}
	m := c.meters.Meter(scope)
	o := &Observer{tracer: c.tracers.Tracer(scope), tagLabel: c.tagLabel}
	durations := metric.WithExplicitBucketBoundaries(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)
	var errs [9]error
	o.requests, errs[0] = m.Int64Counter("dogpile.cache.requests", metric.WithDescription("Fetch and Get calls, by result"))
	o.computes, errs[1] = m.Int64Counter("dogpile.cache.computes", metric.WithDescription("compute calls made by this process"))
	o.lockEvents, errs[2] = m.Int64Counter("dogpile.lock.events", metric.WithDescription("lock acquisitions, extensions, losses and releases"))
	o.computeTime, errs[3] = m.Float64Histogram("dogpile.cache.compute.duration", metric.WithUnit("s"), durations,
		metric.WithDescription("how long compute ran"))
	o.waitTime, errs[4] = m.Float64Histogram("dogpile.cache.wait.duration", metric.WithUnit("s"), durations,
		metric.WithDescription("how long a process waited for another process's compute"))
	o.acquire, errs[5] = m.Float64Histogram("dogpile.lock.acquire.duration", metric.WithUnit("s"), durations,
		metric.WithDescription("how long an acquire waited"))
	o.invalidations, errs[6] = m.Int64Counter("dogpile.cache.near.invalidations",
		metric.WithDescription("near-tier keys invalidated by Redis; flush=true: the whole tier emptied"))
	o.tagInvalidations, errs[7] = m.Int64Counter("dogpile.cache.tag.invalidations",
		metric.WithDescription("tags invalidated (InvalidateTag), by key prefix and tag kind; never by tag"))
	o.watch, errs[8] = newWatchInstruments(m, c.hotKeys)
	if err := errors.Join(errs[:]...); err != nil {
		panic("dogpileotel: " + err.Error() + " (a programmer error)")
	}
	return o
}

// Cache is the observer for dogpile.WithObserver.
func (o *Observer) Cache(ctx context.Context, e dogpile.Event) context.Context {
	prefix := attribute.String("key_prefix", e.Prefix)
	switch e.Kind {
	case dogpile.EventHit:
		result := "hit"
		switch {
		case e.NotFound: // a cached "not found" (dogpile.WithNegativeTTL)
			result = "notfound"
		case e.Stale:
			result = "stale"
		case e.Near: // from process memory (dogpile.WithNearCache)
			result = "near"
		}
		o.requests.Add(ctx, 1, metric.WithAttributes(prefix, attribute.String("result", result)))
	case dogpile.EventMiss:
		result := "miss"
		if e.NotFound { // computed: nothing there
			result = "notfound"
		}
		o.requests.Add(ctx, 1, metric.WithAttributes(prefix, attribute.String("result", result)))
	case dogpile.EventComputeStart:
		ctx, _ = o.tracer.Start(ctx, "dogpile.compute", trace.WithAttributes(prefix, attribute.Bool("refresh", e.Refresh)))
		return ctx
	case dogpile.EventComputeEnd:
		failed := failure(e) != nil
		attrs := metric.WithAttributes(prefix, attribute.Bool("refresh", e.Refresh), attribute.Bool("error", failed),
			attribute.Bool("not_found", e.NotFound))
		o.computes.Add(ctx, 1, attrs)
		o.computeTime.Record(ctx, e.Took.Seconds(), attrs)
		end(trace.SpanFromContext(ctx), failure(e))
	case dogpile.EventWaitStart:
		ctx, _ = o.tracer.Start(ctx, "dogpile.wait", trace.WithAttributes(prefix))
		return ctx
	case dogpile.EventWaitEnd:
		wake := attribute.String("wake", wakeName(e.Wake))
		o.waitTime.Record(ctx, e.Took.Seconds(), metric.WithAttributes(prefix, wake))
		span := trace.SpanFromContext(ctx)
		span.SetAttributes(wake)
		end(span, failure(e))
	case dogpile.EventInvalidate:
		o.invalidations.Add(ctx, 1, metric.WithAttributes(prefix, attribute.Bool("flush", e.Key == "")))
	case dogpile.EventInvalidateTag:
		for _, tag := range e.Tags {
			o.tagInvalidations.Add(ctx, 1, metric.WithAttributes(prefix, attribute.String("tag_prefix", o.tagLabel(tag))))
		}
	}
	return nil
}

// Lock is the observer for lock.WithObserver.
func (o *Observer) Lock(ctx context.Context, e lock.Event) {
	kind := attribute.String("lock", e.Lock)
	o.lockEvents.Add(ctx, 1, metric.WithAttributes(kind, attribute.String("event", eventName(e.Kind))))
	switch e.Kind {
	case lock.EventObtained, lock.EventNotObtained:
		o.acquire.Record(ctx, e.Took.Seconds(), metric.WithAttributes(kind, attribute.Bool("obtained", e.Kind == lock.EventObtained)))
	}
}

// failure is e's error, unless it only says "not found" (an answer), or
// that Close ended the compute (a shutdown).
func failure(e dogpile.Event) error {
	if e.NotFound || errors.Is(e.Err, dogpile.ErrClosed) {
		return nil
	}
	return e.Err
}

func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func wakeName(w dogpile.Wake) string {
	switch w {
	case dogpile.WakePush:
		return "push"
	case dogpile.WakePoll:
		return "poll"
	case dogpile.WakeTakeover:
		return "takeover"
	case dogpile.WakeFailed:
		return "failed"
	case dogpile.WakeTimeout:
		return "timeout"
	}
	return "error"
}

func eventName(k lock.EventKind) string {
	switch k {
	case lock.EventObtained:
		return "obtained"
	case lock.EventNotObtained:
		return "not_obtained"
	case lock.EventExtended:
		return "extended"
	case lock.EventLost:
		return "lost"
	}
	return "released"
}
