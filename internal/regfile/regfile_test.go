package regfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Read takes a regular file up to its bound, and names the file in every
// refusal: too large, a FIFO without a writer, a device, a directory.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("0123456789"), 0o600))
	read := func(path string, limit int64) ([]byte, error) {
		f, err := os.OpenFile(path, ReadFlags, 0)
		require.NoError(t, err, path)
		defer f.Close()
		return Read(f, limit)
	}
	data, err := read(p, 10)
	require.NoError(t, err)
	assert.Equal(t, "0123456789", string(data))
	_, err = read(p, 9)
	require.ErrorContains(t, err, p+": file too large")

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	for path, kind := range map[string]string{fifo: "a FIFO", "/dev/zero": "a character device", dir: "a directory"} {
		_, err := read(path, 10)
		require.ErrorContains(t, err, path+": not a regular file: "+kind)
	}
}

// OpenBeneath stays below its directory and never follows a symlink, not
// even one that stays inside.
func TestOpenBeneath(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "rec"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink("rec", filepath.Join(dir, "sub", "link")))
	require.NoError(t, os.Symlink("sub", filepath.Join(dir, "subLink")))
	d, err := os.Open(dir)
	require.NoError(t, err)
	defer d.Close()
	dirfd := int(d.Fd())

	f, err := OpenBeneath(dirfd, "sub/rec", ReadFlags, 0)
	require.NoError(t, err)
	data, err := Read(f, 10)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	assert.Equal(t, "x", string(data))

	for _, name := range []string{"sub/link", "subLink/rec", "../" + filepath.Base(dir) + "/sub/rec", "/etc/passwd"} {
		_, err := OpenBeneath(dirfd, name, ReadFlags, 0)
		require.ErrorContains(t, err, "open "+name+": a symlink (or a path through one, or out of its directory), never followed", name)
	}
	_, err = OpenBeneath(dirfd, "missing", ReadFlags, 0)
	require.ErrorIs(t, err, os.ErrNotExist)
}
