package conf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// --conf as the command line and the node agent read it: a conflist's
// entry with the path flags applied; the defaults without a file; and a
// special file or an oversized one is an error naming it, never a hang or
// an unbounded read.
func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "ceph-public.conflist")
	require.NoError(t, os.WriteFile(list, []byte(`{"cniVersion":"1.0.0","name":"ceph-public","plugins":[
		{"type":"macvlan"},{"type":"netns-pin","stateDir":"/var/lib/cni/other"}]}`), 0o644))
	c, err := LoadFile(list, map[string]string{"pinDir": "/run/pins"})
	require.NoError(t, err)
	assert.Equal(t, "/var/lib/cni/other", c.StateDir)
	assert.Equal(t, "/run/pins", c.PinDir, "the flag overrides the file")

	c, err = LoadFile("", nil)
	require.NoError(t, err)
	assert.Equal(t, DefaultStateDir, c.StateDir)

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	_, err = LoadFile(fifo, nil)
	require.Error(t, err, "a FIFO opened for reading with no writer would block a plain read")
	assert.Contains(t, err.Error(), fifo)

	big := filepath.Join(dir, "big.conflist")
	require.NoError(t, os.WriteFile(big, []byte(`{"type":"netns-pin","x":"`+strings.Repeat("a", 1<<20)+`"}`), 0o644))
	_, err = LoadFile(big, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), big)

	_, err = LoadFile(filepath.Join(dir, "missing"), nil)
	assert.ErrorIs(t, err, os.ErrNotExist)
}
