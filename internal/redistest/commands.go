package redistest

import (
	"sync"

	"github.com/redis/go-redis/v9"
)

// A CommandLog records the names of the commands a client sends, alone or
// in pipelines, but not the handshake of a new pooled connection (see
// IsHandshake): what a call costs in commands. Pub/sub commands go on a
// connection of their own and are not seen by hooks.
type CommandLog struct {
	mu    sync.Mutex
	names []string
}

// RecordCommands adds a hook to rdb that records its commands into the
// log it returns.
func RecordCommands(rdb redis.UniversalClient) *CommandLog {
	l := &CommandLog{}
	rdb.AddHook(Hook{Before: l.record})
	return l
}

func (l *CommandLog) record(cmds ...redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cmds {
		if !IsHandshake(c) {
			l.names = append(l.names, c.Name())
		}
	}
}

// Take returns the names recorded since the last Take.
func (l *CommandLog) Take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.names
	l.names = nil
	return n
}
