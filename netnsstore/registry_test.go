package netnsstore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// The package's tests never register in the node's registry: stores that
// a test opens without a folder of its own register in one of this test
// process.
func init() {
	dir, err := os.MkdirTemp("", "netnsstore-registry-")
	if err == nil {
		registryDir = filepath.Join(dir, "stores")
	}
}

func registryFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	return st.Ino
}

// The first record of a store is written after its registration, and a
// store that is registered already is not registered again: a read, no
// write, on every later first record of a process.
func TestRegistryWrittenOnceBeforeTheFirstRecord(t *testing.T) {
	s := testStore(t)
	reg := s.registry
	assert.Empty(t, registryFiles(t, reg), "opening a store registers nothing")

	ns := testNetns(t, "")
	_, err := s.Pin(pinReq(s, "c1", "cl", ns.Path))
	require.NoError(t, err)
	name := RegistrationName(s.StateDir)
	require.Equal(t, []string{name}, registryFiles(t, reg), "one file, no temporary one left")
	got, err := Registered(reg)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.NoError(t, got[0].Err)
	assert.Equal(t, Registration{StateDir: s.StateDir, PinDir: s.PinDir}, got[0].Registration)

	ino := inode(t, filepath.Join(reg, name))
	// Another process of the same store: a new Store.
	o, err := Open(s.PinDir, s.StateDir, Options{InUse: notInUse, RegistryDir: reg})
	require.NoError(t, err)
	defer o.Close()
	ns2 := testNetns(t, "")
	_, err = o.Pin(pinReq(o, "c2", "cl", ns2.Path))
	require.NoError(t, err)
	assert.Equal(t, ino, inode(t, filepath.Join(reg, name)), "the registration was not written again")

	// A registration that says something else is replaced whole.
	require.NoError(t, os.WriteFile(filepath.Join(reg, name), []byte(`{"stateDir":"/elsewhere"`), 0o600))
	o2, err := Open(s.PinDir, s.StateDir, Options{InUse: notInUse, RegistryDir: reg})
	require.NoError(t, err)
	defer o2.Close()
	ns3 := testNetns(t, "")
	_, err = o2.Pin(pinReq(o2, "c3", "cl", ns3.Path))
	require.NoError(t, err)
	got, err = Registered(reg)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.NoError(t, got[0].Err)
	assert.Equal(t, s.StateDir, got[0].StateDir)
}

// A store that cannot register writes no record: no record ever exists in
// a store that readers cannot find.
func TestNoRecordWithoutRegistration(t *testing.T) {
	root := hosttest.NewWorkDir(t, "registry-")
	reg := filepath.Join(root, "stores")
	require.NoError(t, os.Mkdir(reg, 0o777)) // writable by all: refused, as pinDir would be
	require.NoError(t, os.Chmod(reg, 0o777))
	s, err := Open(filepath.Join(root, "pins"), filepath.Join(root, "state"), Options{InUse: notInUse, RegistryDir: reg})
	require.NoError(t, err)
	defer s.Close()
	ns := testNetns(t, "")
	_, err = s.Pin(pinReq(s, "c1", "cl", ns.Path))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "register the store")
	recs, _, err := ReadRecords(s.StateDir)
	require.NoError(t, err)
	assert.Empty(t, recs, "no record without a registration")
	assert.Empty(t, registryFiles(t, reg))
}

// Paths that are no file name (spaces, newlines, quotes, long) register
// under the hash of the path; a path JSON cannot carry as it is (not
// UTF-8) is refused, never registered as another path.
func TestRegistryHostilePaths(t *testing.T) {
	requireRoot(t)
	root := hosttest.NewWorkDir(t, "registry-")
	reg := filepath.Join(root, "stores")
	long := strings.Repeat("deep/", 60) + "x" // a path longer than any file name
	for _, name := range []string{"with space", "new\nline", `quote"back\slash`, "ünïcode", long, "..dots.."} {
		t.Run(fmt.Sprintf("%.20q", name), func(t *testing.T) {
			dir := filepath.Join(root, name)
			s, err := Open(filepath.Join(dir, "pins"), filepath.Join(dir, "state"), Options{InUse: notInUse, RegistryDir: reg})
			require.NoError(t, err)
			defer s.Close()
			require.NoError(t, s.register())
			data, err := os.ReadFile(filepath.Join(reg, RegistrationName(s.StateDir)))
			require.NoError(t, err)
			var r Registration
			require.NoError(t, json.Unmarshal(data, &r))
			assert.Equal(t, s.StateDir, r.StateDir)
			assert.Equal(t, s.PinDir, r.PinDir)
		})
	}
	t.Run("not UTF-8", func(t *testing.T) {
		dir := filepath.Join(root, "bad\xff")
		s, err := Open(filepath.Join(dir, "pins"), filepath.Join(dir, "state"), Options{InUse: notInUse, RegistryDir: reg})
		require.NoError(t, err)
		defer s.Close()
		ns := testNetns(t, "")
		_, err = s.Pin(pinReq(s, "c1", "cl", ns.Path))
		require.ErrorContains(t, err, "must be UTF-8")
		_, err = os.Stat(filepath.Join(reg, RegistrationName(s.StateDir)))
		assert.True(t, os.IsNotExist(err))
	})
	// Every file of the registry read back names the stateDir its name says.
	got, err := Registered(reg)
	require.NoError(t, err)
	assert.Len(t, got, 6)
	for _, r := range got {
		assert.NoError(t, r.Err)
	}
}

// A registration that is not what its name says, or is torn, is a store
// a reader cannot know: Registered says so rather than skip it.
func TestRegisteredFlagsWhatItCannotUse(t *testing.T) {
	requireRoot(t)
	reg := filepath.Join(hosttest.NewWorkDir(t, "registry-"), "stores")
	require.NoError(t, MakeRegistry(reg))
	ok, _ := json.Marshal(Registration{StateDir: "/var/lib/a", PinDir: "/run/a"})
	require.NoError(t, os.WriteFile(filepath.Join(reg, RegistrationName("/var/lib/a")), ok, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(reg, RegistrationName("/var/lib/b")), ok, 0o600)) // names a
	require.NoError(t, os.WriteFile(filepath.Join(reg, RegistrationName("/var/lib/c")), []byte(`{"stateDir":`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(reg, tmpPrefix+RegistrationName("/var/lib/d")), ok, 0o600))
	got, err := Registered(reg)
	require.NoError(t, err)
	require.Len(t, got, 3, "the temporary file is no registration")
	bad := 0
	for _, r := range got {
		if r.Err != nil {
			bad++
			t.Log(r.Err)
		}
	}
	assert.Equal(t, 2, bad)

	_, err = Registered(filepath.Join(reg, "missing"))
	assert.Error(t, err, "a missing registry is an error, never an empty one")
}

// Stores that take their first record at once each register, whole.
func TestConcurrentRegistrations(t *testing.T) {
	requireRoot(t)
	root := hosttest.NewWorkDir(t, "registry-")
	reg := filepath.Join(root, "stores")
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	for i := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Two Stores per stateDir: registrations of one store too.
			dir := filepath.Join(root, fmt.Sprint(i%n))
			s, err := Open(filepath.Join(dir, "pins"), filepath.Join(dir, "state"), Options{InUse: notInUse, RegistryDir: reg})
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			unlock, err := s.lock()
			if err != nil {
				errs[i] = err
				return
			}
			defer unlock()
			errs[i] = s.register()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	got, err := Registered(reg)
	require.NoError(t, err)
	require.Len(t, got, n)
	for _, r := range got {
		assert.NoError(t, r.Err)
	}
	assert.Len(t, registryFiles(t, reg), n, "no temporary file left")
}

func TestMakeRegistryAndUnregister(t *testing.T) {
	requireRoot(t)
	reg := filepath.Join(hosttest.NewWorkDir(t, "registry-"), "var", "stores")
	require.NoError(t, MakeRegistry(reg))
	got, err := Registered(reg)
	require.NoError(t, err)
	assert.Empty(t, got)
	require.NoError(t, Unregister(reg, "/var/lib/none"), "unregistering what is not registered is no error")
	b, _ := json.Marshal(Registration{StateDir: "/var/lib/a", PinDir: "/run/a"})
	require.NoError(t, os.WriteFile(filepath.Join(reg, RegistrationName("/var/lib/a/")), b, 0o600))
	require.NoError(t, Unregister(reg, "/var/lib/a"))
	assert.Empty(t, registryFiles(t, reg))
}
