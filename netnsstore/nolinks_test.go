package netnsstore

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// symlinksUnder lists every symbolic link below dir.
func symlinksUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			out = append(out, p)
		}
		return nil
	}))
	return out
}

// A holder with no link (links: [], a node plugin as its own holder) is
// pinned, refused while in use and released after, as any holder; only no
// path leads to it.
func TestPinWithoutLinks(t *testing.T) {
	s := testStore(t)
	n := testNetns(t, "10.98.40.5/24")
	orig := statID(t, n.Path)
	req := pinReq(s, "c1", "rook-ceph/my-cluster", n.Path)
	req.PodName, req.Links = "csi-rbdplugin-x7k2p", []string{}

	r, err := s.Pin(req)
	require.NoError(t, err)
	assert.Empty(t, r.Links)
	assert.True(t, mountedAt(t, r.PinPath), "pinned")
	assert.Equal(t, orig, statID(t, r.PinPath))
	assert.Empty(t, symlinksUnder(t, s.PinDir), "no link anywhere under pinDir")

	snap, err := s.Inspect()
	require.NoError(t, err)
	require.Len(t, snap.Records, 1)
	assert.Equal(t, "rook-ceph/my-cluster", snap.Records[0].Cluster, "listed by its cluster key")
	assert.Empty(t, snap.Links)

	refs := []string{"rbd0 pool/img client4161 10.98.40.5"}
	s.inUse = func(*Record, string) ([]Use, error) { return uses(refs...), nil }
	n.Delete(t) // the runtime's own name goes first, as on a pod's deletion
	_, err = s.Release(r.Attachment, nil)
	var iu *InUseError
	require.ErrorAs(t, err, &iu)
	assert.Equal(t, refs, iu.References)
	got, err := s.Get(r.Attachment)
	require.NoError(t, err)
	assert.Equal(t, StateDraining, got.State)
	assert.True(t, mountedAt(t, r.PinPath), "the pin stays while its clients live")
	assert.Empty(t, symlinksUnder(t, s.PinDir), "and a refused release makes no link either")

	s.inUse = notInUse
	_, err = s.Release(r.Attachment, nil)
	require.NoError(t, err)
	assert.NoFileExists(t, r.PinPath)
	assert.Zero(t, nsfsMounts(t, orig.Ino), "the netns went with its last client")
	got, err = s.Get(r.Attachment)
	require.NoError(t, err)
	assert.Nil(t, got)
}

// Two pods of one node plugin (the old one draining, its replacement
// active) share the cluster key and no link: the release of either
// concerns only its own pin.
func TestTwoLinklessHoldersOfOneCluster(t *testing.T) {
	s := testStore(t)
	a, b := testNetns(t, "10.98.41.5/24"), testNetns(t, "10.98.41.6/24")
	ra := pinReq(s, "a", "rook-ceph/my-cluster", a.Path)
	rb := pinReq(s, "b", "rook-ceph/my-cluster", b.Path)
	ra.Links, rb.Links = []string{}, []string{}
	pa, err := s.Pin(ra)
	require.NoError(t, err)
	s.inUse = func(r *Record, _ string) ([]Use, error) {
		if r.Attachment == pa.Attachment {
			return uses("ceph client in the old pod's netns"), nil
		}
		return nil, nil
	}
	_, err = s.Release(pa.Attachment, nil)
	require.Error(t, err, "the old pod's clients keep it")
	pb, err := s.Pin(rb)
	require.NoError(t, err)
	assert.True(t, mountedAt(t, pa.PinPath))
	assert.True(t, mountedAt(t, pb.PinPath))

	_, err = s.Release(pb.Attachment, nil)
	require.NoError(t, err, "the replacement, unused, goes at once")
	assert.True(t, mountedAt(t, pa.PinPath), "the old pin stays")
	s.inUse = notInUse
	_, err = s.Release(pa.Attachment, nil)
	require.NoError(t, err)
	assert.Empty(t, symlinksUnder(t, s.PinDir))
	list, err := s.List()
	require.NoError(t, err)
	assert.Empty(t, list)
}
