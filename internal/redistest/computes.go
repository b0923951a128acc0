package redistest

import (
	"context"
	"errors"
)

// Constant is a compute that returns v.
func Constant(v string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return v, nil }
}

// ErrUnexpectedCompute is what NoCompute returns.
var ErrUnexpectedCompute = errors.New("unexpected compute")

// NoCompute is a compute that must not be called: it fails with
// ErrUnexpectedCompute.
func NoCompute[T any](context.Context) (T, error) {
	var zero T
	return zero, ErrUnexpectedCompute
}

// NoComputeMany is a FetchMany compute that must not be called: it fails
// with ErrUnexpectedCompute.
func NoComputeMany[T any](context.Context, []string) (map[string]T, error) {
	return nil, ErrUnexpectedCompute
}
