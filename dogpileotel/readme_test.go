package dogpileotel_test

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/dogpileotel"
	"github.com/dogpile-go/dogpile/lock"
)

// The README's dogpileotel block (fenced "```go dogpileotel", which the
// root module's README test leaves out: that module cannot import this
// one) lives here too, so that it compiles with this module's tests: it is
// the region of this file between "// README: dogpileotel" and "// end
// README", one tab less indented.

type User struct{ Name string }

func readmeOtel(rdb redis.UniversalClient) *lock.Mutex {
	// README: dogpileotel
	obs := dogpileotel.New() // the global meter and tracer providers
	users := dogpile.New[User](rdb, dogpile.WithPrefix("users:"), dogpile.WithObserver(obs.Cache))
	defer users.Close()
	obs.Watch(users) // hot keys and the samplers' counts
	tap := lock.NewMutex(rdb, "beer-tap", lock.WithObserver(obs.Lock))
	// end README
	return tap
}

// TestReadmeSnippet: the README shows the code above. It is skipped where
// the README is not beside this module (in its module zip).
func TestReadmeSnippet(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("no ../README.md")
	}
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "\n```go dogpileotel\n")
	block, _, ok2 := strings.Cut(block, "\n```\n")
	_, region, ok3 := strings.Cut(string(src), "\t// README: dogpileotel\n")
	region, _, ok4 := strings.Cut(region, "\n\t// end README")
	region = strings.ReplaceAll("\n"+region, "\n\t", "\n")[1:]
	if !ok || !ok2 || !ok3 || !ok4 || block != region {
		t.Errorf("README.md's dogpileotel block differs from readme_test.go's region:\n--- README.md\n%s\n--- readme_test.go\n%s", block, region)
	}
}
