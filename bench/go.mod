module github.com/dogpile-go/dogpile/bench

go 1.26.0

require (
	github.com/bsm/redislock v0.9.4
	github.com/dogpile-go/dogpile v0.1.0
	github.com/dtm-labs/rockscache v0.1.1
	github.com/go-redis/cache/v9 v9.0.0
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/vmihailenco/msgpack/v5 v5.4.1
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/compress v1.13.6 // indirect
	github.com/lithammer/shortuuid v3.0.0+incompatible // indirect
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	github.com/vmihailenco/go-tinylfu v0.2.2 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
