package nodecheck

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// TestCheckQuotesWhatItReads: a netNamespaceFilePath carrying terminal
// escapes (a ConfigMap anyone with edit rights on it writes) reaches the
// table quoted, never as the escape itself; so do command names a process
// chose and link paths. (At 3819815 the path was printed as it was.)
func TestCheckQuotesWhatItReads(t *testing.T) {
	dir := t.TempDir()
	evil := "/x\x1b]0;owned\x07\x1b[2J\r\nOK\tfine"
	p := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(p, []byte(`[{"clusterID":"a\u001b[31m","rbd":{"netNamespaceFilePath":"`+strings.NewReplacer("\x1b", `\u001b`, "\x07", `\u0007`, "\r", `\r`, "\n", `\n`, "\t", `\t`).Replace(evil)+`"}}]`), 0o644))
	c := &checker{o: Options{CephCSIConfig: p, PinDir: dir, Proc: "/proc", Now: time.Now}, r: &Report{}}
	c.cephCSI()
	c.r.finish()
	var table bytes.Buffer
	require.NoError(t, c.r.WriteTable(&table))
	out := table.String()
	assert.NotContains(t, out, "\x1b", "no escape reaches the terminal:\n%q", out)
	assert.NotContains(t, out, "\x07")
	assert.NotContains(t, out, "\r")
	assert.Contains(t, out, `"/x\x1b]0;owned\a\x1b[2J\r\nOK\tfine"`, "the path, quoted")
	assert.Equal(t, 5, strings.Count(out, "\n"), "header, one finding, its fix, a blank line, the verdict: no line the path added:\n%s", out)
	assert.Equal(t, `bad\x1b[0m \x00 \xff ok é`, printable("bad\x1b[0m \x00 \xff ok é"))
}

// TestCheckReadsNoSpecialFile: ceph-csi's config and the agent's status
// as a FIFO, /dev/zero or a directory are a finding naming them, at once.
// (At 3819815 both were read with os.ReadFile: a FIFO hung check and
// /dev/zero exhausted its memory.)
func TestCheckReadsNoSpecialFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	state := filepath.Join(dir, "state")
	require.NoError(t, os.MkdirAll(state+"-agent", 0o700))
	status := filepath.Join(state+"-agent", "status.json")
	for _, path := range []string{fifo, "/dev/zero", dir} {
		done := make(chan error, 1)
		go func() { _, err := readCephCSIConfig(path); done <- err }()
		select {
		case err := <-done:
			require.Error(t, err, path)
			assert.Contains(t, err.Error(), path+": not a regular file", path)
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %s as ceph-csi's config blocks", path)
		}
	}
	for kind, mk := range map[string]func() error{
		"a FIFO":      func() error { return unix.Mkfifo(status, 0o600) },
		"a directory": func() error { return os.Mkdir(status, 0o700) },
		"a symlink":   func() error { return os.Symlink("/dev/zero", status) },
	} {
		require.NoError(t, os.RemoveAll(status))
		require.NoError(t, mk())
		c := &checker{o: Options{StateDir: state, Now: time.Now}, r: &Report{}}
		done := make(chan struct{})
		go func() { c.agent(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the agent's status as %s blocks check", kind)
		}
		require.Len(t, c.r.Findings, 1)
		f := c.r.Findings[0]
		assert.Equal(t, Unknown, f.Level, kind)
		assert.Contains(t, f.What, "status.json", kind)
	}
}

// TestCSIContainerByItsCgroup: --csi-container selects the processes whose
// cgroup path has the container's ID, whatever their command name; a
// process that only calls itself cephcsi is not one. (At 3819815 every
// process named cephcsi was taken for the csi plugin.)
func TestCSIContainerByItsCgroup(t *testing.T) {
	proc := t.TempDir()
	const id = "3f5a9c0d1e2b4a6c8d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e"
	for pid, files := range map[string][2]string{
		"100": {"cephcsi", "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + id + ".scope\n"},
		"101": {"sh", "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + id + ".scope\n"},
		"200": {"cephcsi", "0::/kubepods.slice/kubepods-besteffort.slice/cri-containerd-aaaa" + id[4:] + ".scope\n"},
	} {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "comm"), []byte(files[0]+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(files[1]), 0o644))
	}
	c := &checker{o: Options{Proc: proc, CSIContainers: []string{id[:13]}}, r: &Report{}}
	pids, how, err := c.csiProcesses()
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{100, 101}, pids)
	assert.Contains(t, how, id[:13])

	c = &checker{o: Options{Proc: proc}, r: &Report{}}
	pids, how, err = c.csiProcesses()
	require.NoError(t, err)
	assert.Empty(t, pids, "nothing named, nothing taken: no process is chosen by its name")
	assert.Equal(t, "none named", how)
}

// TestCSIProbeIsBounded: a look into the csi container's mount namespace
// that never answers (a FUSE mount whose server is stopped) is an error
// after the bound, not a hung check. (At 3819815 check statfs'ed there
// without a bound.)
func TestCSIProbeIsBounded(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	saved := nsfsIDInside
	nsfsIDInside = func(string) (netnsstore.NetnsID, error) { <-block; return netnsstore.NetnsID{}, nil }
	defer func() { nsfsIDInside = saved }()
	start := time.Now()
	_, err := nsfsIDWithin("/proc/1/root/x", 200*time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no answer within 200ms")
	assert.Less(t, time.Since(start), 5*time.Second)
}
