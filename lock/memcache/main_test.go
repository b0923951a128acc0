package memcache_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// exampleAddr is the private memcached the runnable examples use, started
// by TestMain since examples get no testing.TB.
var exampleAddr string

func TestMain(m *testing.M) {
	if !redistest.MemcachedAvailable() && os.Getenv("CI") == "" {
		fmt.Println("skipping lock/memcache: memcached not found; install it with: apt-get install -y memcached")
		return
	}
	srv, err := redistest.RunMemcached()
	if err != nil {
		if srv != nil {
			srv.Stop()
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exampleAddr = srv.Addr()
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
