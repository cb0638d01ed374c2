package netnsstore

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testdata/format-3819815 holds the files a store of commit 3819815 wrote
// (records, the boot marker, link-dirs, the events file, the sweeper's
// status, pinDir's owner file), made by that commit's own code: two holders
// pinned under /tmp/netns-pin-fixture, one DEL refused (a draining record
// with its captured teardown), one released, a record with every field set
// and strings that need escaping. The on-disk format is the struct tags of
// Record (docs/design.md §10, §14): what that commit wrote is read the
// same, and a record it wrote is written again byte for byte.
const fixtureDir = "testdata/format-3819815"

// fixtureRoot is the folder the fixtures' store lived in.
const fixtureRoot = "/tmp/netns-pin-fixture"

func TestRecordsOf3819815AreWrittenTheSame(t *testing.T) {
	for _, name := range []string{"c1.net1", "c2.net1", "c9.eth9"} {
		data, err := os.ReadFile(filepath.Join(fixtureDir, "records", name+recordSuffix))
		require.NoError(t, err)
		var r Record
		require.NoError(t, json.Unmarshal(data, &r), name)
		again, err := json.MarshalIndent(&r, "", "  ")
		require.NoError(t, err)
		// The one change is not of the format: invalid UTF-8 (c9's "\xff")
		// was written as \ufffd, which reads back as U+FFFD itself.
		want := strings.ReplaceAll(string(data), `\ufffd`, "\ufffd")
		assert.Equal(t, want, string(again), "%s: the record as 3819815 wrote it", name)
	}
}

// The fixtures placed in a store of this build (their paths rewritten to
// its folders) are read as what 3819815 meant.
func TestStoreReadsTheFilesOf3819815(t *testing.T) {
	s := testStore(t)
	require.NoError(t, s.openPinDir())
	root := filepath.Dir(s.StateDir)
	place := func(from string, dirfd int, to string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(fixtureDir, from))
		require.NoError(t, err)
		data = bytes.ReplaceAll(data, []byte(fixtureRoot+"/pins"), []byte(s.PinDir))
		data = bytes.ReplaceAll(data, []byte(fixtureRoot+"/state"), []byte(s.StateDir))
		data = bytes.ReplaceAll(data, []byte(fixtureRoot+"/rook-links"), []byte(filepath.Join(root, "rook-links")))
		require.NoError(t, s.replaceFile(dirfd, to, data, false))
	}
	for _, n := range []string{"c1.net1", "c2.net1", "c9.eth9"} {
		place("records/"+n+recordSuffix, s.recordsFd, n+recordSuffix)
	}
	for _, n := range []string{bootMarker, linkDirsFile, eventsFile, sweepStatusFile} {
		place(n, s.stateFd, n)
	}
	place("netns-pin-state-dir", s.pinDirFd, ownerFile)

	rs, bad, err := s.records(true)
	require.NoError(t, err)
	require.Empty(t, bad)
	require.Len(t, rs, 3)
	byName := map[string]*Record{}
	for _, r := range rs {
		byName[r.Attachment] = r
		assert.Equal(t, 2, r.Format)
		assert.Equal(t, "v0.0.0-3819815", r.Writer)
		assert.Equal(t, s.PinDir, r.PinDir)
	}
	c1 := byName["c1.net1"]
	assert.Equal(t, StateDraining, c1.State)
	assert.Equal(t, []string{"10.99.0.2"}, c1.IPs)
	assert.Equal(t, "csi-holder-a", c1.PodName)
	assert.Equal(t, "block", c1.InUse["unattributed"])
	assert.Equal(t, []string{filepath.Join(s.PinDir, "rook-ceph/my-cluster.net"), filepath.Join(root, "rook-links/rook-ceph.net.ns")}, c1.Links)
	assert.Equal(t, []string{"rbd0 rbd/img client4161 10.99.0.2 <&>"}, c1.References)
	require.NotNil(t, c1.Teardown)
	assert.Equal(t, "/opt/cni/bin", c1.Teardown.CNIPath)
	assert.JSONEq(t, `{"kind":"cniCacheV1","containerId":"c1","config":"eyJ0eXBlIjoibWFjdmxhbiJ9","ifName":"net1","networkName":"ceph-public","cniArgs":[["K8S_POD_NAME","csi-holder-a"]],"result":{"cniVersion":"1.0.0","ips":[{"address":"10.99.0.2/24"}]}}`, string(c1.Teardown.Cache))
	assert.False(t, c1.DrainingSince.IsZero())
	c2 := byName["c2.net1"]
	assert.Equal(t, StateActive, c2.State)
	assert.Equal(t, []string{"fd00:99::3"}, c2.IPs)
	assert.Nil(t, c2.Teardown)
	c9 := byName["c9.eth9"]
	assert.True(t, c9.Abandoned)
	assert.Equal(t, "ceph <public> & \"x\"", c9.Network)
	assert.Equal(t, "\ufffd", c9.InUse["a\u2029"])
	assert.Equal(t, time.Date(2026, 12, 1, 13, 4, 5, 123456789, time.UTC), c9.Created)

	boot, pinDir, err := s.markedBoot()
	require.NoError(t, err)
	assert.Equal(t, "b7cedf83-411e-4773-8671-6c3eb153242e", boot)
	assert.Equal(t, s.PinDir, pinDir)
	dirs, err := s.linkDirs()
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(root, "rook-links")}, dirs)
	owned, err := s.checkOwner()
	require.NoError(t, err)
	assert.True(t, owned)

	events, _, _, err := ReadEvents(s.StateDir, 0)
	require.NoError(t, err)
	assert.Equal(t, map[[3]string]uint64{
		{EventRefusal, ByDEL, "rook-ceph/my-cluster"}:       1,
		{EventRelease, ByDEL, "ceph/other"}:                 1,
		{EventAbandoned, BySweeper, "rook-ceph/my-cluster"}: 1,
		{EventRelease, ByOperator, "ceph/other"}:            3,
	}, sums(events))
	st, err := ReadSweepStatus(s.StateDir)
	require.NoError(t, err)
	assert.Equal(t, SweepStatus{PID: 4242, Version: "v0.0.0-3819815", Started: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		Interval: 10 * time.Second, LastRound: time.Date(2026, 12, 1, 10, 5, 0, 123, time.UTC), Error: "round: lock <timeout>", Finished: 2}, *st)
}
