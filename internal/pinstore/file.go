package pinstore

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxCacheEntry bounds a libcni cache entry read whole; a chain's
// configuration and result are a few KiB.
const MaxCacheEntry = 256 << 10

// ReadFile reads a regular file of at most limit bytes that is not the
// store's (a libcni cache entry, Multus' cache of a pod's delegates, a
// record read without the store's lock), without following a symlink or
// blocking on a FIFO put in its place.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("%s: over %d bytes", path, limit)
	}
	return data, err
}
