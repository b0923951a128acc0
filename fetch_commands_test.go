package dogpile_test

// Counting the commands a client sends: what a Fetch costs in round trips.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// testCommandsPerFetch counts what a holder, a hit and a waiter send.
func testCommandsPerFetch(t *testing.T, b redistest.Backend) {
	hrdb, wrdb := b.Client(t), b.Client(t)
	dogpile.LoadScripts(t, hrdb)
	hcount, wcount := redistest.RecordCommands(hrdb), redistest.RecordCommands(wrdb)
	holder := dogpile.New[int](hrdb, prefix(t))
	waiter := dogpile.New[int](wrdb, prefix(t))

	// Winner: GET, fetch script (takes the lock), store script.
	_, err := holder.Fetch(t.Context(), "w", time.Minute, func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	got := hcount.Take()
	assert.LessOrEqual(t, len(got), 3, "winner sent %d commands %v; want at most 3", len(got), got)
	// Hit: one GET.
	_, err = waiter.Fetch(t.Context(), "w", time.Minute, redistest.NoCompute[int])
	require.NoError(t, err)
	got = wcount.Take()
	assert.Len(t, got, 1, "hit sent %d commands %v; want 1", len(got), got)
	// Waiter: GET, fetch script (busy), fetch script after subscribing
	// (wait); the value comes with the wake-up.
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(context.Context) (int, error) { return 2, nil })
	close(release)
	require.NoError(t, (<-hres).err)
	if r := <-wres; r.err != nil || r.v != 2 {
		t.Fatalf("waiter = %v, %v", r.v, r.err)
	}
	got = wcount.Take()
	assert.LessOrEqual(t, len(got), 3, "waiter sent %d commands %v; want at most 3", len(got), got)
}
