package redisutil

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
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
