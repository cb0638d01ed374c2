package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// TestChainDelRunsOnlyInTheRecordedNetns: the chain's DEL gets as
// CNI_NETNS the pin derived from the attachment, never the record's
// pinPath, and only when that pin is the recorded netns: a pin that is
// another netns (here the host's) runs no plugin.
func TestChainDelRunsOnlyInTheRecordedNetns(t *testing.T) {
	require.Zero(t, os.Geteuid(), "bind-mounts a netns: run as root")
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	ran := filepath.Join(dir, "ran")
	require.NoError(t, os.WriteFile(filepath.Join(bin, "first"), []byte("#!/bin/sh\nenv > "+ran+"\n"), 0o755))
	list := `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"first"},{"type":"netns-pin"}]}`
	entry, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": "c1", "config": []byte(list), "ifName": "net1", "networkName": "n"})
	require.NoError(t, err)
	pin := filepath.Join(dir, netnsstore.PinsSubdir, "c1.net1")
	require.NoError(t, os.MkdirAll(filepath.Dir(pin), 0o755))
	require.NoError(t, os.WriteFile(pin, nil, 0o444))
	require.NoError(t, unix.Mount("/proc/self/ns/net", pin, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(pin, unix.MNT_DETACH) })
	var st unix.Stat_t
	require.NoError(t, unix.Stat(pin, &st))

	r := &netnsstore.Record{Network: "n", Attachment: "c1.net1", ContainerID: "c1", IfName: "net1", PinDir: dir,
		PinPath: "/elsewhere", NetnsDev: st.Dev, NetnsIno: st.Ino + 1, Teardown: &netnsstore.Teardown{CNIPath: bin, Cache: entry}}
	err = runChainDel(r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the chain's DEL is not run")
	assert.NoFileExists(t, ran)

	r.NetnsIno = st.Ino
	require.NoError(t, runChainDel(r))
	env, err := os.ReadFile(ran)
	require.NoError(t, err)
	assert.Contains(t, string(env), "CNI_NETNS="+pin+"\n", "the derived pin, not the record's pinPath")
}

// TestNoOutputCarriesTheTeardownCache: the libcni cache entry a record
// keeps for an abandoned teardown (the chain's configuration, CNI_ARGS,
// capability arguments: pod annotations may be in them) reaches no output:
// list, list --json, inuse, inuse --json, release's refusal. The pod shows
// as its namespace, name and UID.
func TestNoOutputCarriesTheTeardownCache(t *testing.T) {
	s, flags := cliStore(t)
	const secret = "annotation-secret-7f3a"
	path := filepath.Join(s.StateDir, "records", "c1.net1.json")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(data, &rec))
	rec["teardown"] = map[string]any{"netns": "/var/run/netns/x", "cniPath": "/opt/cni/bin", "cacheFile": "/var/lib/cni/results/ceph-public-c1-net1",
		"cache": map[string]any{"kind": "cniCacheV1", "config": "{\"token\":\"" + secret + "\"}",
			"cniArgs": [][2]string{{"K8S_POD_NAMESPACE", "rook-ceph"}, {"K8S_ANNOTATION", secret}}}}
	data, err = json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o600))

	for _, args := range [][]string{{"list"}, {"--json", "list"}, {"inuse", "c1.net1"}, {"--json", "inuse", "c1.net1"}} {
		out, errOut, code := runCLIT(t, append(flags, args...)...)
		assert.Equal(t, 0, code, "%v: %s", args, errOut)
		assert.NotContains(t, out+errOut, secret, "%v", args)
		assert.NotContains(t, out+errOut, "K8S_ANNOTATION", "%v", args)
	}
	out, _, _ := runCLIT(t, append(flags, "--json", "list")...)
	assert.Contains(t, out, `"cacheFile":"/var/lib/cni/results/ceph-public-c1-net1"`, "list --json names the cache file")
	assert.Contains(t, out, `"podName":"csi-holder-a"`)
}

// TestSweeperEndsWithinASecondOfSIGTERM: the sweeper process goes within a
// second of SIGTERM while its round waits for the store's lock (held here,
// as a stuck operation would hold it; it waits up to 30 s), and while it
// waits for the next round.
func TestSweeperEndsWithinASecondOfSIGTERM(t *testing.T) {
	s, flags := cliStore(t)
	bin := buildBinaries(t)
	lock, err := os.OpenFile(filepath.Join(s.StateDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	defer lock.Close()

	for _, held := range []bool{true, false} {
		if held {
			require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX))
		}
		cmd := exec.Command(bin, append(flags, "sweep", "--interval", "1h")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		pid := cmd.Process.Pid
		if held {
			// Blocked on the lock: /proc/locks lists the waiter ("->").
			require.Eventually(t, func() bool {
				data, err := os.ReadFile("/proc/locks")
				return err == nil && regexp.MustCompile(`(?m)-> FLOCK\s+ADVISORY\s+WRITE\s+`+strconv.Itoa(pid)+` `).Match(data)
			}, 10*time.Second, 10*time.Millisecond, "the sweeper's round waits for the lock")
		} else {
			// Between rounds: its status says it finished one.
			require.Eventually(t, func() bool {
				st, err := netnsstore.ReadSweepStatus(s.StateDir)
				return err == nil && st != nil && st.PID == pid && !st.LastRound.IsZero()
			}, 10*time.Second, 10*time.Millisecond, "the sweeper ran its round")
		}
		start := time.Now()
		require.NoError(t, cmd.Process.Signal(unix.SIGTERM))
		err := cmd.Wait()
		took := time.Since(start)
		assert.NoError(t, err, "exit 0 on SIGTERM: %s", stderr.String())
		assert.Less(t, took, time.Second, "lock held: %v; stderr: %s", held, stderr.String())
		t.Logf("lock held %v: gone %v after SIGTERM", held, took.Round(time.Millisecond))
		if held {
			require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_UN))
		}
	}
}

// TestListAndInUseChangeNothing: list and inuse only look. A pin unmounted
// from outside stays unmounted through them, its record byte for byte
// the same, and they show that the next operation settles it; the next
// operation (gc here) does.
func TestListAndInUseChangeNothing(t *testing.T) {
	s, flags := cliStore(t)
	pin := filepath.Join(s.PinDir, "pins", "c1.net1")
	record := filepath.Join(s.StateDir, "records", "c1.net1.json")
	require.NoError(t, unix.Unmount(pin, unix.MNT_DETACH))
	before, err := os.ReadFile(record)
	require.NoError(t, err)
	isMounted := func() bool {
		var st, parent unix.Stat_t
		require.NoError(t, unix.Stat(pin, &st))
		require.NoError(t, unix.Stat(filepath.Dir(pin), &parent))
		return st.Dev != parent.Dev
	}
	require.False(t, isMounted())

	for _, args := range [][]string{{"list"}, {"--json", "list"}, {"inuse", "c1.net1"}, {"--json", "inuse", "rook-ceph/my-cluster"}} {
		out, errOut, code := runCLIT(t, append(flags, args...)...)
		assert.Equal(t, 0, code, "%v: %s", args, errOut)
		assert.Contains(t, out, "settles at the next operation: its pin is no longer a mount of its netns", "%v", args)
		assert.False(t, isMounted(), "%v pinned nothing again", args)
		after, err := os.ReadFile(record)
		require.NoError(t, err)
		assert.Equal(t, string(before), string(after), "%v wrote no record", args)
	}
	_, errOut, code := runCLIT(t, append(flags, "gc")...)
	require.Equal(t, 0, code, errOut)
	assert.True(t, isMounted(), "the next operation pins it again")
	out, _, _ := runCLIT(t, append(flags, "list")...)
	assert.NotContains(t, out, "settles at the next operation")

	// Records of another pinDir: an error, with the hint.
	_, errOut, code = runCLIT(t, "--pin-dir", filepath.Join(t.TempDir(), "p"), "--state-dir", s.StateDir, "list")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "give the --pin-dir of those records")
}

// TestHostExecForwardsSIGTERM: the sweep container's first process is
// host-exec, whose child runs the sweeper in the host's mount namespace;
// SIGTERM to host-exec (what the kubelet sends) ends the child within a
// second, and host-exec with it, exit 0.
func TestHostExecForwardsSIGTERM(t *testing.T) {
	require.Zero(t, os.Geteuid(), "a mount namespace of its own: run as root")
	s, flags := cliStore(t)
	cmd, child, stderr := startHostExecSweeper(t, buildBinaries(t), s.StateDir, flags)
	require.NotEqual(t, cmd.Process.Pid, child, "the sweeper is host-exec's child")
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(unix.SIGTERM))
	require.NoError(t, cmd.Wait(), "exit 0 on SIGTERM: %s", stderr.String())
	assert.Less(t, time.Since(start), time.Second, stderr.String())
	assert.ErrorIs(t, unix.Kill(child, 0), unix.ESRCH, "the sweeper is gone with host-exec")
}

// startHostExecSweeper starts `netns-pinctl host-exec -- sweep` in a mount
// namespace of its own, as the sweep container's first process, and waits
// for the sweeper's first round; it returns host-exec's command, the
// sweeper's pid and host-exec's stderr.
func startHostExecSweeper(t *testing.T, bin, stateDir string, flags []string) (*exec.Cmd, int, *bytes.Buffer) {
	t.Helper()
	if err := os.Remove(filepath.Join(stateDir, "sweeper.json")); !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	// unshare execs host-exec: the pid started is host-exec's.
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", bin, "host-exec", "--"}, append(flags, "sweep", "--interval", "1h")...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	var child int
	require.Eventually(t, func() bool {
		st, err := netnsstore.ReadSweepStatus(stateDir)
		if err != nil || st == nil || st.LastRound.IsZero() {
			return false
		}
		child = st.PID
		return true
	}, 10*time.Second, 10*time.Millisecond, "the sweeper ran its round: %s", &stderr)
	return cmd, child, &stderr
}

// TestHostExecStaysInItsOwnMountNamespace: `kubectl exec` into the sweep
// container joins the mount namespace of the container's first process,
// host-exec, as /proc/<pid>/ns/mnt shows it: the main thread's. The thread
// that enters the host's namespace to start the child must never be the
// main thread, or the exec lands on the host's files, where the image's
// /netns-pinctl does not exist. Several runs: which thread a goroutine
// lands on is the scheduler's choice.
func TestHostExecStaysInItsOwnMountNamespace(t *testing.T) {
	require.Zero(t, os.Geteuid(), "a mount namespace of its own: run as root")
	s, flags := cliStore(t)
	bin := buildBinaries(t)
	hostNS, err := os.Readlink("/proc/self/ns/mnt") // the host's, where unshare starts
	require.NoError(t, err)
	for run := range 10 {
		cmd, child, stderr := startHostExecSweeper(t, bin, s.StateDir, flags)
		own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		require.NoError(t, err)
		childNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", child))
		require.NoError(t, err)
		assert.Equal(t, hostNS, childNS, "run %d: the sweeper runs in the host's mount namespace", run)
		assert.NotEqual(t, hostNS, own, "run %d: host-exec's main thread stays in its container's mount namespace", run)
		require.NoError(t, cmd.Process.Signal(unix.SIGTERM))
		require.NoError(t, cmd.Wait(), "run %d: %s", run, stderr)
	}
}
