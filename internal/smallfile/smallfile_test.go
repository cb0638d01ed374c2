package smallfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// ReadPath reads a file larger than its first buffer whole, a seq_file to
// its end, and names the path in its errors.
func TestReadPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	want := make([]byte, 40<<10+3)
	for i := range want {
		want[i] = byte('a' + i%26)
	}
	require.NoError(t, os.WriteFile(p, want, 0o644))
	got, err := ReadPath(p, len(want))
	require.NoError(t, err)
	assert.Equal(t, want, got)
	_, err = ReadPath(p, len(want)-1)
	require.ErrorIs(t, err, ErrTooLarge)
	assert.Contains(t, err.Error(), p, "the error names the file")

	// The mount table may change meanwhile (other mounts on the host):
	// compared when it read the same before and after.
	for range 20 {
		before, err := os.ReadFile("/proc/self/mountinfo")
		require.NoError(t, err)
		mi, err := ReadPath("/proc/self/mountinfo", 64<<20)
		require.NoError(t, err)
		after, err := os.ReadFile("/proc/self/mountinfo")
		require.NoError(t, err)
		if string(before) == string(after) {
			assert.Equal(t, string(before), string(mi), "a seq_file, read to its end")
			break
		}
	}

	_, err = ReadPath(filepath.Join(t.TempDir(), "none"), 10)
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "none")
	dir := t.TempDir()
	_, err = ReadPath(dir, 10)
	require.ErrorContains(t, err, dir+": not a regular file", "a directory")
}

// A FIFO without a writer and a device are errors naming them, at once.
func TestReadPathRefusesWhatIsNoRegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	_, err := ReadPath(fifo, 10)
	require.ErrorContains(t, err, fifo+": not a regular file")
	_, err = ReadPath("/dev/zero", 10)
	require.ErrorContains(t, err, "/dev/zero: not a regular file")
}

// ReadAt reads below its directory only, never through a symlink.
func TestReadAt(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rec"), []byte("x\n"), 0o600))
	require.NoError(t, os.Symlink("rec", filepath.Join(dir, "link")))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)

	got, err := ReadAt(fd, "rec", 2)
	require.NoError(t, err)
	assert.Equal(t, "x\n", string(got))
	_, err = ReadAt(fd, "rec", 1)
	require.ErrorIs(t, err, ErrTooLarge)
	assert.Contains(t, err.Error(), "rec")
	_, err = ReadAt(fd, "link", 10)
	require.ErrorIs(t, err, unix.ELOOP, "a symlink is not followed")
	_, err = ReadAt(fd, "../"+filepath.Base(dir)+"/rec", 10)
	require.ErrorIs(t, err, unix.EXDEV, "nothing above the directory")
	_, err = ReadAt(fd, "fifo", 10)
	require.ErrorContains(t, err, "fifo: not a regular file")
	_, err = ReadAt(fd, "none", 10)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// Read with short stops at a read that does not fill the buffer, and
// grows the buffer for a file that fills it.
func TestReadShort(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("0123456789"), 0o644))
	for _, size := range []int{4, 10, 64} {
		fd, err := OpenIn(unix.AT_FDCWD, p)
		require.NoError(t, err)
		got, err := Read(fd, make([]byte, size), 100, true)
		unix.Close(fd)
		require.NoError(t, err)
		assert.Equal(t, "0123456789", string(got), "buffer of %d", size)
	}
}

// ReadIn refuses a symlink as the directory and as the file; ReadChunkAt
// reads a bounded piece from an offset and says the file's size.
func TestReadInAndChunks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("0123456789"), 0o600))
	data, err := ReadIn(dir, "f", 100)
	require.NoError(t, err)
	require.Equal(t, "0123456789", string(data))
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	_, err = ReadIn(link, "f", 100)
	require.ErrorContains(t, err, link)
	require.NoError(t, os.Symlink("f", filepath.Join(dir, "g")))
	_, err = ReadIn(dir, "g", 100)
	require.ErrorContains(t, err, filepath.Join(dir, "g")+": a symlink")

	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	data, size, err := ReadChunkAt(fd, "f", 3, 4)
	require.NoError(t, err)
	require.Equal(t, "3456", string(data))
	require.Equal(t, int64(10), size)
	data, _, err = ReadChunkAt(fd, "f", 12, 4)
	require.NoError(t, err)
	require.Empty(t, data)
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	_, _, err = ReadChunkAt(fd, "fifo", 0, 4)
	require.ErrorIs(t, err, ErrNotRegular)
}
