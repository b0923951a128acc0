package redistest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMemcachedStartsPrivateServer(t *testing.T) {
	a, b := redistest.StartMemcached(t), redistest.StartMemcached(t)
	if a.Addr() == b.Addr() || a.Addr() == "127.0.0.1:11211" {
		t.Fatalf("addresses %s and %s; want two private ports", a.Addr(), b.Addr())
	}
	ca, cb := a.Client(t), b.Client(t)
	if err := ca.Set(&memcache.Item{Key: "k", Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Get("k"); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("Get on the other server = %v; want a miss", err)
	}
}

func TestMemcachedKillPauseResume(t *testing.T) {
	m := redistest.StartMemcached(t)
	c := m.Client(t)
	c.Timeout = 5 * time.Second // a loaded machine may take long to answer
	if err := c.Set(&memcache.Item{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	m.Pause()
	c.Timeout = 100 * time.Millisecond // only the paused server must time out
	if _, err := c.Get("k"); err == nil {
		t.Error("Get on a paused server succeeded")
	}
	c.Timeout = 5 * time.Second
	m.Resume()
	if it, err := c.Get("k"); err != nil || string(it.Value) != "v" {
		t.Errorf("Get after Resume = %v, %v; want v", it, err)
	}
	m.Kill()
	if _, err := c.Get("k"); err == nil {
		t.Error("Get on a killed server succeeded")
	}
	m.Kill() // a second kill does nothing
}
