package script_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/script"
)

// TestFetchScriptCommonCall: script.Fetch's common call (token and lease
// only) answers, and leaves Redis, as the full call with no holder awaited
// and no value passed over does, in every state a first look may find.
func TestFetchScriptCommonCall(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	ks := keyspace.For("{fsc}:v")
	const lease = 50 * time.Second
	states := map[string]struct{ value, holder string }{ // "": absent
		"empty":           {"", ""},
		"value":           {"stored", ""},
		"other holder":    {"", "other"},
		"ours":            {"", "tok"},
		"value and other": {"stored", "other"},
	}
	look := func(state struct{ value, holder string }, args ...any) (reply, after string) {
		if err := rdb.Del(ctx, ks.Value, ks.Lock, ks.Errs).Err(); err != nil {
			t.Fatal(err)
		}
		if state.value != "" {
			if err := rdb.Set(ctx, ks.Value, state.value, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if state.holder != "" {
			if err := rdb.Set(ctx, ks.Lock, state.holder, lease).Err(); err != nil {
				t.Fatal(err)
			}
		}
		res, err := script.Fetch.Run(ctx, rdb, []string{ks.Value, ks.Lock, ks.Errs}, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(res) == 3 { // {2, holder, pttl}: the PTTL may move by a millisecond
			res[2] = res[2].(int64) > 49000
		}
		lock, _ := rdb.Get(ctx, ks.Lock).Result()
		pttl := rdb.PTTL(ctx, ks.Lock).Val()
		val, _ := rdb.Get(ctx, ks.Value).Result()
		return fmt.Sprint(res), fmt.Sprintf("lock %q (PTTL > 40 s: %v), value %q", lock, pttl.Seconds() > 40, val)
	}
	for name, state := range states {
		common, commonAfter := look(state, "tok", 50000)
		full, fullAfter := look(state, "tok", 50000, "", "", "")
		if common != full || commonAfter != fullAfter {
			t.Errorf("%s: common call %s, then %s; full call %s, then %s", name, common, commonAfter, full, fullAfter)
		}
	}
}
