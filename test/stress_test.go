package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// 64 plugin processes at once doing ADD, CHECK and DEL across 8 clusters and
// 64 network namespaces, while a watcher checks that every link always
// leads to a mounted nsfs pin. Expected errors are the in-use refusals of
// holders whose netns a process keeps; anything else fails the test.
func TestStress64ProcessesAcross8Clusters(t *testing.T) {
	const procs, clusters = 64, 8
	var holders []map[string]any
	for i := range clusters {
		holders = append(holders, map[string]any{"podNamespace": fmt.Sprintf("ceph-%d", i), "podName": "holder-*", "cluster": "{{.PodNamespace}}/ceph"})
	}
	c := newChain(t, chainSpec{holders: holders})
	bin := filepath.Join(c.env.cniPath, "netns-pin")

	nets := make([]*hosttest.NetnsHandle, procs)
	for i := range nets {
		nets[i] = hosttest.NewNetns(t, "npe2e")
	}
	// Every 8th holder has a client process in its netns: its DEL is refused.
	busy := map[int]*exec.Cmd{}
	for i := 0; i < procs; i += 8 {
		busy[i] = hosttest.StartInNetns(t, nets[i].Path, "sleep", "600")
	}

	run := func(i int, verb string) (types.Error, error) {
		entry := map[string]any{"name": c.name, "cniVersion": "1.0.0", "prevResult": fakePrevResult(t, nets[i].Path)}
		for k, v := range c.pinEntry {
			entry[k] = v
		}
		stdin, err := json.Marshal(entry)
		if err != nil {
			return types.Error{}, err
		}
		cmd := exec.Command(bin)
		cmd.Env = []string{"CNI_COMMAND=" + verb, fmt.Sprintf("CNI_CONTAINERID=stress-%02d", i), "CNI_NETNS=" + nets[i].Path,
			"CNI_IFNAME=" + ifName, "CNI_PATH=" + c.env.cniPath,
			fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=ceph-%d;K8S_POD_NAME=holder-%02d", i%clusters, i)}
		cmd.Stdin = bytes.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout = &out
		err = cmd.Run()
		var cniErr types.Error
		if err != nil {
			if jerr := json.Unmarshal(out.Bytes(), &cniErr); jerr != nil {
				return cniErr, fmt.Errorf("%s #%d: %v, stdout %q", verb, i, err, out.String())
			}
		}
		return cniErr, nil
	}

	links := make([]string, clusters)
	for i := range links {
		links[i] = c.linkPath(fmt.Sprintf("ceph-%d", i), "ceph")
	}
	stop := make(chan struct{})
	var checks, violations atomic.Int64
	var violation atomic.Value
	watcher := sync.WaitGroup{}
	// The watcher samples the store between operations: it takes the
	// plugin's own lock, so what it sees is what any operation leaves. (A
	// reader racing a release can still walk an old link into a pin being
	// unmounted: symlink resolution is not atomic.)
	require.NoError(t, os.MkdirAll(c.stateDir, 0o700))
	lockFd, err := unix.Open(filepath.Join(c.stateDir, "lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(lockFd) })
	watcher.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Flock(lockFd, unix.LOCK_EX); err != nil {
				violation.Store(err.Error())
				violations.Add(1)
				return
			}
			for _, l := range links {
				var sfs unix.Statfs_t
				err := unix.Statfs(l, &sfs)
				checks.Add(1)
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				if err != nil || sfs.Type != unix.NSFS_MAGIC {
					target, lerr := os.Readlink(l)
					violations.Add(1)
					violation.Store(fmt.Sprintf("%s -> %s (readlink: %v): err=%v fstype=%#x; records %v", l, target, lerr, err, sfs.Type, recordStates(c.stateDir)))
				}
			}
			_ = unix.Flock(lockFd, unix.LOCK_UN)
		}
	})

	var wg sync.WaitGroup
	unexpected := make(chan error, procs*4)
	for i := range procs {
		wg.Go(func() {
			for _, verb := range []string{"ADD", "CHECK", "DEL", "ADD", "CHECK", "DEL"} {
				cniErr, err := run(i, verb)
				switch {
				case err != nil:
					unexpected <- err
					return
				case cniErr.Code == 0:
				case verb == "DEL" && cniErr.Code == types.ErrTryAgainLater && busy[i] != nil:
					// expected: a process uses this netns
				default:
					unexpected <- fmt.Errorf("%s #%d: code %d: %s", verb, i, cniErr.Code, cniErr.Msg)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	watcher.Wait()
	close(unexpected)
	for err := range unexpected {
		t.Error(err)
	}
	assert.Zero(t, violations.Load(), "a link led somewhere other than a mounted pin, e.g. %v", violation.Load())
	t.Logf("%d link checks during the run", checks.Load())

	// Only the busy holders remain, each whole; every record is valid JSON.
	recs := treeEntries(t, filepath.Join(c.stateDir, "records"))
	assert.Len(t, recs, len(busy), "records of busy holders only: %v", recs)
	for i := range busy {
		rec := readRecord(t, filepath.Join(c.stateDir, "records", fmt.Sprintf("stress-%02d.%s.json", i, ifName)))
		assert.Equal(t, "draining", rec.str("state"))
		assert.Equal(t, fmt.Sprintf("ceph-%d/ceph", i%clusters), rec.str("cluster"))
		assert.True(t, strings.Contains(rec.str("pinPath"), fmt.Sprintf("stress-%02d", i)))
		var sfs unix.Statfs_t
		require.NoError(t, unix.Statfs(links[i%clusters], &sfs))
		assert.EqualValues(t, unix.NSFS_MAGIC, sfs.Type)
	}
	for i, cmd := range busy {
		require.NoError(t, host.Stop(cmd))
		_, err := run(i, "DEL")
		require.NoError(t, err)
	}
	assert.Empty(t, treeEntries(t, filepath.Join(c.stateDir, "records")))
	assert.Empty(t, treeEntries(t, filepath.Join(c.pinDir, "pins")))
	for _, l := range links {
		assertNoLink(t, l)
	}
}

// recordStates lists the records and their states, for a failure message;
// what cannot be read is listed with its error.
func recordStates(stateDir string) []string {
	recs, err := os.ReadDir(filepath.Join(stateDir, "records"))
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, r := range recs {
		var m map[string]any
		data, err := os.ReadFile(filepath.Join(stateDir, "records", r.Name()))
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", r.Name(), err))
			continue
		}
		out = append(out, fmt.Sprintf("%s=%v", r.Name(), m["state"]))
	}
	return out
}
