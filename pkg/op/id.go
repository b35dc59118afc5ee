package op

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// crockford is the alphabet of ULIDs: sortable, no ambiguous letters.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID returns prefix + "_" + a ULID-shaped identifier: 48 bits of
// millisecond time then 80 random bits, so ids sort by creation time.
// Prefixes in use: op (operation), att (attempt), evt (generated event id).
func NewID(prefix string) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never returns an error
	var out [26]byte
	// 128 bits as 26 base32 digits, most significant first.
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return prefix + "_" + string(out[:])
}
