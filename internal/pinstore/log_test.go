package pinstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/conf"
)

// TestLogFileNeverFollowsASymlink: a symlink planted as logFile (its
// default directory, /var/log, is group-writable on Debian) makes the log
// go to stderr, and its target is not written; a FIFO or a directory is
// refused at once, naming it.
func TestLogFileNeverFollowsASymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	require.NoError(t, os.WriteFile(target, []byte("keep\n"), 0o600))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(target, link))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	sub := filepath.Join(dir, "dir")
	require.NoError(t, os.Mkdir(sub, 0o700))

	for path, want := range map[string]string{link: "a symlink", fifo: "a FIFO", sub: "a directory", "/dev/null": "a character device"} {
		_, err := OpenLogFile(path)
		require.Error(t, err, path)
		assert.Contains(t, err.Error(), want, path)
		assert.Contains(t, err.Error(), filepath.Base(path), path)
		log, done := NewLogger(&conf.Config{LogFile: path, LogLevel: "info"})
		log.Info("written")
		done()
	}
	data, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep\n", string(data), "the symlink's target is not written")

	good := filepath.Join(dir, "netns-pin.log")
	log, done := NewLogger(&conf.Config{LogFile: good, LogLevel: "info"})
	log.Info("written")
	done()
	data, err = os.ReadFile(good)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"msg":"written"`)
}

// Hole: a regular log file that exists but cannot be opened for writing
// (a read-only mount, say) gave no file and no error, and the log went
// nowhere. The error is returned, and the log goes to stderr.
func TestLogFileThatCannotBeOpenedIsAnError(t *testing.T) {
	require.Zero(t, os.Geteuid(), "a read-only bind mount: run as root")
	dir := t.TempDir()
	path := filepath.Join(dir, "netns-pin.log")
	require.NoError(t, os.WriteFile(path, []byte("old\n"), 0o600))
	require.NoError(t, unix.Mount(dir, dir, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	require.NoError(t, unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""))

	f, err := OpenLogFile(path)
	assert.Nil(t, f)
	require.ErrorIs(t, err, unix.EROFS)
}
