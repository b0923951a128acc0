package redisutil

import (
	"crypto/rand"
	"encoding/base64"
)

// Token returns 128 random bits, unguessable by other owners, as 22
// characters. Not a UUID string (github.com/google/uuid): its 36 characters
// cost every lock key 16 bytes in Redis and every Lock+Unlock two more
// allocations, for no property a token needs (bench/HISTORY.md, "Issue 40
// item 6").
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
