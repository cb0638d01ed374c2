package kernel

// Scenario 7's host side: the files each guest kernel printed against the
// copy kept in inuse/testdata/kernel/<kernel> (which inuse's own tests parse
// and compare with the fixtures): same files, same shapes. A kernel that
// prints differently fails here; NETNS_PIN_KERNEL_CAPTURE_UPDATE=1 rewrites
// the copy of each kernel that ran from this run (then run
// `go test ./inuse/`).

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
)

func testdataRoot() string { return filepath.Join(repoRoot(), "inuse", "testdata", "kernel") }

func testdataDir(k string) string { return filepath.Join(testdataRoot(), k) }

// TestCapturesKept: inuse/testdata/kernel holds the files of exactly the
// kernels the suite boots (a kernel dropped from the list takes its files
// along; one added brings them, with NETNS_PIN_KERNEL_CAPTURE_UPDATE=1).
func TestCapturesKept(t *testing.T) {
	ents, err := os.ReadDir(testdataRoot())
	require.NoError(t, err)
	var kept []string
	for _, e := range ents {
		if e.IsDir() {
			kept = append(kept, e.Name())
		} else {
			t.Errorf("%s/%s: the files of a kernel go into its folder", testdataRoot(), e.Name())
		}
	}
	want := append([]string(nil), kernels...)
	sort.Strings(want)
	assert.Equal(t, want, kept, "folders of %s", testdataRoot())
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel] = string(b)
		return nil
	})
	require.NoError(t, err, "read %s", dir)
	return files
}

func compareCapture(t *testing.T, k, captured string) {
	dir := testdataDir(k)
	got := readTree(t, captured)
	require.NotEmpty(t, got, "the guest captured nothing in %s", captured)
	if os.Getenv("NETNS_PIN_KERNEL_CAPTURE_UPDATE") == "1" {
		require.NoError(t, os.RemoveAll(dir))
		for name, content := range got {
			require.NoError(t, cephfixture.Write(filepath.Join(dir, name), content))
		}
		t.Logf("NETNS_PIN_KERNEL_CAPTURE_UPDATE=1: wrote %d files to %s", len(got), dir)
		return
	}
	want := readTree(t, dir)
	var names []string
	for name := range got {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		w, ok := want[name]
		if !assert.True(t, ok, "the kernel printed %s, which %s lacks (NETNS_PIN_KERNEL_CAPTURE_UPDATE=1 adds it)", name, dir) {
			continue
		}
		assert.Equal(t, cephfixture.FileShape(name, w), cephfixture.FileShape(name, got[name]),
			"%s: the kernel now prints another shape than %s/%s:\nnow: %q\nkept: %q", name, dir, name, got[name], w)
	}
	for name := range want {
		_, ok := got[name]
		assert.True(t, ok, "%s/%s: the kernel did not print it this time", dir, name)
	}
	t.Logf("%d kernel files, all of the shapes kept in %s", len(got), dir)
}
