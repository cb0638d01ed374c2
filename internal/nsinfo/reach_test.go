package nsinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fixtureMounts(t *testing.T, name string) []*mountinfo.Info {
	t.Helper()
	m, err := readMounts(filepath.Join("testdata", name+".mountinfo"))
	require.NoError(t, err)
	require.NotEmpty(t, m)
	return m
}

// The peer-group check on mountinfo of a Multus daemon's delegate against a
// node's: only a Bidirectional pinDir volume passes, and every refusal names
// the volume to add.
func TestReach(t *testing.T) {
	host := fixtureMounts(t, "host")
	for _, tc := range []struct {
		fixture, dir string
		ok           bool
		why          string // in the error
	}{
		{"thick-bidirectional", "/var/lib/netns-pin", true, ""},
		{"thick-bidirectional", "/var/lib/netns-pin/", true, ""},
		{"thick-host-to-container", "/var/lib/netns-pin", false, "a slave (master:1)"},
		{"thick-no-volume", "/var/lib/netns-pin", false, "on the mount at /, which is a slave"},
		{"thick-own-group", "/var/lib/netns-pin", false, "peer group 917, which no mount of the host belongs to"},
		{"private", "/var/lib/netns-pin", false, "which is private"},
		// A folder next to the volume is not in it.
		{"thick-bidirectional", "/var/lib/netns-pin2", false, "on the mount at /, which is a slave"},
		// The host's root is in peer group 1 too, but the check is of the
		// mount holding the folder here, not of any peer.
		{"thick-bidirectional", "/run/netns-pin", false, "on the mount at /run"},
	} {
		t.Run(tc.fixture+tc.dir, func(t *testing.T) {
			err := reach(tc.dir, fixtureMounts(t, tc.fixture), host)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errNoPropagation)
			assert.Contains(t, err.Error(), tc.why)
			want := "/hostroot" + strings.TrimSuffix(filepath.Clean(tc.dir), "/") + " in Multus' DaemonSet) with mountPropagation: Bidirectional"
			assert.Contains(t, err.Error(), want, "the error names the volume to add")
		})
	}
}

// A peer group the host has, but whose host mount does not show the
// folder's part of the filesystem, does not carry pins to the host.
func TestReachPeerMustShowTheFolder(t *testing.T) {
	host := []*mountinfo.Info{{Mountpoint: "/srv", Root: "/srv", Optional: "shared:1"}}
	err := reach("/var/lib/netns-pin", fixtureMounts(t, "thick-bidirectional"), host)
	require.ErrorIs(t, err, errNoPropagation)
}

// A missing or unreadable mountinfo is an error, never a pass.
func TestReachMissingMountinfo(t *testing.T) {
	_, err := readMounts(filepath.Join(t.TempDir(), "mountinfo"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Error(t, reach("/var/lib/netns-pin", nil, fixtureMounts(t, "host")), "no mount holds the folder")
}

// This test process runs in the host mount namespace: the check passes
// without reading mountinfo, whatever the folder's mount.
func TestPinsReachHostInHostNamespace(t *testing.T) {
	ref, same, err := HostMountNS()
	require.NoError(t, err)
	require.True(t, same, "tests run in the host mount namespace (compared with %s)", ref)
	require.NoError(t, PinsReachHost(t.TempDir()))
}
