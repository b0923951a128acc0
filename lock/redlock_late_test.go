package lock_test

// Late replies to a Redlock's acquire: a grant that lands after its attempt
// failed or its lease was given up is released, and a request that lands
// after its lease's release takes nothing.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// TestRedlockLateGrantAfterFailedAcquireIsReleased: three servers of five
// are held by another owner, and the other two grant the lock but answer
// late. TryLock reports the lock busy as soon as the three have said so,
// and the two late grants are released when they arrive.
func TestRedlockLateGrantAfterFailedAcquireIsReleased(t *testing.T) {
	srvs, direct := startServers(t, 5, redis.Options{ContextTimeoutEnabled: true})
	const key = "dogpile:redlock:{job}"
	// On all three: with a grant still on its way, TryLock could take that
	// server, and then need the late ones to decide.
	held := lockEverywhere(t, lock.NewRedlock(direct[:3], "job", lock.WithTTL(time.Minute)), direct[:3], key)
	defer held.Unlock(t.Context())
	clients := direct[:3:3]
	var proxies []*redistest.Proxy
	for _, s := range srvs[3:] {
		p := redistest.StartProxy(t, s.Addr())
		proxies = append(proxies, p)
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	// Dialled and with the scripts loaded, the late servers take the lock
	// at once and only their replies are late: one round trip, not three.
	warm, err := lock.NewRedlock(clients[3:], "warm-up").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(t.Context())
	for _, p := range proxies {
		p.DelayReplies(2 * time.Second) // within the 3 s each server gets (TTL/20)
	}
	start := time.Now()
	l, ok, err := lock.NewRedlock(clients, "job", lock.WithTTL(time.Minute)).TryLock(t.Context())
	if ok || err != nil {
		t.Fatalf("TryLock with 3 of 5 servers held by another = %v, %v, %v; want false, nil", l, ok, err)
	}
	d := time.Since(start)
	t.Logf("TryLock took %v", d)
	if d > 1500*time.Millisecond {
		t.Errorf("TryLock took %v; want it once a majority said busy, before the 2 s late replies", d)
	}
	for i, c := range direct[3:] {
		redistest.Eventually(t, fmt.Sprintf("server %d to grant the lock, late", 3+i), func() bool {
			return c.Exists(t.Context(), key).Val() == 1
		})
	}
	for i, c := range direct[3:] {
		redistest.Eventually(t, fmt.Sprintf("the late grant on server %d to be released", 3+i), func() bool {
			return c.Exists(t.Context(), key).Val() == 0
		})
	}
}

// redlockScript names the Redlock script cmd runs on key: "acquire" or
// "bar" by its hash (see lock.RedlockScript), "release" by its arguments
// (EVALSHA sha 1 key "token:"), or "" for anything else.
func redlockScript(cmd redis.Cmder, key string) string {
	a := cmd.Args()
	if n := cmd.Name(); n != "evalsha" && n != "eval" || len(a) < 5 || a[3] != key {
		return ""
	}
	if s := lock.RedlockScript(a[1]); s != "" {
		return s
	}
	if v, _ := a[4].(string); len(a) == 5 && strings.HasSuffix(v, ":") {
		return "release"
	}
	return ""
}

// TestRedlockLateGrantAfterGiveUpIsReleased: a grant from a slow server
// that lands after the lease was given up is released. Server 0 holds the
// acquire back until after the lease's Unlock released the lock there, so
// the grant creates the key afresh; its reply comes while Unlock still
// waits for server 2's release (held back until the late grant was undone,
// or for half a second). The grant used to be kept unless the lease had
// ended, which it does only once the release round is over: the key stayed
// on server 0 for the whole TTL. A lease that was lost (its renewal
// refused) before the late grant came has it released too.
func TestRedlockLateGrantAfterGiveUpIsReleased(t *testing.T) {
	const key = "dogpile:redlock:{job}"
	for _, lost := range []bool{false, true} {
		name := "during Unlock"
		if lost {
			name = "after loss"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srvs, clients := startServers(t, 3, redis.Options{ContextTimeoutEnabled: true})
			// A 10-minute TTL gives each server 30 s to grant (TTL/20), far
			// more than the grant is held back, and outlives the test: a
			// grant that is kept is still there at the end.
			rl := lock.NewRedlock(clients, "job", lock.WithTTL(10*time.Minute))
			// Every server dialled, with the scripts loaded.
			lockEverywhere(t, lock.NewRedlock(clients, "warm-up"), clients, "dogpile:redlock:{warm-up}").Unlock(t.Context())

			var armed, holding atomic.Bool
			var releases atomic.Int64 // on server 0, once armed
			letAcquire := make(chan struct{})
			acquired := make(chan struct{}) // server 0 ran the held-back acquire
			undone := make(chan struct{})   // server 0 got a second release: the undo
			clients[0].(*redis.Client).AddHook(redistest.Hook{Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if !armed.Load() {
					return next(ctx, cmd)
				}
				switch redlockScript(cmd, key) {
				case "acquire":
					if holding.CompareAndSwap(false, true) {
						<-letAcquire
						err := next(ctx, cmd)
						close(acquired)
						return err
					}
				case "release":
					err := next(ctx, cmd)
					switch releases.Add(1) {
					case 1:
						if !lost {
							close(letAcquire) // Unlock's release went first
						}
					case 2:
						close(undone)
					}
					return err
				}
				return next(ctx, cmd)
			}})
			if !lost {
				var once atomic.Bool
				clients[2].(*redis.Client).AddHook(redistest.Hook{Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
					if armed.Load() && redlockScript(cmd, key) == "release" && once.CompareAndSwap(false, true) {
						// Keep Unlock's release round open until the late
						// grant has come and been dealt with.
						<-acquired
						select {
						case <-undone:
						case <-time.After(500 * time.Millisecond):
						}
					}
					return next(ctx, cmd)
				}})
			}
			armed.Store(true)

			l, err := rl.Lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if lost {
				// Gone from servers 1 and 2: the renewal is refused by a
				// majority, and the lease is lost.
				for _, c := range clients[1:] {
					c.Del(t.Context(), key)
				}
				if err := l.Extend(t.Context(), 10*time.Minute); err != lock.ErrNotHeld {
					t.Fatalf("Extend with the key gone from 2 of 3 servers = %v; want ErrNotHeld", err)
				}
				if err := l.Err(); err != lock.ErrLost {
					t.Fatalf("Err after a refused Extend = %v; want ErrLost", err)
				}
				close(letAcquire)
			} else if err := l.Unlock(t.Context()); err != nil {
				t.Errorf("Unlock = %v; want nil", err)
			}
			select {
			case <-acquired:
			case <-time.After(10 * time.Second):
				t.Fatal("server 0 never ran the held-back acquire")
			}
			direct := srvs[0].Client(t)
			redistest.Eventually(t, "the late grant on server 0 to be released", func() bool {
				return direct.Exists(t.Context(), key).Val() == 0
			})
			if lost {
				if err := l.Unlock(t.Context()); err != lock.ErrNotHeld {
					t.Errorf("Unlock of a lost lease = %v; want ErrNotHeld", err)
				}
			}
		})
	}
}

// TestRedlockRequestLandingAfterReleaseTakesNothing: server 2's acquire
// request is held back (a slow network, or a server stopped with it in its
// socket) past its attempt's timeout, while servers 0 and 1 grant the
// lease; the lease is released, and only then does the request reach
// server 2. It used to take the lock there for a whole TTL, with nobody
// left to release it. The attempt is barred on server 2 once its request
// failed, so it takes nothing.
func TestRedlockRequestLandingAfterReleaseTakesNothing(t *testing.T) {
	const key = "dogpile:redlock:{held}"
	srvs := startIndependent(t, 3)
	proxy := redistest.StartProxy(t, srvs[2].Addr())
	var clients []redis.UniversalClient
	for _, addr := range []string{srvs[0].Addr(), srvs[1].Addr(), proxy.Addr()} {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	// A TTL of 5 s: each server has 250 ms to answer an acquire (TTL/20),
	// and a key taken by the late request would stay for seconds.
	rl := lock.NewRedlock(clients, "held", lock.WithTTL(5*time.Second))
	lockEverywhere(t, lock.NewRedlock(clients, "warm-up"), clients, "dogpile:redlock:{warm-up}").Unlock(t.Context())

	proxy.DelayRequests(3 * time.Second)
	l, ok, err := rl.TryLock(t.Context())
	if err != nil || !ok {
		t.Fatalf("TryLock with server 2 slow = %v, %v; want a lease from servers 0 and 1", ok, err)
	}
	proxy.DelayRequests(0) // the acquire held back keeps its delay
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock = %v; want nil", err)
	}
	lock.WaitRollbacks()
	redistest.Eventually(t, "the held-back acquire sent on to server 2", func() bool { return proxy.HeldRequests() == 0 })
	// The request is in server 2's socket: a command sent now runs after
	// it. Watch the key for a while: the grant would stay for the TTL.
	direct := srvs[2].Client(t)
	redistest.Within(time.Second, func() bool {
		if pttl := direct.PTTL(t.Context(), key).Val(); pttl > 0 {
			t.Fatalf("server 2 holds the lock (%v left) after the lease was released", pttl)
		}
		return false
	})
	l, ok, err = lock.NewRedlock(clients[2:], "held").TryLock(t.Context())
	if err != nil || !ok {
		t.Fatalf("TryLock on server 2 alone = %v, %v; want the lock free", ok, err)
	}
	l.Unlock(t.Context())
}
