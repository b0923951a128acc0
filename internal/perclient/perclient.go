// Package perclient keeps state per go-redis client (a breaker, a batcher)
// for as long as the client lives, and no longer.
package perclient

import (
	"runtime"
	"sync"
	"weak"

	"github.com/redis/go-redis/v9"
)

// A Map holds one V per client. Its key is a weak pointer to the client,
// and an entry goes once the client is garbage: a program that makes a
// client per tenant, or per test, and drops it does not keep every one,
// with its pools, for ever.
//
// A V must not refer to its client: the entry would keep the client
// alive, and so itself. What needs the client is handed it by the caller.
//
// A client of a type go-redis does not make is its own key, kept for the
// life of the process.
type Map[V any] struct {
	m sync.Map // weak.Pointer to the client, or the client -> V
}

// Load returns client's value, if it has one.
func (p *Map[V]) Load(client redis.UniversalClient) (v V, ok bool) {
	x, ok := p.m.Load(keyOf(client))
	if !ok {
		return v, false
	}
	return x.(V), true
}

// LoadOrStore returns client's value if it has one (loaded), or else
// stores and returns v.
func (p *Map[V]) LoadOrStore(client redis.UniversalClient, v V) (actual V, loaded bool) {
	x, loaded := p.m.LoadOrStore(keyOf(client), v)
	if !loaded {
		p.forgetWith(client)
	}
	return x.(V), loaded
}

// LoadOrNew returns client's value, storing one made by mk if it has
// none: mk runs only on a client's first use (or on a race to be first,
// whose loser's value is dropped).
func (p *Map[V]) LoadOrNew(client redis.UniversalClient, mk func() V) V {
	if v, ok := p.Load(client); ok {
		return v
	}
	v, _ := p.LoadOrStore(client, mk())
	return v
}

// Len returns how many clients have a value.
func (p *Map[V]) Len() int {
	n := 0
	p.m.Range(func(any, any) bool { n++; return true })
	return n
}

// keyOf is client's key: a weak pointer to it, or the client itself if
// go-redis did not make its type. It allocates nothing: Load runs on
// every NewMutex.
func keyOf(client redis.UniversalClient) any {
	switch c := client.(type) {
	case *redis.Client:
		return weak.Make(c)
	case *redis.ClusterClient:
		return weak.Make(c)
	case *redis.Ring:
		return weak.Make(c)
	}
	return client
}

// forgetWith arranges for client's entry to go with the client (called
// once, when the entry is stored).
func (p *Map[V]) forgetWith(client redis.UniversalClient) {
	switch c := client.(type) {
	case *redis.Client:
		forget(p, c)
	case *redis.ClusterClient:
		forget(p, c)
	case *redis.Ring:
		forget(p, c)
	}
}

func forget[V, C any](p *Map[V], c *C) {
	runtime.AddCleanup(c, func(key weak.Pointer[C]) { p.m.Delete(key) }, weak.Make(c))
}
