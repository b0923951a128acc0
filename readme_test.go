package dogpile_test

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/lock"
)

// The Go code of README.md lives here too, so that it compiles with the
// tests: each ```go block of the README is the region of this file between
// a line "// README: <section>" and a line "// end README", one tab less
// indented. TestReadmeSnippets fails when the two differ.

type User struct {
	ID   int
	Name string
}

type userDB interface {
	LoadUser(ctx context.Context, id int) (User, error)
}

type tapDB interface {
	Pour(ctx context.Context, fence int64) error
}

func readmeCache(ctx context.Context, db userDB) (User, error) {
	// README: The cache in ten lines
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	users := dogpile.New[User](rdb, dogpile.WithPrefix("users:"))
	defer users.Close()

	u, err := users.Fetch(ctx, "42", time.Minute, func(ctx context.Context) (User, error) {
		return db.LoadUser(ctx, 42) // runs once in the whole fleet per expiry
	})
	// end README
	return u, err
}

func readmeMutex(ctx context.Context, rdb redis.UniversalClient, db tapDB) error {
	// README: The mutex in ten lines
	tap := lock.NewMutex(rdb, "beer-tap", lock.WithTTL(10*time.Second))
	lease, err := tap.Lock(ctx) // waits; woken by Redis when the holder releases
	if err != nil {
		return err // the context's error (matching lock.ErrNotObtained), or Redis's
	}
	defer lease.Unlock(ctx)
	return db.Pour(ctx, lease.Fence()) // the store refuses a fence below the highest it saw
	// end README
}

func readmeDebug(users *dogpile.Cache[User], sessions *dogpile.Cache[string]) *http.ServeMux {
	// README: Debug page
	internal := http.NewServeMux() // served on a port only operators reach
	internal.Handle("/debug/dogpile", dogpile.DebugHandler(users, dogpile.HideKeys(sessions)))
	// end README
	return internal
}

// TestReadmeSnippets: README.md shows the code above, block for block.
func TestReadmeSnippets(t *testing.T) {
	readme := fencedBlocks(t, "README.md", "```go")
	mirrored := mirroredRegions(t, "readme_test.go")
	if len(readme) != len(mirrored) {
		t.Fatalf("README.md has %d Go blocks, readme_test.go mirrors %d: keep them in step", len(readme), len(mirrored))
	}
	for i := range readme {
		if readme[i] != mirrored[i] {
			t.Errorf("README.md's Go block %d differs from readme_test.go's region %d:\n--- README.md\n%s\n--- readme_test.go\n%s",
				i+1, i+1, readme[i], mirrored[i])
		}
	}
}

// TestReadmeTestCommandIsCIs: CI runs "the test command README.md gives";
// .ci/run spells it out, so the two must be the same line.
func TestReadmeTestCommandIsCIs(t *testing.T) {
	var readme string
	for _, b := range fencedBlocks(t, "README.md", "```") {
		if strings.Contains(b, "go test -race ./...") {
			readme = b
		}
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	if readme == "" || lines[len(lines)-1] != readme {
		t.Errorf("README.md's test command and the last line of .ci/run differ:\nREADME.md: %s\n.ci/run:   %s", readme, lines[len(lines)-1])
	}
}

// fencedBlocks returns the contents of the blocks of file that open with
// the line open exactly and close with a line "```"; every block opens
// with a line that starts with "```" (and its language, if any).
func fencedBlocks(t *testing.T, file, open string) []string {
	t.Helper()
	var blocks []string
	var cur []string
	in, keep := false, false
	eachLine(t, file, func(line string) {
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in, keep, cur = true, line == open, nil
		case in && line == "```":
			in = false
			if keep {
				blocks = append(blocks, strings.Join(cur, "\n"))
			}
		case in:
			cur = append(cur, line)
		}
	})
	return blocks
}

// mirroredRegions returns the regions of file between "// README: ..."
// and "// end README" lines, one tab less indented.
func mirroredRegions(t *testing.T, file string) []string {
	t.Helper()
	var regions []string
	var cur []string
	in := false
	eachLine(t, file, func(line string) {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "// README: "):
			in, cur = true, nil
		case trimmed == "// end README":
			in = false
			regions = append(regions, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, strings.TrimPrefix(line, "\t"))
		}
	})
	return regions
}

func eachLine(t *testing.T, file string, f func(string)) {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f(sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
