//go:build failpoints

package netnsstore

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/failpoint"
)

// The crash tests re-run this test binary as a child that performs one
// store operation with a failpoint armed; the child SIGKILLs itself there,
// as a node would lose the plugin process. The parent then checks that the
// next operation leaves the store consistent and that the interrupted one
// can be repeated to completion.

const crashHelperEnv = "NETNS_PIN_CRASH_HELPER"

// The failpoints of ADD (Pin) and of a release (DEL, GC), in order.
var (
	addFailpoints     = []string{"add-record-written", "add-pin-mounted", "add-links-set"}
	releaseFailpoints = []string{"del-links-moved", "del-unpinned"}
	// The sweeper's release of an abandoned attachment runs the chain's
	// teardown between the two last steps.
	finishFailpoints = []string{"del-links-moved", "sweep-teardown-done", "del-unpinned"}
)

// TestMain runs the child's operation instead of the tests when the
// crash helper variable is set.
func TestMain(m *testing.M) {
	if op := os.Getenv(crashHelperEnv); op != "" {
		os.Exit(crashChild(op))
	}
	os.Exit(m.Run())
}

func crashChild(op string) int {
	s, err := Open(os.Getenv("PIN_DIR"), os.Getenv("STATE_DIR"), Options{InUse: notInUse})
	if err == nil {
		switch op {
		case "pin":
			_, err = s.Pin(pinReq(s, os.Getenv("ID"), "ns/cl", os.Getenv("NETNS")))
		case "release":
			_, err = s.Release(os.Getenv("ID")+".net1", nil)
		case "gc":
			_, err = s.GC("ceph-public", map[string]bool{})
		case "finish":
			s.teardown = countTeardowns(os.Getenv("TEARDOWNS"))
			_, err = s.FinishAbandoned()
		}
	}
	// Reaching this point means the failpoint did not fire.
	fmt.Fprintln(os.Stderr, "crash child finished without dying:", err)
	return 3
}

func runCrashChild(t *testing.T, s *Store, op, id, netns, fp string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+op, "PIN_DIR="+s.PinDir, "STATE_DIR="+s.StateDir,
		"ID="+id, "NETNS="+netns, failpoint.EnvVar+"="+fp, "TEARDOWNS="+filepath.Join(s.StateDir, "teardowns"))
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "child should die at %s: %s", fp, out)
	ws := exitErr.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "child killed by SIGKILL at %s, got %v: %s", fp, ws, out)
}

func TestCrashAtEveryFailpoint(t *testing.T) {
	for _, fp := range addFailpoints {
		t.Run(fp, func(t *testing.T) {
			s := testStore(t)
			prev, cur := testNetns(t, "10.98.9.5/24"), testNetns(t, "10.98.9.6/24")
			_, err := s.Pin(pinReq(s, "prev", "ns/cl", prev.Path))
			require.NoError(t, err)
			runCrashChild(t, s, "pin", "cur", cur.Path, fp)

			rs, err := s.List() // the next operation repairs
			require.NoError(t, err)
			assertConsistent(t, s)
			// The record says active from the first step on; the runtime's
			// netns is still there, so the next operation pins it again
			// where the crash left it without a pin.
			require.Len(t, rs, 2, "interrupted ADD completed by repair")
			assert.Equal(t, "../pins/cur.net1", readLink(t, filepath.Join(s.PinDir, "ns/cl.net")), "link on the newest active pin")

			_, err = s.Pin(pinReq(s, "cur", "ns/cl", cur.Path))
			require.NoError(t, err, "the interrupted ADD can be repeated")
			assertConsistent(t, s)
			assert.Equal(t, "../pins/cur.net1", readLink(t, filepath.Join(s.PinDir, "ns/cl.net")))
		})
	}
	for _, fp := range releaseFailpoints {
		t.Run(fp, func(t *testing.T) {
			s := testStore(t)
			prev, cur := testNetns(t, "10.98.10.5/24"), testNetns(t, "10.98.10.6/24")
			_, err := s.Pin(pinReq(s, "prev", "ns/cl", prev.Path))
			require.NoError(t, err)
			rc, err := s.Pin(pinReq(s, "cur", "ns/cl", cur.Path))
			require.NoError(t, err)
			runCrashChild(t, s, "release", "cur", "", fp)

			rs, err := s.List()
			require.NoError(t, err)
			assertConsistent(t, s)
			// Killed before its check, or after unmounting but before
			// removing the record: the record stays (pinned again from the
			// runtime's netns), and the runtime's retry releases it.
			require.Len(t, rs, 2, "interrupted release decided nothing the next operation trusts")
			assert.Equal(t, "../pins/cur.net1", readLink(t, filepath.Join(s.PinDir, "ns/cl.net")))
			assert.Equal(t, 2, nsfsMounts(t, rc.NetnsIno), "the netns's own mount and its pin")

			_, err = s.Release("cur.net1", nil)
			require.NoError(t, err, "the interrupted DEL can be repeated")
			_, err = s.Release("prev.net1", nil)
			require.NoError(t, err)
			assertConsistent(t, s)
		})
	}
}

// Hole: repair used to finish an interrupted release, and roll back an
// interrupted ADD, without the in-use check, although a client could have
// entered the netns through the links (an ADD interrupted after publishing
// them) or through the pin (a release interrupted after its check). At every
// failpoint, a client that uses the netns by the time the next operation
// runs keeps it pinned: the record becomes draining and the links follow the
// rule.
func TestCrashThenClientKeepsTheNetns(t *testing.T) {
	for _, tc := range []struct {
		op, fp string
		want   string
	}{
		// ADD writes an active record first; the next operation pins it
		// again where the crash left it without a pin.
		{"pin", "add-record-written", StateActive}, {"pin", "add-pin-mounted", StateActive}, {"pin", "add-links-set", StateActive},
		// An interrupted DEL decided nothing: the holder is still active,
		// and the runtime's retry settles it.
		{"release", "del-links-moved", StateActive},
		{"release", "del-unpinned", StateActive},
	} {
		t.Run(tc.op+"/"+tc.fp, func(t *testing.T) {
			s := testStore(t)
			n := testNetns(t, "10.98.11.5/24")
			if tc.op == "release" {
				_, err := s.Pin(pinReq(s, "cur", "ns/cl", n.Path))
				require.NoError(t, err)
			}
			runCrashChild(t, s, tc.op, "cur", n.Path, tc.fp)
			// A client enters the netns between the crash and the next
			// operation, which is another holder's DEL.
			s.inUse = func(*Record, string) ([]Use, error) { return uses("process 7 (rbd)"), nil }
			_, err := s.Release("other.net1", nil)
			require.NoError(t, err)

			r, err := s.Get("cur.net1")
			require.NoError(t, err)
			require.NotNil(t, r, "the record stays")
			assert.Equal(t, tc.want, r.State)
			if tc.want == StateDraining {
				assert.Equal(t, []string{"process 7 (rbd)"}, r.References)
			}
			assertConsistent(t, s)
			assert.Equal(t, "../pins/cur.net1", readLink(t, filepath.Join(s.PinDir, "ns/cl.net")), "the only pin of its cluster is the link target")

			s.inUse = notInUse
			_, err = s.Release("cur.net1", nil)
			require.NoError(t, err)
			assertConsistent(t, s)
			assert.NoFileExists(t, filepath.Join(s.PinDir, "ns/cl.net"))
		})
	}
}

// countTeardowns is a teardown that appends the attachment to file: the
// chain DEL it stands for is idempotent, so it may run more than once, but
// it must have run before the pin is gone.
func countTeardowns(file string) teardownFunc {
	return func(r *Record) error {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = fmt.Fprintln(f, r.Attachment)
		return err
	}
}

// The sweeper killed at every step of finishing an abandoned teardown:
// the next round completes it, and the chain's teardown ran before the pin
// went.
func TestCrashWhileFinishingAnAbandonedTeardown(t *testing.T) {
	for _, fp := range finishFailpoints {
		t.Run(fp, func(t *testing.T) {
			s := testStore(t)
			n := testNetns(t, "10.98.14.5/24")
			r, err := s.Pin(pinReq(s, "gone", "ns/cl", n.Path))
			require.NoError(t, err)
			// Refused once, then the runtime abandoned it: its netns path
			// is gone.
			r.State, r.Teardown = StateDraining, &Teardown{Netns: filepath.Join(t.TempDir(), "removed-by-the-runtime")}
			writeRaw(t, s, r)

			runCrashChild(t, s, "finish", "", "", fp)
			teardowns := filepath.Join(s.StateDir, "teardowns")
			s.teardown = countTeardowns(teardowns)
			_, err = s.FinishAbandoned()
			require.NoError(t, err)

			rs, err := s.List()
			require.NoError(t, err)
			assert.Empty(t, rs, "the next round finished the teardown")
			assertConsistent(t, s)
			assert.Zero(t, nsfsMounts(t, r.NetnsIno)-1, "only the test's own netns mount remains")
			data, err := os.ReadFile(teardowns)
			require.NoError(t, err, "the chain's teardown ran")
			assert.Contains(t, string(data), "gone.net1")
		})
	}
}

// GC releases through the same steps as DEL: a crash at each of them is
// finished by the next GC.
func TestCrashDuringGC(t *testing.T) {
	for _, fp := range releaseFailpoints {
		t.Run(fp, func(t *testing.T) {
			s := testStore(t)
			n := testNetns(t, "10.98.12.5/24")
			r, err := s.Pin(pinReq(s, "stale", "ns/cl", n.Path))
			require.NoError(t, err)
			runCrashChild(t, s, "gc", "", "", fp)
			// Nothing an interrupted GC did is trusted: the next GC decides
			// again.
			_, err = s.GC("ceph-public", map[string]bool{})
			require.NoError(t, err)

			rs, err := s.List()
			require.NoError(t, err)
			assertConsistent(t, s)
			assert.Empty(t, rs, "the interrupted GC's release was finished")
			assert.Zero(t, nsfsMounts(t, r.NetnsIno)-1, "only the original netns mount remains")
			_, err = os.Lstat(r.Links[0])
			assert.True(t, os.IsNotExist(err), "no link to the released netns")
		})
	}
}

// assertConsistent checks the store's invariants: every record has its pin
// mounted with its netns, every pin file has a record, and every link
// points at a pin that a record in a linkable state owns.
func assertConsistent(t *testing.T, s *Store) {
	t.Helper()
	unlock, err := s.lock()
	require.NoError(t, err)
	defer unlock()
	rs, bad, err := s.records(true)
	require.NoError(t, err)
	require.Empty(t, bad)
	owned := map[string]*Record{}
	for _, r := range rs {
		owned[r.Attachment] = r
		assert.Contains(t, []string{StateActive, StateDraining}, r.State, "record %s", r.Attachment)
		id, mounted, err := s.pinState(r.Attachment)
		require.NoError(t, err)
		assert.True(t, mounted, "record %s has its pin mounted", r.Attachment)
		assert.Equal(t, NetnsID{r.NetnsDev, r.NetnsIno}, id, "pin %s holds the recorded netns", r.Attachment)
	}
	names, err := readDirNames(s.pinsFd)
	require.NoError(t, err)
	for _, n := range names {
		assert.Contains(t, owned, n, "pin file %s has a record", n)
	}
	require.NoError(t, filepath.Walk(s.PinDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink == 0 || strings.Contains(filepath.Base(p), tmpPrefix) {
			return err
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		r, ok := owned[filepath.Base(target)]
		if assert.True(t, ok, "link %s -> %s points at a recorded pin", p, target) {
			assert.Contains(t, []string{StateActive, StateDraining}, r.State)
		}
		return nil
	}))
}
