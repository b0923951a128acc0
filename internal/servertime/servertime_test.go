package servertime

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// one visits the single node rdb.
func one(rdb *redis.Client) func(context.Context, func(context.Context, *redis.Client) error) error {
	return func(ctx context.Context, f func(context.Context, *redis.Client) error) error { return f(ctx, rdb) }
}

func follows(context.Context) (bool, error) { return true, nil }

// taken is a sample of [lo, hi] at mono time at, taken by this process
// awake.
func taken(lo, hi, at int64) *sample {
	_, gap := clocks()
	return &sample{lo: lo, hi: hi, at: at, gap: gap}
}

// TestRemainingAgreesWithPTTL: against a real server, Remaining of a
// deadline the server computed is at most the key's PTTL, and short of it
// by no more than Slack.
func TestRemainingAgreesWithPTTL(t *testing.T) {
	ctx := t.Context()
	rdb := redistest.StartServer(t).Client(t)
	var c Clock
	if _, ok := c.Remaining(1); ok {
		t.Fatal("a Clock with no sample answered")
	}
	first := time.Now()
	if ready, due := c.Check(); ready || !due {
		t.Fatalf("Check() = %v, %v on a new Clock; want not ready, due", ready, due)
	}
	if _, due := c.Check(); due {
		t.Fatal("Check reserved the first sample twice")
	}
	// A loaded machine may stretch TIME's round trip past MaxWidth, or
	// stop the process mid-sample: the Clock rightly keeps no such sample
	// (beside two CPU hogs, one in several runs), so sample until it keeps
	// one.
	var ready, due bool
	last := first // the last reservation
	for try := 0; !ready; try++ {
		if try == 100 {
			t.Fatalf("Check() = %v, %v after %d samples; want ready", ready, due, try)
		}
		if err := c.Sample(ctx, one(rdb), follows); err != nil {
			t.Fatal(err)
		}
		asked := time.Now() // no later than the Check's own reading of the clock
		ready, due = c.Check()
		if due && time.Since(last) < Period {
			t.Fatalf("Check() reserved a sample %v after the last; want none within %v", time.Since(last), Period)
		}
		if due {
			last = asked
		}
	}
	// The script computes the deadline as the store script stamps it.
	const ttl = 60000
	res, err := rdb.Eval(ctx, `
redis.call('SET', KEYS[1], 'x', 'PX', ARGV[1])
local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])`, []string{"k"}, ttl).Int64()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		start := time.Now()
		rem, ok := c.Remaining(res)
		pttl := rdb.PTTL(ctx, "k").Val()
		// The server read its clock for PTTL at most gap after Remaining
		// read ours: a loaded machine may take milliseconds in between.
		gap := time.Since(start)
		if !ok || rem > pttl+gap+time.Millisecond || rem < pttl-Slack {
			t.Fatalf("Remaining = %v, %v; PTTL just after %v, %v later (want within Slack below it)", rem, ok, pttl, gap)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if rem, _ := c.Remaining(1); rem != 0 {
		t.Errorf("Remaining of a deadline long past = %v; want 0", rem)
	}
}

// TestClockRefusesWhatItCannotBound: a sample too old or too wide is not
// used and does not replace a usable one; nodes that disagree widen the
// sample.
func TestClockRefusesWhatItCannotBound(t *testing.T) {
	now := mono()
	var c Clock
	c.keep(taken(0, int64(time.Millisecond), now))
	if ready, _ := c.Check(); !ready {
		t.Fatal("a narrow, fresh sample is not ready")
	}
	c.keep(taken(0, int64(MaxWidth)+1, now))
	if c.s.Load().hi != int64(time.Millisecond) {
		t.Error("a sample too wide to use replaced a usable one")
	}
	stepped := taken(int64(time.Hour), int64(time.Hour+5*time.Millisecond), now)
	c.keep(stepped)
	if c.s.Load() != stepped {
		t.Error("a usable sample (a server clock stepped an hour) did not replace a narrower one")
	}
	var old Clock
	old.keep(taken(0, 0, now-int64(MaxAge)-1))
	if ready, _ := old.Check(); ready {
		t.Error("a sample older than MaxAge is ready")
	}
	var b bracket
	b.add(now, 1000, now+10)
	b.add(now+5, int64(MaxWidth)+1000, now+15) // a node whose clock is far ahead
	var wide Clock
	ws := b.sample()
	_, ws.gap = clocks()
	wide.keep(ws)
	if ready, _ := wide.Check(); ready {
		t.Errorf("a sample over nodes %v apart is ready", MaxWidth)
	}
	if s := b.sample(); s.lo != 1000-now-10 || s.hi != int64(MaxWidth)+1000-now-5 || s.at != now {
		t.Errorf("bracket = %+v; want the union of both nodes' intervals", *s)
	}
}

// TestFollowsClock: a real server's TTLs run down with its clock;
// miniredis's stay until FastForward, and a Clock that checked it never
// answers.
func TestFollowsClock(t *testing.T) {
	ctx := t.Context()
	real := redistest.StartServer(t).Client(t)
	if ok, err := FollowsClock(ctx, real, "probe"); !ok || err != nil {
		t.Errorf("FollowsClock(redis-server) = %v, %v; want true", ok, err)
	}
	fake := redistest.Miniredis(t).Client(t)
	if ok, err := FollowsClock(ctx, fake, "probe"); ok || err != nil {
		t.Errorf("FollowsClock(miniredis) = %v, %v; want false", ok, err)
	}
	if n := real.Exists(ctx, "probe").Val(); n != 0 {
		t.Error("FollowsClock left its key behind")
	}
	var c Clock
	c.Check()
	err := c.Sample(ctx, one(fake.(*redis.Client)), func(ctx context.Context) (bool, error) {
		return FollowsClock(ctx, fake, "probe")
	})
	if ready, due := c.Check(); err != nil || !c.Refused() || ready || due {
		t.Errorf("a Clock of miniredis: err %v, refused %v; want refused, never ready nor due", err, c.Refused())
	}
}

// TestDueAfterFailure: a sample that failed (a server down, an ACL that
// refuses the probe) is not tried again before Period: reads do not start
// one each.
func TestDueAfterFailure(t *testing.T) {
	var c Clock
	if _, due := c.Check(); !due {
		t.Fatal("a new Clock is not due")
	}
	err := c.Sample(t.Context(), nil, func(context.Context) (bool, error) { return false, context.DeadlineExceeded })
	if err == nil || c.Refused() {
		t.Fatalf("Sample = %v, refused %v; want the check's error, not refused", err, c.Refused())
	}
	if _, due := c.Check(); due {
		t.Error("due again at once after a failed sample")
	}
}

// TestSleptSampleRefused: a sample taken before this process slept (its
// monotonic clock stopped while the servers' ran on) or before its wall
// clock was stepped is not used.
func TestSleptSampleRefused(t *testing.T) {
	var c Clock
	s := taken(0, int64(time.Millisecond), mono())
	s.gap -= int64(time.Second) // as if the wall clock ran a second ahead of the monotonic one since
	c.keep(s)
	if ready, _ := c.Check(); ready {
		t.Error("a sample from before a sleep is ready")
	}
	if _, ok := c.Remaining(MaxDeadline); ok {
		t.Error("a sample from before a sleep answered")
	}
}
