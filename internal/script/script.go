// Package script holds the cache's Lua scripts, one file each in lua/,
// where each says what it does and its KEYS and ARGV. Every script takes
// all the keys it touches in KEYS, all sharing one hash tag, and computes
// expiry only from relative milliseconds (PX, PEXPIRE) or from the
// server's own TIME (see lua/expiry.lua): no client timestamp ever
// reaches Redis. The compute lock is a string holding the holder's random
// token; every write a holder makes checks that token first (fenced).
package script

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/wake"
)

// The scripts, sent by redisutil.Call (EVALSHA, then EVAL on NOSCRIPT).
var (
	Fetch       = load("fetch")
	FetchMany   = load("fetch_many")
	Refresh     = load("refresh")
	Store       = load("store")
	Fail        = load("fail")
	Release     = load("release")
	Extend      = load("extend")
	Set         = load("set")
	Delete      = load("delete")
	UndoSet     = load("undo_set")
	StoreTagged = load("store_tagged")
	TagAdd      = load("tag_add")
	TagBump     = load("tag_bump")
	Void        = load("void")
)

// Replies of Fetch and FetchMany (the first element of a key's array reply).
const (
	Value  = 0 // {0, value}: the value is there
	Locked = 1 // {1}: the caller holds the compute lock
	Busy   = 2 // {2, holder, pttl[, sha1 of the value passed over]}: another holder computes
	Failed = 3 // {3, text}: the compute of the awaited holder failed
)

//go:embed lua/*.lua
var files embed.FS

// wakeNames puts the wake-up payloads (see internal/wake) where the
// scripts name them.
var wakeNames = strings.NewReplacer("WAKE_STORED", "'"+wake.Stored+"'", "WAKE_FAILED", "'"+wake.Failed+"'",
	"WAKE_RELEASED", "'"+wake.Released+"'", "WAKE_DELETED", "'"+wake.Deleted+"'")

// load reads lua/name.lua. A line "--@ other" in it stands for
// lua/other.lua (once per script: the shared functions), and comment lines
// are left out, so that the server parses and the wire carries only code.
func load(name string) *redis.Script {
	var b strings.Builder
	include(&b, name, map[string]bool{})
	return redis.NewScript(wakeNames.Replace(b.String()))
}

func include(b *strings.Builder, name string, seen map[string]bool) {
	if seen[name] {
		return
	}
	seen[name] = true
	src, err := files.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("dogpile: " + err.Error()) // a script missing from the build: every one loads at init
	}
	for line := range strings.Lines(string(src)) {
		switch {
		case strings.HasPrefix(line, "--@ "):
			include(b, strings.TrimSpace(line[len("--@ "):]), seen)
		case !strings.HasPrefix(line, "--"):
			b.WriteString(line)
		}
	}
}

// At returns res[i] as an E, or false.
func At[E any](res []any, i int) (E, bool) {
	var zero E
	if i >= len(res) {
		return zero, false
	}
	e, ok := res[i].(E)
	return e, ok
}
