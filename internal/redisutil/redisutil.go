// Package redisutil holds the small rules that the cache and the lock
// package must apply the same way when they talk to Redis: hash tags that
// keep one object's keys in one cluster slot, owner tokens, millisecond
// TTLs, and how to read an error or a PTTL reply.
package redisutil

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"time"
)

// Tag returns the hash tag, braces included, under which every key of the
// object called name is stored, so that they all share one cluster slot.
// A name with a brace would end the tag early (or leave it empty) and split
// the keys over slots, so it is replaced by a hash of it; the trailing '#'
// keeps a hashed name apart from a plain name that looks like a hash.
func Tag(name string) string {
	if strings.ContainsAny(name, "{}") {
		sum := sha256.Sum256([]byte(name))
		return "{" + hex.EncodeToString(sum[:16]) + "}#"
	}
	return "{" + name + "}"
}

// Key returns prefix followed by name's tag (see Tag), as one string built
// in one allocation: it is made on every cache hit.
func Key(prefix, name string) string {
	if strings.ContainsAny(name, "{}") {
		return prefix + Tag(name)
	}
	return prefix + "{" + name + "}"
}

// Token returns 128 random bits, unguessable by other owners, as 22
// characters.
func Token() string {
	var b [tokenLen]byte
	return string(appendToken(b[:0]))
}

// TokenWith returns a new Token with suffix after it, in one allocation:
// the token is all but the last byte.
func TokenWith(suffix byte) string {
	var b [tokenLen + 1]byte
	return string(append(appendToken(b[:0]), suffix))
}

const tokenLen = 22 // base64 characters of 16 bytes, unpadded

// IsToken reports whether s may be a Token: tokenLen characters of its
// alphabet.
func IsToken(s string) bool {
	if len(s) != tokenLen {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil
}

func appendToken(b []byte) []byte {
	var r [16]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand doc)
	return base64.RawURLEncoding.AppendEncode(b, r[:])
}

// Millis converts d to whole milliseconds for PX and PEXPIRE, rounding up
// so that a sub-millisecond remainder never becomes an invalid PX 0.
func Millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// NeverSent reports whether err proves a request never reached Redis (the
// connection could not even be made), so there is nothing to undo.
func NeverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// ErrNotSent marks the error of a request that was never sent: its caller
// left while it waited in a queue (lock's batches).
var ErrNotSent = errors.New("request not sent")

// ErrUnavailable is the error of a call that skipped Redis, or whose dial
// was answered at once, because Redis is known to be unreachable (see
// internal/breaker): it sent nothing.
var ErrUnavailable = errors.New("redis unavailable")

// MayHaveRun reports whether a request that failed with err may have run
// in Redis all the same, its reply lost (a timeout, a cancelled context, a
// broken connection), so that what it may have done must be undone: the
// one test of the cache's and every lock's rollbacks. Not when the request
// provably never left (the dial failed, ErrNotSent, ErrUnavailable).
func MayHaveRun(err error) bool {
	return err != nil && !NeverSent(err) && !errors.Is(err, ErrNotSent) && !errors.Is(err, ErrUnavailable)
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

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key when it has none, modulo 16384.
func Slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
