package ceph

// Host-side helpers of this suite only: UUIDs, polling, the mount at a path,
// process names. Those the suites share are in internal/hosttest and internal/host.

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

func newUUID() string {
	return fmt.Sprintf("%s-%s-4%s-a%s-%s", host.RandHex(8), host.RandHex(4), host.RandHex(3), host.RandHex(3), host.RandHex(12))
}

// mountedAt returns the filesystem type mounted at path ("" when none).
func mountedAt(t *testing.T, path string) string {
	t.Helper()
	return mountAt(t, path).FSType
}

// mountAt returns the top mount at path (zero when none).
func mountAt(t *testing.T, path string) hosttest.MountEntry {
	t.Helper()
	var top hosttest.MountEntry
	for _, m := range hosttest.ReadMountinfo(t) {
		if m.Mountpoint == path {
			top = m // the last one is on top
		}
	}
	return top
}

// procComm returns /proc/<pid>/comm.
func procComm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
