package dogpileotel_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// release is the version the checkout is published as in TestInstall:
// the first tag (see the CHANGELOG's release plan).
const release = "v0.1.0"

// TestInstall installs dogpileotel the way a user does, from a module
// proxy, with no replace directive and no workspace: a file-system proxy
// serves this checkout's root module and dogpileotel as the first
// release, and a new module that requires both builds (issue 20: its
// go.mod required a placeholder version through replace ../, which a user
// cannot fetch). The other modules come from the module cache or the
// usual proxy.
func TestInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module from a proxy")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	publish(t, proxy, "github.com/dogpile-go/dogpile", root)
	publish(t, proxy, "github.com/dogpile-go/dogpile/dogpileotel", filepath.Join(root, "dogpileotel"))
	if mod, err := os.ReadFile(filepath.Join(root, "dogpileotel", "go.mod")); err != nil || strings.Contains(string(mod), "replace") {
		t.Fatalf("dogpileotel's go.mod has a replace directive (or cannot be read: %v):\n%s", err, mod)
	}

	app := t.TempDir()
	write(t, filepath.Join(app, "go.mod"), "module example.com/app\n\ngo 1.26.0\n")
	write(t, filepath.Join(app, "main.go"), `package main

import (
	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/dogpileotel"
	"github.com/redis/go-redis/v9"
)

func main() {
	obs := dogpileotel.New()
	rdb := redis.NewClient(&redis.Options{})
	_ = dogpile.New[string](rdb, dogpile.WithObserver(obs.Cache))
}
`)
	// A module cache of its own: in the machine's, the release fetched by
	// an earlier run stays, and go would build that copy instead of this
	// checkout. The other modules come from the machine's download cache,
	// served as a proxy (no network when it has them), or upstream;
	// -trimpath keeps their builds cached whatever the cache's path.
	upstream := strings.TrimSpace(goEnv(t, "GOPROXY"))
	downloads := filepath.Join(strings.TrimSpace(goEnv(t, "GOMODCACHE")), "cache", "download")
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -modcacherw -trimpath", "GOTOOLCHAIN=local",
		"GOMODCACHE="+t.TempDir(),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(downloads)+","+upstream,
		"GONOSUMDB=github.com/dogpile-go", "GOPRIVATE=")
	for _, args := range [][]string{
		{"get", "github.com/dogpile-go/dogpile/dogpileotel@" + release},
		{"mod", "tidy"},
		{"build", "./..."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = app, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sum, err := os.ReadFile(filepath.Join(app, "go.mod"))
	if err != nil || !strings.Contains(string(sum), "github.com/dogpile-go/dogpile "+release) {
		t.Errorf("the app's go.mod does not require the root module at %s:\n%s", release, sum)
	}
}

// publish puts the module at dir into the file-system proxy as release.
func publish(t *testing.T, proxy, path, dir string) {
	t.Helper()
	at := filepath.Join(proxy, filepath.FromSlash(path), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(at, release+".mod"), string(mod))
	write(t, filepath.Join(at, release+".info"), `{"Version":"`+release+`","Time":"2026-11-24T00:00:00Z"}`)
	write(t, filepath.Join(at, "list"), release+"\n")
	f, err := os.Create(filepath.Join(at, release+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := modzip.CreateFromDir(f, module.Version{Path: path, Version: release}, dir); err != nil {
		t.Fatalf("zip %s: %v", path, err)
	}
}

func write(t *testing.T, name, text string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
