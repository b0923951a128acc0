package deps

import (
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/google/uuid"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/vmihailenco/msgpack/v5"
	_ "go.uber.org/goleak"
	_ "golang.org/x/sync/singleflight"
)
