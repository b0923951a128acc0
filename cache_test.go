package dogpile_test

// Arguments that come from data (keys, TTLs) are refused with ErrInvalid,
// with no I/O; programmer errors (a nil compute, a bad option) panic.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/dogpile-go/dogpile"
)

func TestBadInput(t *testing.T) {
	c := dogpile.New[int](redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	ctx := context.Background()
	ok := func(context.Context) (int, error) { return 1, nil }
	// Keys and TTLs may come from data: an error naming the argument, no
	// panic and no I/O (the client points at a closed port).
	for name, err := range map[string]error{
		"empty key":        first(c.Fetch(ctx, "", time.Minute, ok)),
		"ttl":              first(c.Fetch(ctx, "k", 0, ok)),
		"ttl -1s":          first(c.Fetch(ctx, "k", -time.Second, ok)),
		"Refresh key":      first(c.Refresh(ctx, "", time.Minute, ok)),
		"Refresh ttl":      first(c.Refresh(ctx, "k", time.Microsecond, ok)),
		"Set ttl":          c.Set(ctx, "k", 1, 0),
		"Set empty key":    c.Set(ctx, "", 1, time.Minute),
		"Get empty key":    first(c.Get(ctx, "")),
		"Delete empty key": c.Delete(ctx, ""),
	} {
		if !errors.Is(err, dogpile.ErrInvalid) {
			t.Errorf("%s: err = %v; want ErrInvalid", name, err)
		} else if !strings.Contains(err.Error(), "key") && !strings.Contains(err.Error(), "ttl") {
			t.Errorf("%s: err = %v; want it to name the argument", name, err)
		}
	}
	// Programmer errors stay panics.
	mustPanic(t, "New(nil)", func() { dogpile.New[int](nil) })
	mustPanic(t, "Fetch with nil compute", func() { _, _ = c.Fetch(ctx, "k", time.Minute, nil) })
	mustPanic(t, "Refresh with nil compute", func() { _, _ = c.Refresh(ctx, "k", time.Minute, nil) })
	mustPanic(t, "WithPrefix with a brace", func() { dogpile.WithPrefix("a{") })
	mustPanic(t, `WithPrefix("")`, func() { dogpile.WithPrefix("") })
	mustPanic(t, "WithLease(0)", func() { dogpile.WithLease(0) })
	mustPanic(t, "WithMaxCompute(0)", func() { dogpile.WithMaxCompute(0) })
	mustPanic(t, "WithCodec(nil)", func() { dogpile.WithCodec(nil) })
	mustPanic(t, "WithWaitTimeout(-1)", func() { dogpile.WithWaitTimeout(-1) })
	mustPanic(t, "WithStale(0)", func() { dogpile.WithStale(0) })
	mustPanic(t, "WithNegativeTTL(0)", func() { dogpile.WithNegativeTTL(0) })
	mustPanic(t, "WithEarlyRefresh(0)", func() { dogpile.WithEarlyRefresh(0) })
	mustPanic(t, "WithRefreshRetry(0)", func() { dogpile.WithRefreshRetry(0) })
	_ = dogpile.Client(c).Close()
}

func first[T any](_ T, err error) error { return err }

func TestFetchManyBadInput(t *testing.T) {
	c := dogpile.New[string](nopClient(t)) // any I/O would fail
	ctx := t.Context()
	got, err := c.FetchMany(ctx, nil, time.Minute, nilMany[string])
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("FetchMany(no keys) = %v, %v; want an empty map, nil", got, err)
	}
	for _, tc := range []struct {
		keys []string
		ttl  time.Duration
		want string
	}{
		{[]string{"a", ""}, time.Minute, "dogpile: invalid argument: key 2 of 2 is empty"},
		{[]string{"a"}, time.Microsecond, "ttl 1µs is below 1ms"},
		{[]string{"a"}, 0, "below 1ms"},
	} {
		got, err := c.FetchMany(ctx, tc.keys, tc.ttl, nilMany[string])
		if !errors.Is(err, dogpile.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || got != nil {
			t.Errorf("FetchMany(%q, %v) = %v, %v; want nil, ErrInvalid saying %q", tc.keys, tc.ttl, got, err, tc.want)
		}
	}
	mustPanic(t, "FetchMany(nil compute)", func() { _, _ = c.FetchMany(ctx, []string{"a"}, time.Minute, nil) })
	assert.Equal(t, dogpile.Stats{}, c.Stats(), "Stats; want nothing counted")
}
