package pinstore

import (
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// MaxCacheEntry bounds a libcni cache entry read whole; a chain's
// configuration and result are a few KiB.
const MaxCacheEntry = 256 << 10

// ReadFile reads a regular file of at most limit bytes that is not the
// store's (a libcni cache entry, Multus' cache of a pod's delegates, a
// record read without the store's lock), without following a symlink or
// blocking on a FIFO put in its place.
func ReadFile(path string, limit int64) ([]byte, error) {
	return regfile.ReadFile(path, unix.O_NOFOLLOW, limit)
}
