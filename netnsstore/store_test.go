package netnsstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

func pinReq(s *Store, id, cluster, netnsPath string) Record {
	return Record{
		ContainerID: id, IfName: "net1", Network: "ceph-public", Cluster: cluster,
		PodNS: "rook-ceph", PodName: "holder-" + id, PodUID: "uid-" + id, NetnsPath: netnsPath,
		Links: []string{filepath.Join(s.PinDir, cluster+".net")},
	}
}

func statID(t *testing.T, path string) NetnsID {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return NetnsID{Dev: st.Dev, Ino: st.Ino}
}

func readLink(t *testing.T, p string) string {
	t.Helper()
	got, err := os.Readlink(p)
	require.NoError(t, err)
	return got
}

func TestPinKeepsNetnsAfterOriginalIsGone(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.0.5/24")
	orig := statID(t, n.Path)

	r, err := s.Pin(pinReq(s, "c1", "rook-ceph/my-cluster", n.Path))
	require.NoError(t, err)
	pin := filepath.Join(s.PinDir, "pins", "c1.net1")
	link := filepath.Join(s.PinDir, "rook-ceph/my-cluster.net")
	assert.Equal(t, pin, r.PinPath)
	assert.True(t, mountedAt(t, pin), "pin is a mount")
	assert.Equal(t, orig, statID(t, pin), "pin is the same netns (dev, inode)")
	assert.Equal(t, "../pins/c1.net1", readLink(t, link), "link is relative")
	assert.Equal(t, orig, statID(t, link), "link resolves to the netns")
	assert.Equal(t, StateActive, r.State)
	assert.Equal(t, []string{"10.98.0.5"}, r.IPs)

	// What the pin is for: the original name goes, the netns with its
	// interface and address stays.
	n.Delete(t)
	f, id, err := openNetns(link)
	require.NoError(t, err)
	addrs, err := nsinfo.GlobalAddrs(int(f.Fd()))
	f.Close()
	require.NoError(t, err)
	assert.Equal(t, orig, id)
	assert.Equal(t, "10.98.0.5", addrs[0].String())

	_, err = s.Release("c1.net1", nil)
	require.NoError(t, err)
	assert.NoFileExists(t, pin)
	_, err = os.Lstat(link)
	assert.True(t, os.IsNotExist(err), "link removed with the cluster's last pin")
	assert.Zero(t, nsfsMounts(t, orig.Ino), "no mount of the netns remains: it is gone")
	rec, err := s.Get("c1.net1")
	require.NoError(t, err)
	assert.Nil(t, rec)
}

func TestPinAndReleaseAreIdempotent(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.1.5/24")
	r1, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	r2, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	assert.Equal(t, r1.Created, r2.Created, "second ADD changes nothing")
	assert.Equal(t, 1, nsfsMounts(t, r1.NetnsIno)-1, "one pin mount besides the original")

	other := testNetns(t, "")
	_, err = s.Pin(pinReq(s, "c1", "ns/cl", other.Path))
	assert.ErrorContains(t, err, "is pinned to", "same attachment, another netns")

	for i := 0; i < 2; i++ {
		_, err = s.Release("c1.net1", nil)
		require.NoError(t, err)
	}
	_, err = s.Release("never-pinned.net1", nil)
	require.NoError(t, err)
}

func TestReleaseRefusedWhileInUse(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.2.5/24")
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	refs := []string{"rbd0 pool/img client4161 10.98.2.5"}
	var seen *Record
	s.inUse = func(r *Record, _ string) ([]Use, error) { seen = r; return uses(refs...), nil }
	_, err = s.Release("c1.net1", nil)
	var iu *InUseError
	require.ErrorAs(t, err, &iu)
	assert.ErrorIs(t, err, errInUse)
	assert.Equal(t, refs, iu.References)
	assert.Equal(t, []string{"10.98.2.5"}, seen.IPs)
	r, err := s.Get("c1.net1")
	require.NoError(t, err)
	assert.Equal(t, StateDraining, r.State)
	assert.Equal(t, refs, r.References)
	assert.True(t, mountedAt(t, r.PinPath), "pin stays while in use")
	assert.Equal(t, "../pins/c1.net1", readLink(t, r.Links[0]), "a draining pin with no successor keeps the link")

	s.inUse = func(*Record, string) ([]Use, error) { return nil, errors.New("boom") }
	_, err = s.Release("c1.net1", nil)
	assert.ErrorIs(t, err, errCheckFailed, "a failing check never releases")
	assert.ErrorContains(t, err, "boom", "and says why")
	assert.True(t, mountedAt(t, r.PinPath))

	s.inUse = notInUse
	_, err = s.Release("c1.net1", nil)
	require.NoError(t, err)
	assert.NoFileExists(t, r.PinPath)
}

func TestLinksFollowNewestActivePin(t *testing.T) {
	s := testStore(t)
	a, b := testNetns(t, "10.98.3.5/24"), testNetns(t, "10.98.3.6/24")
	other := testNetns(t, "10.98.4.5/24")
	_, err := s.Pin(pinReq(s, "a", "ns/cl", a.Path))
	require.NoError(t, err)
	_, err = s.Pin(pinReq(s, "x", "ns/other", other.Path))
	require.NoError(t, err)
	link := filepath.Join(s.PinDir, "ns/cl.net")
	otherLink := filepath.Join(s.PinDir, "ns/other.net")
	assert.Equal(t, "../pins/a.net1", readLink(t, link))
	_, err = s.Pin(pinReq(s, "b", "ns/cl", b.Path))
	require.NoError(t, err)
	assert.Equal(t, "../pins/b.net1", readLink(t, link), "the new holder takes the link")
	require.NoError(t, s.Check("a.net1", a.Path))
	require.NoError(t, s.Check("b.net1", b.Path))

	s.inUse = func(*Record, string) ([]Use, error) { return uses("process 1 (x)"), nil }
	_, err = s.Release("a.net1", nil)
	require.ErrorIs(t, err, errInUse)
	assert.Equal(t, "../pins/b.net1", readLink(t, link), "draining A does not take the link from active B")
	_, err = s.Release("b.net1", nil)
	require.ErrorIs(t, err, errInUse)
	assert.Equal(t, "../pins/b.net1", readLink(t, link), "both draining: newest draining")
	s.inUse = notInUse
	_, err = s.Release("b.net1", nil)
	require.NoError(t, err)
	assert.Equal(t, "../pins/a.net1", readLink(t, link), "released B: link falls back to draining A")
	assert.Equal(t, "../pins/x.net1", readLink(t, otherLink), "other cluster untouched")
	_, err = s.Release("a.net1", nil)
	require.NoError(t, err)
	_, err = os.Lstat(link)
	assert.True(t, os.IsNotExist(err))
	assert.Equal(t, "../pins/x.net1", readLink(t, otherLink))
}

func TestCheckFindsWhatIsWrong(t *testing.T) {
	s := testStore(t)
	n, other := testNetns(t, "10.98.5.5/24"), testNetns(t, "")
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	require.NoError(t, s.Check("c1.net1", n.Path))
	assert.ErrorContains(t, s.Check("c1.net1", other.Path), "CNI_NETNS")
	assert.ErrorContains(t, s.Check("c9.net1", n.Path), "no record")
	link := filepath.Join(s.PinDir, "ns/cl.net")
	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink("../pins/elsewhere", link))
	assert.ErrorContains(t, s.Check("c1.net1", n.Path), "points at")
	require.NoError(t, unix.Unmount(filepath.Join(s.PinDir, "pins/c1.net1"), unix.MNT_DETACH))
	assert.ErrorContains(t, s.Check("c1.net1", n.Path), "not mounted")
}

func TestOpenNetnsRefusesWhatIsNoNetns(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	for path, want := range map[string]string{
		file:                          "not a network namespace",
		dir:                           "not a network namespace",
		fifo:                          "not a network namespace",
		"/proc/self/ns/mnt":           "a mount namespace",
		"/proc/self/ns/pid":           "a pid namespace",
		"/proc/self/ns/user":          "a user namespace",
		"/proc/self/ns/net":           "host",
		filepath.Join(dir, "missing"): "no such file",
	} {
		f, _, err := openNetns(path)
		assert.ErrorContains(t, err, want, path)
		assert.Nil(t, f)
	}
}

func TestOpenRefusesUntrustedDirs(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	real := filepath.Join(root, "real")
	require.NoError(t, os.Mkdir(real, 0o755))
	sym := filepath.Join(root, "sym")
	require.NoError(t, os.Symlink(real, sym))
	open := filepath.Join(root, "open")
	require.NoError(t, os.Mkdir(open, 0o777))
	require.NoError(t, os.Chmod(open, 0o777))
	group := filepath.Join(root, "group")
	require.NoError(t, os.Mkdir(group, 0o775))
	require.NoError(t, os.Chmod(group, 0o775))
	owned := filepath.Join(root, "owned")
	require.NoError(t, os.Mkdir(owned, 0o755))
	require.NoError(t, os.Chown(owned, 1000, 1000))
	for dir, want := range map[string]string{sym: "symlink", open: "group or others", group: "group or others", owned: "uid 1000"} {
		_, err := Open(dir, filepath.Join(root, "state-ok"), Options{})
		assert.ErrorContains(t, err, want, "pinDir %s", dir)
		_, err = Open(filepath.Join(root, "pin-ok"), dir, Options{})
		assert.ErrorContains(t, err, want, "stateDir %s", dir)
	}
}

func TestPlantedSymlinksAreNeverFollowed(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.6.5/24")
	victim := t.TempDir()
	// A symlink where the link's directory will be: the link must not be
	// written through it.
	require.NoError(t, os.Symlink(victim, filepath.Join(s.PinDir, "ns")))
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.Error(t, err)
	assert.NoFileExists(t, filepath.Join(victim, "cl.net"))
	entries, err := os.ReadDir(filepath.Join(s.PinDir, "pins"))
	require.NoError(t, err)
	assert.Empty(t, entries, "failed ADD leaves no pin")
	rs, err := s.List()
	require.NoError(t, err)
	assert.Empty(t, rs, "failed ADD leaves no record")

	// A symlink planted as the record file is replaced, not followed.
	require.NoError(t, os.Remove(filepath.Join(s.PinDir, "ns")))
	target := filepath.Join(victim, "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o600))
	require.NoError(t, os.Symlink(target, filepath.Join(s.StateDir, "records", ".tmp-c1.net1.json")))
	_, err = s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	data, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(data))
}

func TestRepairRemovesAPinWithoutRecord(t *testing.T) {
	s := testStore(t)
	n1 := testNetns(t, "10.98.7.5/24")
	r1, err := s.Pin(pinReq(s, "c1", "ns/cl", n1.Path))
	require.NoError(t, err)
	// A pin file without any record, as if ADD died before its record.
	require.NoError(t, os.WriteFile(filepath.Join(s.PinDir, "pins", "orphan.net1"), nil, 0o444))

	rs, err := s.List() // any operation repairs
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, "c1.net1", rs[0].Attachment)
	assert.NoFileExists(t, filepath.Join(s.PinDir, "pins", "orphan.net1"))
	assert.Equal(t, "../pins/c1.net1", readLink(t, r1.Links[0]))
}

// A record of a format or in a state that no release writes (a
// development build's "intent" or "releasing", a format 1 record) is not
// guessed at: unreadable, it keeps its pin and stops every release, as a
// torn record does, until it is put right.
func TestRecordOfNoReleaseIsUnreadable(t *testing.T) {
	for name, edit := range map[string]func(r *Record){
		"intent":    func(r *Record) { r.State = "intent" },
		"releasing": func(r *Record) { r.State = "releasing" },
		"format 1":  func(r *Record) { r.Format, r.Writer = 0, "" },
		"hostile":   func(r *Record) { r.State = strings.Repeat("\x1b[2J\n", 1000) },
	} {
		t.Run(name, func(t *testing.T) {
			s := testStore(t)
			n1, n2 := testNetns(t, "10.98.7.9/24"), testNetns(t, "10.98.7.10/24")
			r1, err := s.Pin(pinReq(s, "c1", "ns/cl", n1.Path))
			require.NoError(t, err)
			r2, err := s.Pin(pinReq(s, "c2", "ns/cl", n2.Path))
			require.NoError(t, err)
			edit(r1)
			writeRaw(t, s, r1)
			_, err = s.Release("c2.net1", nil)
			require.Error(t, err, "no release while a record cannot be read")
			assert.Contains(t, err.Error(), "which no release of netns-pin writes")
			assert.NotContains(t, err.Error(), "\n", "a state from disk is quoted")
			assert.Less(t, len(err.Error()), 600, "and bounded")
			assert.True(t, mountedAt(t, r1.PinPath))
			assert.True(t, mountedAt(t, r2.PinPath))
		})
	}
}

// pinnedBeforeReboot pins attachment c1.net1 in a netns with addr, then
// plays a reboot: the pin's mount is gone and the record, changed by edit,
// says another boot.
func pinnedBeforeReboot(t *testing.T, s *Store, addr string, edit func(*Record)) *Record {
	t.Helper()
	n := testNetns(t, addr)
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	require.NoError(t, unix.Unmount(r.PinPath, unix.MNT_DETACH))
	r.BootID = "00000000-0000-0000-0000-000000000000"
	if edit != nil {
		edit(r)
	}
	writeRaw(t, s, r)
	return r
}

func TestRepairAfterReboot(t *testing.T) {
	s := testStore(t)
	r := pinnedBeforeReboot(t, s, "10.98.8.5/24", nil)
	_, err := s.Release("unrelated.net1", nil)
	require.NoError(t, err)
	assert.NoFileExists(t, r.PinPath)
	_, err = os.Lstat(r.Links[0])
	assert.True(t, os.IsNotExist(err), "dangling link removed")
	got, err := s.Get("c1.net1")
	require.NoError(t, err)
	assert.Nil(t, got)
}

// Hole: a record whose boot id is not this boot's (edited by hand, restored
// from a backup, written with a broken boot id) was dropped without the
// in-use check although its pin was still mounted. A mount does not outlive
// a boot: a pin that still holds the recorded netns is of this boot, and
// the record is corrected instead.
func TestRecordOfAnotherBootWithALivePinIsKept(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.20.5/24")
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	r.BootID = "00000000-0000-0000-0000-000000000000"
	writeRaw(t, s, r)

	findings, err := s.Sweep(true)
	require.NoError(t, err)
	for _, f := range findings {
		assert.NotEqual(t, ActionDrop, f.Action, "the dry run drops nothing: %+v", f)
	}
	s.inUse = func(*Record, string) ([]Use, error) { return uses("rbd0 pool/img client4161 10.98.20.5"), nil }
	_, err = s.Release("unrelated.net1", nil)
	require.NoError(t, err)
	assert.True(t, mountedAt(t, r.PinPath), "the pin stays")
	got, err := s.Get("c1.net1")
	require.NoError(t, err)
	require.NotNil(t, got)
	assert.Equal(t, s.bootID, got.BootID, "the record says this boot again")
	require.NoError(t, s.Check("c1.net1", n.Path))

	_, err = s.Release("c1.net1", nil)
	var iu *InUseError
	require.ErrorAs(t, err, &iu, "released only through the in-use check")
	assert.True(t, mountedAt(t, r.PinPath))
}

// An abandoned record of an earlier boot whose chain teardown keeps
// failing is dropped all the same: a record of an earlier boot never
// outlives the repair of the next boot.
func TestRepairAfterRebootDropsAnAbandonedRecordWhoseTeardownFails(t *testing.T) {
	s := testStore(t)
	pinnedBeforeReboot(t, s, "10.98.18.5/24", func(r *Record) { r.Abandoned, r.State = true, StateDraining })
	teardowns := 0
	s.teardown = func(*Record) error { teardowns++; return errors.New("plugin macvlan not found in CNI_PATH") }

	_, err := s.Release("unrelated.net1", nil)
	require.NoError(t, err)
	assert.Equal(t, 1, teardowns, "the teardown was tried")
	got, err := s.Get("c1.net1")
	require.NoError(t, err)
	assert.Nil(t, got, "the record of an earlier boot is gone")
}

// Hole: after a reboot, the plugin (which cannot run the chain) dropped an
// abandoned record as any record of an earlier boot, and the chain's DEL
// that frees its IPAM lease never ran when a pod's ADD or GC came before
// the sweeper. The plugin now hands such a record over: off the records
// (no pin, no link, nothing a link rule or an in-use check sees), in
// teardowns/, where netns-pinctl's next repair runs the chain's DEL once,
// failing or not, and removes it.
func TestPluginHandsAnAbandonedTeardownOfAnEarlierBootToNetnsPinctl(t *testing.T) {
	s := testStore(t)
	r := pinnedBeforeReboot(t, s, "10.98.21.5/24", func(r *Record) {
		r.Abandoned, r.State = true, StateDraining
		r.Teardown = &Teardown{CNIPath: "/opt/cni/bin", CacheFile: "/var/lib/cni/results/ceph-public-c1-net1", Cache: json.RawMessage(`{"kind":"cniCacheV1"}`)}
	})
	handedOver := filepath.Join(s.StateDir, TeardownsSubdir, "c1.net1.json")

	_, err := s.Release("unrelated.net1", nil)
	require.NoError(t, err)
	got, err := s.Get("c1.net1")
	require.NoError(t, err)
	assert.Nil(t, got, "no longer a record")
	assert.NoFileExists(t, r.PinPath)
	_, err = os.Lstat(r.Links[0])
	assert.True(t, os.IsNotExist(err), "its link is gone")
	data, err := os.ReadFile(handedOver)
	require.NoError(t, err, "handed over to netns-pinctl")
	var kept Record
	require.NoError(t, json.Unmarshal(data, &kept))
	assert.Equal(t, r.Teardown.Cache, kept.Teardown.Cache, "with the captured chain")
	// another operation of the plugin leaves it
	_, err = s.Release("unrelated.net1", nil)
	require.NoError(t, err)
	assert.FileExists(t, handedOver)

	var ran []string
	ctl, err := Open(s.PinDir, s.StateDir, Options{InUse: notInUse, RegistryDir: filepath.Join(filepath.Dir(s.PinDir), "stores"),
		Teardown: func(r *Record) error {
			ran = append(ran, r.Attachment)
			return errors.New("plugin macvlan not found in CNI_PATH")
		}})
	require.NoError(t, err)
	t.Cleanup(ctl.Close)
	_, err = ctl.Release("unrelated.net1", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"c1.net1"}, ran, "netns-pinctl ran the chain's DEL")
	assert.NoFileExists(t, handedOver, "and removed it, failing DEL or not")
	_, err = ctl.Release("unrelated.net1", nil)
	require.NoError(t, err)
	assert.Len(t, ran, 1, "once")
}

func TestConcurrentPinsAndReleases(t *testing.T) {
	s := testStore(t)
	const n = 12
	nets := make([]string, n)
	for i := range nets {
		nets[i] = testNetns(t, "").Path
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// Each goroutine opens its own store, as separate processes do.
			st, err := Open(s.PinDir, s.StateDir, Options{InUse: notInUse})
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			id := "c" + string(rune('a'+i))
			cluster := "ns/cl" + string(rune('a'+i%3))
			if _, err := st.Pin(pinReq(st, id, cluster, nets[i])); err != nil {
				errs <- err
				return
			}
			if i%2 == 0 {
				_, err = st.Release(id+".net1", nil)
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	rs, err := s.List()
	require.NoError(t, err)
	assert.Len(t, rs, n/2)
	for _, r := range rs {
		require.NoError(t, s.Check(r.Attachment, ""))
	}
}

func TestAttachmentName(t *testing.T) {
	_, err := AttachmentName("abc", "net1")
	require.NoError(t, err)
	long := make([]byte, 250)
	for i := range long {
		long[i] = 'a'
	}
	_, err = AttachmentName(string(long), "net1")
	assert.ErrorContains(t, err, "over")
}

// writeRaw overwrites a record as a crashed process would have left it.
func writeRaw(t *testing.T, s *Store, r *Record) {
	t.Helper()
	data, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(s.StateDir, "records", r.Attachment+".json"), data, 0o600))
}

func TestLockTimesOutBehindAStuckHolder(t *testing.T) {
	s := testStore(t)
	// Another process holds the lock and never lets go (as one stuck in
	// uninterruptible sleep would).
	// flock -o: only flock(1) itself holds the lock, not its sleep child;
	// its own process group, so cleanup stops both.
	holder := exec.Command("flock", "-o", filepath.Join(s.StateDir, "lock"), "sleep", "600")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, holder.Start())
	stopHolder := func() error {
		if holder.ProcessState != nil {
			return nil
		}
		if err := syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); err != nil {
			return err
		}
		var exit *exec.ExitError
		if err := holder.Wait(); !errors.As(err, &exit) { // killed: an exit status
			return fmt.Errorf("flock(1) was not killed: %v", err)
		}
		return nil
	}
	t.Cleanup(func() { assert.NoError(t, stopHolder()) })
	require.Eventually(t, func() bool {
		fd, err := unix.Open(filepath.Join(s.StateDir, "lock"), unix.O_RDONLY, 0)
		if err != nil {
			return false
		}
		defer unix.Close(fd)
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = unix.Flock(fd, unix.LOCK_UN)
			return false
		}
		return true
	}, 10*time.Second, time.Millisecond, "flock(1) holds the lock")

	s.lockTimeout = 200 * time.Millisecond
	n := testNetns(t, "")
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.ErrorIs(t, err, ErrLockTimeout)
	_, err = s.Release("c1.net1", nil)
	require.ErrorIs(t, err, ErrLockTimeout)

	// Once the holder goes, the store works again: an abandoned wait does
	// not keep the lock.
	require.NoError(t, stopHolder())
	s.lockTimeout = 5 * time.Second
	_, err = s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	_, err = s.Release("c1.net1", nil)
	require.NoError(t, err)
}

// Hole: the in-use check ran while the pin was still published, so a
// client entering through the link during the check (nsenter --net=<link>
// rbd map) landed in a netns about to be released. The check that counts
// runs after the links moved: then they lead to the cluster's other pin,
// or nowhere. The check before it runs with the links in place (links
// never flicker), and only a pin it finds unused has its links moved.
func TestCheckRunsAfterTheLinksMovedOff(t *testing.T) {
	s := testStore(t)
	a, b := testNetns(t, "10.98.13.5/24"), testNetns(t, "10.98.13.6/24")
	ra, err := s.Pin(pinReq(s, "a", "ns/cl", a.Path))
	require.NoError(t, err)
	_, err = s.Pin(pinReq(s, "b", "ns/cl", b.Path))
	require.NoError(t, err)
	link := ra.Links[0]
	require.Equal(t, "../pins/b.net1", readLink(t, link))

	var during []string
	s.inUse = func(r *Record, _ string) ([]Use, error) {
		target, err := os.Readlink(link)
		if err != nil {
			target = "(none)"
		}
		during = append(during, r.Attachment+" -> "+target)
		return nil, nil
	}
	_, err = s.Release("b.net1", nil)
	require.NoError(t, err)
	_, err = s.Release("a.net1", nil)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"b.net1 -> ../pins/b.net1", "b.net1 -> ../pins/a.net1",
		"a.net1 -> ../pins/a.net1", "a.net1 -> (none)",
	}, during)
}

// Links never flicker: a release of a pin that is in use when it starts
// never moves the links, not even for the length of the check: neither
// when it is the cluster's only pin, nor when it is the newest of two
// draining pins.
func TestReleaseOfAPinInUseNeverMovesItsLinks(t *testing.T) {
	s := testStore(t)
	a, b := testNetns(t, "10.98.14.5/24"), testNetns(t, "10.98.14.6/24")
	ra, err := s.Pin(pinReq(s, "a", "ns/cl", a.Path))
	require.NoError(t, err)
	link := ra.Links[0]
	var during []string
	checks := 0
	s.inUse = func(r *Record, _ string) ([]Use, error) {
		checks++
		target, err := os.Readlink(link)
		if err != nil {
			target = "(none)"
		}
		during = append(during, r.Attachment+" -> "+target)
		return uses("rbd device 0"), nil
	}
	for range 3 {
		_, err = s.Release("a.net1", nil)
		require.ErrorIs(t, err, errInUse)
	}
	assert.Equal(t, []string{"a.net1 -> ../pins/a.net1", "a.net1 -> ../pins/a.net1", "a.net1 -> ../pins/a.net1"}, during,
		"the only pin, draining and in use: one check each time, with its link in place")

	// A second draining pin, newer: it is the link target now; its
	// release, refused, keeps the link on it.
	s.inUse = notInUse
	_, err = s.Pin(pinReq(s, "b", "ns/cl", b.Path))
	require.NoError(t, err)
	s.inUse = func(r *Record, p string) ([]Use, error) {
		during = append(during[:0], r.Attachment+" -> "+readLink(t, link))
		return uses("process 7 (ceph-fuse)"), nil
	}
	_, err = s.Release("b.net1", nil)
	require.ErrorIs(t, err, errInUse)
	assert.Equal(t, []string{"b.net1 -> ../pins/b.net1"}, during)
	assert.Equal(t, "../pins/b.net1", readLink(t, link), "the newest draining pin keeps the link")
	assert.Equal(t, 3, checks)
}

// A pin whose record was removed by hand is an orphan: repair releases it
// only when the in-use check, run on the netns it holds with the addresses
// it has now, finds nothing.
func TestOrphanPinIsCheckedBeforeRelease(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.15.5/24")
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(s.StateDir, "records", "c1.net1.json")))

	var seen *Record
	s.inUse = func(o *Record, _ string) ([]Use, error) { seen = o; return uses("process 9 (ceph-fuse)"), nil }
	_, err = s.List()
	require.NoError(t, err)
	require.NotNil(t, seen, "the orphan was checked")
	assert.Equal(t, []string{"10.98.15.5"}, seen.IPs, "with the addresses its netns has now")
	assert.Equal(t, r.NetnsID(), seen.NetnsID())
	assert.Equal(t, 2, nsfsMounts(t, r.NetnsIno), "in use: the orphan pin stays mounted")

	s.inUse = notInUse
	_, err = s.List()
	require.NoError(t, err)
	assert.Equal(t, 1, nsfsMounts(t, r.NetnsIno), "unused: only the netns's own mount remains")
	assert.NoFileExists(t, r.PinPath)
}

// A release that cannot list the netns's addresses now cannot see a client
// on an address added since ADD: it counts as a failed check and keeps
// the pin, draining.
func TestReleaseKeepsWhenAddressesCannotBeListed(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.17.5/24")
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	addrsOf = func(int) ([]netip.Addr, error) { return nil, errors.New("netlink: no buffer space") }
	t.Cleanup(func() { addrsOf = nsinfo.GlobalAddrs })

	_, err = s.Release("c1.net1", nil)
	require.ErrorIs(t, err, errCheckFailed)
	assert.Contains(t, err.Error(), "no buffer space")
	assert.Equal(t, 2, nsfsMounts(t, r.NetnsIno), "the pin stays")
	got, err := s.Get("c1.net1")
	require.NoError(t, err)
	assert.Equal(t, StateDraining, got.State)
}

// repair settles an unpinned record; the operator's GC that follows in the
// same hold of the lock reports it as repair left it instead of running the
// in-use check, which may take seconds, a second time.
func TestSweepChecksARecordOnceAHold(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.19.5/24")
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	require.NoError(t, unix.Unmount(r.PinPath, unix.MNT_DETACH))
	r.State = StateUnpinned
	writeRaw(t, s, r)
	checks := 0
	s.inUse = func(*Record, string) ([]Use, error) { checks++; return uses("rbd 0"), nil }

	findings, err := s.Sweep(false)
	require.NoError(t, err)
	assert.Equal(t, 1, checks)
	require.Len(t, findings, 1)
	assert.Equal(t, ActionKeep, findings[0].Action)
	assert.Equal(t, []string{"rbd 0"}, findings[0].References)
}

// The debug log times each step of an operation, in the order they ran,
// so that a slow ADD or DEL shows what it waited for.
func TestDebugLogTimesTheSteps(t *testing.T) {
	s := testStore(t)
	var buf bytes.Buffer
	s.log = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n := testNetns(t, "10.98.9.5/24")
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	_, err = s.Release("c1.net1", nil)
	require.NoError(t, err)
	var got [][]string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !strings.Contains(line, `"msg":"steps (µs)"`) {
			continue
		}
		// The keys after msg, in the order the handler wrote them.
		dec := json.NewDecoder(strings.NewReader(line))
		_, err := dec.Token()
		require.NoError(t, err)
		var names []string
		for afterMsg := false; dec.More(); {
			key, err := dec.Token()
			require.NoError(t, err)
			var val any
			require.NoError(t, dec.Decode(&val))
			if afterMsg {
				us, isNum := val.(float64)
				require.True(t, isNum && us >= 0, "%s: %v", key, val)
				names = append(names, key.(string))
			}
			afterMsg = afterMsg || key == "msg"
		}
		got = append(got, names)
	}
	assert.Equal(t, [][]string{
		{"lock", "read records", "repair", "addresses", "record", "mount", "links", "work"},
		{"lock", "read records", "repair", "addresses", "in-use check, links in place", "links", "in-use check", "work"},
	}, got, "ADD, then DEL")
}

// A step that runs again in one operation adds to its first entry.
func TestStepsAddUpARepeatedStep(t *testing.T) {
	var s steps
	s.start()
	s.mark("links")
	s.mark("addresses")
	s.last = s.last.Add(-3 * time.Millisecond) // the second links step took 3 ms
	s.mark("links")
	require.Len(t, s.took, 4)
	assert.Equal(t, []any{"links", "addresses"}, []any{s.took[0], s.took[2]})
	assert.GreaterOrEqual(t, s.took[1].(int64), int64(3000))
	s.start()
	assert.Empty(t, s.took, "a new operation starts afresh")
}

// A pin keeps the in-use settings it was made with. A release by a store
// opened with other settings (an operator's --sysfs, another configuration)
// checks with both: a use seen by either keeps the pin, and a failure of
// either, including settings it cannot use, is no proof of "unused".
func TestReleaseAlsoChecksWithThePinsSettings(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.2.6/24")
	var asked []map[string]string
	s.inUseConfig = map[string]string{"sysfs": "/sys"}
	s.inUseFor = func(settings map[string]string) (inUseFunc, error) {
		asked = append(asked, settings)
		switch settings["sysfs"] {
		case "/sys":
			return func(*Record, string) ([]Use, error) { return uses("rbd0 pool/img client4161 10.98.2.6"), nil }, nil
		case "/broken":
			return func(*Record, string) ([]Use, error) { return nil, errors.New("boom") }, nil
		}
		return nil, errors.New("unknown settings")
	}
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"sysfs": "/sys"}, r.InUse)
	found, err := s.UsesNow(r)
	require.NoError(t, err)
	assert.Empty(t, found)
	assert.Empty(t, asked, "the same settings: one check, the store's own")

	s.inUseConfig = map[string]string{"sysfs": "/tmp/empty"}
	_, err = s.Release("c1.net1", nil)
	var iu *InUseError
	require.ErrorAs(t, err, &iu, "the pin's settings see the device")
	assert.Equal(t, []string{"rbd0 pool/img client4161 10.98.2.6"}, iu.References)
	assert.Equal(t, []map[string]string{{"sysfs": "/sys"}}, asked)
	assert.True(t, mountedAt(t, r.PinPath))

	for _, bad := range []map[string]string{{"sysfs": "/broken"}, {"sysfs": "/unknown"}} {
		rewriteInUse(t, s, r, bad)
		_, err = s.Release("c1.net1", nil)
		assert.ErrorIs(t, err, errCheckFailed, "%v", bad)
		assert.True(t, mountedAt(t, r.PinPath))
	}
	s.inUseFor = nil
	_, err = s.Release("c1.net1", nil)
	assert.ErrorIs(t, err, errCheckFailed, "no way to check with the pin's settings")
	assert.True(t, mountedAt(t, r.PinPath))

	// Settings the store's own check covers (InUseFor says so with nil):
	// its check alone decides.
	s.inUseFor = func(map[string]string) (inUseFunc, error) { return nil, nil }
	rewriteInUse(t, s, r, map[string]string{"sysfs": "/broken"})
	found, err = s.UsesNow(r)
	require.NoError(t, err)
	assert.Empty(t, found)
	s.inUseFor = nil

	// A record of an earlier version kept no settings: the store's own.
	rewriteInUse(t, s, r, nil)
	_, err = s.Release("c1.net1", nil)
	require.NoError(t, err)
	assert.NoFileExists(t, r.PinPath)
}

// rewriteInUse sets the in-use settings kept in r's record.
func rewriteInUse(t *testing.T, s *Store, r *Record, settings map[string]string) {
	t.Helper()
	require.NoError(t, s.locked(false, func(v *view) error {
		rec := v.get(r.Attachment)
		rec.InUse = settings
		return s.writeRecord(rec)
	}))
}

// pinDir names the stateDir whose records own its pins. A store with
// another stateDir refuses every operation, and a pinDir that names none
// yet (made by an earlier version) is claimed only once every pin in it has
// a record of the claimer: until then, pins without a record are kept.
func TestPinDirBelongsToOneStateDir(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.19.5/24")
	owner := filepath.Join(s.PinDir, ownerFile)
	_, err := s.Sweep(false)
	require.NoError(t, err)
	assert.NoFileExists(t, owner, "a command claims nothing")
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	data, err := os.ReadFile(owner)
	require.NoError(t, err)
	assert.Equal(t, s.StateDir+"\n", string(data), "the first pin claims pinDir")

	other := func() *Store {
		o, err := Open(s.PinDir, filepath.Join(t.TempDir(), "state"), Options{InUse: notInUse})
		require.NoError(t, err)
		t.Cleanup(o.Close)
		return o
	}
	o := other()
	n2 := testNetns(t, "10.98.19.6/24")
	_, err = o.Pin(pinReq(o, "c2", "ns/cl", n2.Path))
	assert.ErrorIs(t, err, ErrOtherStateDir)
	assert.ErrorContains(t, err, "belongs to stateDir "+s.StateDir)
	_, err = o.List()
	assert.ErrorIs(t, err, ErrOtherStateDir)
	_, err = o.Sweep(false)
	assert.ErrorIs(t, err, ErrOtherStateDir)
	_, err = o.Sweep(true)
	assert.ErrorIs(t, err, ErrOtherStateDir)
	_, err = o.Release("c1.net1", nil)
	assert.ErrorIs(t, err, ErrOtherStateDir)
	_, err = o.GC("ceph-public", nil)
	assert.ErrorIs(t, err, ErrOtherStateDir)
	assert.True(t, mountedAt(t, r.PinPath))

	// A pinDir of an earlier version, without an owner: the other store
	// sees c1's pin without a record, keeps it and claims nothing.
	for _, unowned := range []func(){
		func() { require.NoError(t, os.Remove(owner)) },
		func() { require.NoError(t, os.WriteFile(owner, nil, 0o644)) }, // never synced before a power loss
	} {
		unowned()
		o = other()
		findings, err := o.Sweep(false)
		require.NoError(t, err)
		require.Len(t, findings, 1)
		assert.Equal(t, ActionKeep, findings[0].Action)
		assert.Contains(t, findings[0].Reason, "names no stateDir as its owner")
		assert.True(t, mountedAt(t, r.PinPath), "kept")
		data, _ = os.ReadFile(owner)
		assert.Empty(t, data, "not claimed while a pin has no record here")

		_, err = s.List()
		require.NoError(t, err)
		data, _ = os.ReadFile(owner)
		assert.Empty(t, data, "only an ADD claims")
		_, err = s.Pin(pinReq(s, "c1", "ns/cl", n.Path)) // the runtime repeats the ADD
		require.NoError(t, err)
		data, err = os.ReadFile(owner)
		require.NoError(t, err)
		assert.Equal(t, s.StateDir+"\n", string(data), "claimed by the store that has every pin's record")
	}
	_, err = s.Release("c1.net1", nil)
	require.NoError(t, err)
	assert.NoFileExists(t, r.PinPath)
}

// gc --dry-run changes nothing: a leftover temporary file stays; and it
// says what gc would do, so while a record cannot be read it releases
// nothing either.
func TestDryRunChangesNothing(t *testing.T) {
	s := testStore(t)
	n1, n2 := testNetns(t, "10.98.21.5/24"), testNetns(t, "10.98.21.6/24")
	_, err := s.Pin(pinReq(s, "c1", "ns/cl", n1.Path))
	require.NoError(t, err)
	records := filepath.Join(s.StateDir, "records")
	leftover := filepath.Join(records, tmpPrefix+"c9.net1.json")
	require.NoError(t, os.WriteFile(leftover, []byte("{"), 0o600))
	before := map[string][]byte{}
	entries, err := os.ReadDir(records)
	require.NoError(t, err)
	for _, e := range entries {
		before[e.Name()], err = os.ReadFile(filepath.Join(records, e.Name()))
		require.NoError(t, err)
	}
	_, err = s.Sweep(true)
	require.NoError(t, err)
	for name, data := range before {
		got, err := os.ReadFile(filepath.Join(records, name))
		require.NoError(t, err, name)
		assert.Equal(t, string(data), string(got), "%s is as it was", name)
	}
	require.NoError(t, os.Remove(leftover))

	// c2 drains and nothing uses it; a record that cannot be read stops
	// every release, and the dry run says so rather than "would release".
	r2, err := s.Pin(pinReq(s, "c2", "ns/cl", n2.Path))
	require.NoError(t, err)
	s.inUse = func(*Record, string) ([]Use, error) { return uses("process 1 (x)"), nil }
	_, err = s.Release("c2.net1", nil)
	require.Error(t, err)
	s.inUse = notInUse
	require.NoError(t, os.WriteFile(filepath.Join(records, "c3.net1.json"), []byte("{torn"), 0o600))
	findings, err := s.Sweep(true)
	require.Error(t, err, "the unreadable record is reported")
	var c2 *Finding
	for i := range findings {
		if findings[i].Attachment == "c2.net1" {
			c2 = &findings[i]
		}
	}
	require.NotNil(t, c2, "%+v", findings)
	assert.Equal(t, ActionKeep, c2.Action, "%+v", *c2)
	assert.Contains(t, c2.Reason, "cannot be read")
	_, err = s.Sweep(false)
	require.Error(t, err)
	assert.True(t, mountedAt(t, r2.PinPath), "gc released nothing, as the dry run said")
}

// A path that might reach the netns but cannot be looked at (here a
// symlink loop as the DEL's CNI_NETNS) is no proof that nothing reaches
// it: with the pin lost, the release is refused, not decided without the
// netns.
func TestReachErrorIsNotGone(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.22.5/24")
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	require.NoError(t, unix.Unmount(r.PinPath, unix.MNT_DETACH))
	loop := filepath.Join(t.TempDir(), "loop")
	require.NoError(t, os.Symlink(loop, loop))
	n.Delete(t)
	_, err = s.Release("c1.net1", &Teardown{Netns: loop})
	assert.ErrorIs(t, err, errCheckFailed, "the DEL's netns path could not be looked at")
	got, gerr := s.Get("c1.net1")
	require.NoError(t, gerr)
	assert.NotNil(t, got, "the record stays")

	require.NoError(t, os.Remove(loop))
	_, err = s.Release("c1.net1", &Teardown{Netns: loop})
	require.NoError(t, err, "a path that is gone is gone: nothing reaches the netns and nothing uses it")
}

// release --force is the one deliberate override: a holder its runtime
// gave up on is torn down through the chain first (the address goes back),
// but a chain DEL that fails does not stop the release the operator asked
// for; the log says what IPAM kept.
func TestForceReleaseIsNotStoppedByAFailingTeardown(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.23.5/24")
	r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
	require.NoError(t, err)
	s.inUse = func(*Record, string) ([]Use, error) { return uses("process 1 (x)"), nil }
	_, err = s.Release("c1.net1", &Teardown{Netns: n.Path})
	require.Error(t, err)
	n.Delete(t) // the runtime gave up
	teardowns := 0
	s.teardown = func(*Record) error { teardowns++; return errors.New("whereabouts: the API server is down") }

	_, err = s.ForceRelease("c1.net1")
	require.NoError(t, err)
	assert.Equal(t, 1, teardowns, "the chain's DEL was tried")
	assert.NoFileExists(t, r.PinPath)
	got, err := s.Get("c1.net1")
	require.NoError(t, err)
	assert.Nil(t, got)
}

// A pin without a record in a pinDir that names no owner is kept by every
// repair (it may be another stateDir's), and the pinDir cannot be claimed
// while it is there. The operator can still let it go: `release` checks
// it with the addresses its netns has now and releases it when unused;
// `release --force` releases it in any case.
func TestOperatorReleasesAPinWithoutARecord(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("force=%v", force), func(t *testing.T) {
			s := testStore(t)
			n := testNetns(t, "10.98.24.5/24")
			r, err := s.Pin(pinReq(s, "c1", "ns/cl", n.Path))
			require.NoError(t, err)
			require.NoError(t, os.Remove(filepath.Join(s.PinDir, ownerFile)))                   // made by an earlier version
			require.NoError(t, os.Remove(filepath.Join(s.StateDir, "records", "c1.net1.json"))) // removed by hand
			_, err = s.Sweep(false)
			require.NoError(t, err)
			require.True(t, mountedAt(t, r.PinPath), "kept: it may be another stateDir's")

			release := func() error {
				if force {
					_, err := s.ForceRelease("c1.net1")
					return err
				}
				_, err := s.Release("c1.net1", nil)
				return err
			}
			if !force {
				s.inUse = func(*Record, string) ([]Use, error) { return uses("process 9 (ceph-fuse)"), nil }
				var iu *InUseError
				require.ErrorAs(t, release(), &iu)
				assert.Equal(t, []string{"process 9 (ceph-fuse)"}, iu.References)
				assert.True(t, mountedAt(t, r.PinPath))
				s.inUse = notInUse
			}
			require.NoError(t, release())
			assert.NoFileExists(t, r.PinPath)
			_, err = s.Release("c1.net1", nil)
			assert.NoError(t, err, "nothing left: a second release finds nothing")
		})
	}
}

// powerLoss plays a power loss: every pin's mount is gone, and the record
// of each attachment in torn is cut to its first keep bytes (0: empty), as
// a record renamed but never synced can be found after the machine comes
// back. The next boot gets a new boot id.
func powerLoss(t *testing.T, s *Store, keep int, torn ...*Record) {
	t.Helper()
	for _, r := range torn {
		require.NoError(t, unix.Unmount(r.PinPath, unix.MNT_DETACH))
		p := filepath.Join(s.StateDir, "records", r.Attachment+".json")
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, data[:keep], 0o600))
	}
	s.bootID = "11111111-2222-3333-4444-555555555555"
}

// A record that a power loss left empty or torn never blocks a release in
// the next boot: the boot marker, written durably before any record of a
// boot, names the earlier boot, so the record is that boot's; it is
// dropped with its link and its pin file, and the release that found it
// goes on. Within a boot the same record blocks every release.
func TestTornRecordOfAnEarlierBootIsDropped(t *testing.T) {
	for _, keep := range []int{0, 40} {
		t.Run(fmt.Sprintf("first %d bytes", keep), func(t *testing.T) {
			s := testStore(t)
			req := pinReq(s, "c1", "ns/cl", testNetns(t, "10.98.21.5/24").Path)
			// A link outside pinDir too, as Rook's absolute path is.
			rook := filepath.Join(filepath.Dir(s.StateDir), "plugins", "rook-ceph.rbd.csi.ceph.com", "ns.net.ns")
			req.Links = append(req.Links, rook)
			torn, err := s.Pin(req)
			require.NoError(t, err)
			p := filepath.Join(s.StateDir, "records", "c1.net1.json")
			data, err := os.ReadFile(p)
			require.NoError(t, err)

			// Within the boot: unreadable blocks, as ever.
			require.NoError(t, os.WriteFile(p, data[:keep], 0o600))
			other, err := s.Pin(pinReq(s, "c2", "ns/other", testNetns(t, "10.98.21.6/24").Path))
			require.NoError(t, err)
			_, err = s.Release("c2.net1", nil)
			require.ErrorIs(t, err, errCheckFailed, "a record unreadable in its own boot blocks")
			assert.True(t, mountedAt(t, other.PinPath))
			require.NoError(t, os.WriteFile(p, data, 0o600))

			powerLoss(t, s, keep, torn)
			snap, err := s.Inspect()
			require.NoError(t, err)
			assert.Empty(t, snap.Unreadable, "Inspect: it blocks no release")
			assert.Equal(t, []Finding{tornFinding("c1.net1", readMarker(t, s))}, snap.Dropped, "Inspect shows what the next operation drops")
			findings, err := s.Sweep(true)
			require.NoError(t, err)
			assert.Contains(t, findings, tornFinding("c1.net1", readMarker(t, s)), "the dry run says so")
			require.FileExists(t, p, "the dry run changes nothing")

			_, err = s.Release("unrelated.net1", nil)
			require.NoError(t, err)
			assert.NoFileExists(t, p, "the torn record is dropped")
			assert.NoFileExists(t, torn.PinPath, "and its pin file")
			for _, l := range torn.Links {
				_, err = os.Lstat(l)
				assert.True(t, os.IsNotExist(err), "and its link %s", l)
			}
			assert.Equal(t, s.bootID, readMarker(t, s), "the marker names this boot")
		})
	}
}

// Without a marker (a stateDir of a netns-pin that synced every record)
// nothing tells a torn record's boot: it blocks, as an unreadable record
// does, until the operator removes it; then the marker is written.
func TestTornRecordWithoutAMarkerBlocks(t *testing.T) {
	s := testStore(t)
	torn, err := s.Pin(pinReq(s, "c1", "ns/cl", testNetns(t, "10.98.22.5/24").Path))
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(s.StateDir, bootMarker)))
	powerLoss(t, s, 0, torn)
	_, err = s.Release("unrelated.net1", nil)
	require.NoError(t, err)
	_, err = s.List()
	require.ErrorIs(t, err, errTornRecord)
	assert.FileExists(t, filepath.Join(s.StateDir, "records", "c1.net1.json"))
	assert.Equal(t, s.bootID, readMarker(t, s))
}

// A marker whose first line is no boot id (not what the store writes)
// tells no boot either: the torn record blocks, Inspect shows it as
// unreadable, and the marker is written for this boot.
func TestTornRecordWithAMarkerOfNoBootBlocks(t *testing.T) {
	s := testStore(t)
	torn, err := s.Pin(pinReq(s, "c1", "ns/cl", testNetns(t, "10.98.22.9/24").Path))
	require.NoError(t, err)
	marker := filepath.Join(s.StateDir, bootMarker)
	require.NoError(t, os.WriteFile(marker, []byte("\x1b[2Jnot-a-boot\n"+s.PinDir+"\n"), 0o600))
	powerLoss(t, s, 0, torn)
	snap, err := s.Inspect()
	require.NoError(t, err)
	assert.Empty(t, snap.Dropped)
	require.ErrorIs(t, snap.Unreadable["c1.net1"], errTornRecord)
	_, err = s.Release("unrelated.net1", nil)
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(s.StateDir, "records", "c1.net1.json"), "kept")
	assert.Equal(t, s.bootID, readMarker(t, s))
}

func TestIsBootID(t *testing.T) {
	assert.True(t, isBootID("6d0e4c1a-0003-4b7e-9c3d-000000000003"))
	for _, s := range []string{"", "6D0E4C1A-0003-4B7E-9C3D-000000000003", "6d0e4c1a-0003-4b7e-9c3d-00000000000", "6d0e4c1a00003-4b7e-9c3d-000000000003",
		"6d0e4c1a-0003-4b7e-9c3d-00000000000g", "6d0e4c1a-0003-4b7e-9c3d--00000000003", "\x1b[2J0e4c1a-0003-4b7e-9c3d-000000000003"} {
		assert.False(t, isBootID(s), "%q", s)
	}
}

func readMarker(t *testing.T, s *Store) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.StateDir, bootMarker))
	require.NoError(t, err)
	boot, pinDir, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	assert.Equal(t, s.PinDir, pinDir, "the marker names the pinDir")
	return boot
}

// A store with another pinDir (an operator's wrong --pin-dir) cannot tell
// whose a torn record is, nor find its pin and links: it refuses and drops
// nothing, and the store of the records' own pinDir drops it.
func TestTornRecordIsNotDroppedByAnotherPinDir(t *testing.T) {
	s := testStore(t)
	torn, err := s.Pin(pinReq(s, "c1", "ns/cl", testNetns(t, "10.98.23.5/24").Path))
	require.NoError(t, err)
	powerLoss(t, s, 0, torn)
	record := filepath.Join(s.StateDir, "records", "c1.net1.json")

	other, err := Open(filepath.Join(filepath.Dir(s.StateDir), "other-pins"), s.StateDir, Options{InUse: notInUse})
	require.NoError(t, err)
	defer other.Close()
	other.bootID = s.bootID
	_, err = other.Sweep(false)
	require.ErrorIs(t, err, ErrOtherPinDir)
	assert.FileExists(t, record, "nothing dropped")
	_, err = os.Lstat(torn.Links[0])
	require.NoError(t, err, "its link stays")

	_, err = s.Sweep(false)
	require.NoError(t, err)
	assert.NoFileExists(t, record)
	assert.NoFileExists(t, torn.PinPath)
}
