package dogpile

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestFetchScriptCommonCall: fetchScript's common call (token and lease
// only) answers, and leaves Redis, as the full call with no holder awaited
// and no value passed over does, in every state a first look may find.
func TestFetchScriptCommonCall(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	ks := keysFor("{fsc}:v")
	const lease = 50 * time.Second
	states := map[string]func(){
		"empty":           func() {},
		"value":           func() { rdb.Set(ctx, ks.value, "stored", 0) },
		"other holder":    func() { rdb.Set(ctx, ks.lock, "other", lease) },
		"ours":            func() { rdb.Set(ctx, ks.lock, "tok", lease) },
		"value and other": func() { rdb.Set(ctx, ks.value, "stored", 0); rdb.Set(ctx, ks.lock, "other", lease) },
	}
	look := func(setup func(), args ...any) (reply, after string) {
		rdb.Del(ctx, ks.value, ks.lock, ks.errs)
		setup()
		res, err := fetchScript.Run(ctx, rdb, []string{ks.value, ks.lock, ks.errs}, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(res) == 3 { // {2, holder, pttl}: the PTTL may move by a millisecond
			res[2] = res[2].(int64) > 49000
		}
		lock, _ := rdb.Get(ctx, ks.lock).Result()
		pttl := rdb.PTTL(ctx, ks.lock).Val()
		val, _ := rdb.Get(ctx, ks.value).Result()
		return fmt.Sprint(res), fmt.Sprintf("lock %q (PTTL > 40 s: %v), value %q", lock, pttl.Seconds() > 40, val)
	}
	for name, setup := range states {
		common, commonAfter := look(setup, "tok", 50000)
		full, fullAfter := look(setup, "tok", 50000, "", "", "")
		if common != full || commonAfter != fullAfter {
			t.Errorf("%s: common call %s, then %s; full call %s, then %s", name, common, commonAfter, full, fullAfter)
		}
	}
}
