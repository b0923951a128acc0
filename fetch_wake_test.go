package dogpile_test

// What a wake-up carries: the value, when it is short enough and comes
// from the compute the waiter waits for; otherwise the waiter reads Redis
// again. Cases of the behaviour suite (fetch_test.go).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// testWakeUpCarriesValue sends forged wake-ups to a waiting process: it
// takes the value from a wake-up only if the compute it waits for sent it
// and it decodes; anything else makes it look in Redis again.
func testWakeUpCarriesValue(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	holder := dogpile.New[int](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	waiter := dogpile.New[int](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	release, hres, wres := holdAndWait(t, holder, waiter, ctx, "k", func(context.Context) (int, error) { return 2, nil })
	ks := dogpile.KeysOf(waiter, "k")
	token, err := dogpile.Client(waiter).Get(ctx, ks.Lock).Result()
	require.NoError(t, err)
	enc := func(v int) string {
		b, err := dogpile.Encode(waiter, v)
		require.NoError(t, err)
		return string(b)
	}
	publish := func(msg string) {
		t.Helper()
		push := waiter.Stats().PushWakeups
		var err error
		if b.Cluster {
			err = dogpile.Client(waiter).SPublish(ctx, ks.Channel, msg).Err()
		} else {
			err = dogpile.Client(waiter).Publish(ctx, ks.Channel, msg).Err()
		}
		require.NoError(t, err)
		redistest.Eventually(t, fmt.Sprintf("the wake-up %q", msg), func() bool { return waiter.Stats().PushWakeups != push })
	}
	publish("v" + "another-holder:" + enc(99)) // an earlier compute's value
	publish("v" + token + ":" + "garbage")     // does not decode
	publish("v")                               // no value: look again
	select {
	case r := <-wres:
		t.Fatalf("waiter returned %v, %v on a wake-up it must not trust", r.v, r.err)
	default:
	}
	// The value is not in Redis: only the wake-up can have carried it.
	publish("v" + token + ":" + enc(77))
	if r := <-wres; assert.NoError(t, r.err, "waiter = %v, %v; want 77 from the wake-up", r.v, r.err) {
		assert.EqualValues(t, 77, r.v, "waiter = %v, %v; want 77 from the wake-up", r.v, r.err)
	}
	close(release)
	if r := <-hres; assert.NoError(t, r.err, "holder = %v, %v; want 2, nil", r.v, r.err) {
		assert.EqualValues(t, 2, r.v, "holder = %v, %v; want 2, nil", r.v, r.err)
	}
	if s := waiter.Stats(); s.PushWakeups != 4 || s.PollWakeups != 0 || s.DecodeErrors != 0 {
		t.Errorf("waiter Stats = %+v; want 4 push wake-ups, no poll, no decode error", s)
	}
}

// testLargeValueReadAgain: a value too long to travel with the wake-up is
// read again by the waiter (GET, fetch script twice, then once more).
func testLargeValueReadAgain(t *testing.T, b redistest.Backend) {
	hrdb, wrdb := b.Client(t), b.Client(t)
	dogpile.LoadScripts(t, hrdb)
	wcount := redistest.RecordCommands(wrdb)
	holder := dogpile.New[string](hrdb, prefix(t))
	waiter := dogpile.New[string](wrdb, prefix(t))
	big := strings.Repeat("x", dogpile.MaxWakeValue)
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(context.Context) (string, error) { return big, nil })
	close(release)
	if r := <-hres; r.err != nil {
		t.Fatal(r.err)
	}
	if r := <-wres; r.err != nil || r.v != big {
		t.Fatalf("waiter = %d bytes, %v; want %d bytes", len(r.v), r.err, len(big))
	}
	if got := wcount.Take(); len(got) != 4 {
		t.Errorf("waiter sent %d commands %v; want 4 (the value read again)", len(got), got)
	}
}
