package dogpile

// The helpers of the white-box tests (package dogpile); those of the
// behaviour tests are in helpers_test.go.

import (
	"context"
	"errors"
	"testing"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// prefix gives each test keys of its own (its name is the prefix), so that
// the cases of a suite share one deployment.
func prefix(t *testing.T) Option { return WithPrefix(t.Name() + ":") }

// settle waits until c runs no background refresh (they outlive the Fetch
// that started them), so that each test ends with no goroutine of its own.
func settle[T any](t *testing.T, c *Cache[T]) {
	t.Helper()
	redistest.Eventually(t, "the background work to end", func() bool {
		return c.flights.Len() == 0
	})
}

func constant(v string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return v, nil }
}

// nil2 is a compute that must not be called.
func nil2[T any](context.Context) (T, error) {
	var zero T
	return zero, errors.New("unexpected compute")
}

func mustPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", name)
		}
	}()
	f()
}
