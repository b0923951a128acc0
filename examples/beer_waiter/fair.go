package main

import (
	"errors"

	"github.com/dogpile-go/dogpile/lock"
)

// tapOptions returns the lock options for -fair. This is the one place to
// wire the fair queue: once lock.WithFair exists (lock issue 4), return
// []lock.Option{lock.WithFair()} for fair and drop the error.
func tapOptions(fair bool) ([]lock.Option, error) {
	if fair {
		return nil, errors.New("-fair needs the fair queue (lock.WithFair, lock issue 4), which is not on main yet")
	}
	return nil, nil
}
