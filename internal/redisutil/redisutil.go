// Package redisutil holds what the cache (package dogpile) and the lock
// package must do the same way when they talk to Redis, in one file per
// concern:
//
//   - keys.go: where keys live. Tag and Key give one object's keys a
//     shared hash tag, so one cluster slot; Slot computes that slot,
//     NodeOf (node.go) finds the server that holds a key, and MustClient
//     refuses a nil client.
//   - token.go: owner tokens, Token and TokenWith, unguessable by other
//     owners, and IsToken.
//   - pipeline.go and scripts.go: how commands are sent. Pipelined runs
//     every pipeline of the library, and Call, RunScripts and
//     ScriptPipeline every Lua script: EVALSHA first, EVAL again for the
//     calls answered NOSCRIPT.
//   - errors.go: what a failed request did. NeverSent, ErrNotSent and
//     ErrUnavailable mark requests that never reached Redis; MayHaveRun is
//     their opposite, the test of every rollback.
//   - cleanup.go and rollback.go: work that outlives its caller. Detached
//     and CleanupTimeout bound it, Failed words its error, and Rollback
//     undoes requests whose replies were lost.
//   - redisutil.go: units. Millis turns a duration into PX milliseconds,
//     Wait a PTTL reply into a wait.
package redisutil

import "time"

// Millis converts d to whole milliseconds for PX and PEXPIRE, rounding up
// so that a sub-millisecond remainder never becomes an invalid PX 0.
func Millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Wait turns a holder's PTTL reply into how long to wait before looking
// again: 0 means the key expires this very millisecond, and a negative
// reply (a key without TTL, not one of ours) gets unknown.
func Wait(pttl int64, unknown time.Duration) time.Duration {
	switch {
	case pttl == 0:
		return time.Millisecond
	case pttl < 0:
		return unknown
	}
	return time.Duration(pttl) * time.Millisecond
}
