package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/netnsstore"
)

func TestInUseErrorIsOneReadableLineWithCode11(t *testing.T) {
	c, err := conf.Parse([]byte(`{}`))
	require.NoError(t, err)
	rec := &netnsstore.Record{Attachment: "abc.net1", Cluster: "rook-ceph/my-cluster", PodNS: "rook-ceph", PodName: "csi-holder-x"}
	refs := []string{"rbd0 replicapool/csi-vol-1 client4161 192.168.20.5", "rbd1 replicapool/csi-vol-2 client4161 192.168.20.5", "process 42 (ceph-fuse)"}
	err = inUseCNIError(&netnsstore.InUseError{Record: rec, References: refs}, c)
	var cniErr *types.Error
	require.True(t, errors.As(err, &cniErr))
	assert.Equal(t, types.ErrTryAgainLater, cniErr.Code)
	assert.NotContains(t, cniErr.Msg, "\n")
	for _, want := range []string{"rook-ceph/my-cluster", "rook-ceph/csi-holder-x", refs[0], refs[1], "and 1 more", "netns-pinctl inuse abc.net1"} {
		assert.Contains(t, cniErr.Msg, want)
	}
	assert.NotContains(t, cniErr.Msg, refs[2], "only the first references are in the message")
	assert.Equal(t, strings.Join(refs, "; "), cniErr.Details, "details list every reference, on one line")

	c.StateDir, c.PinDir, c.InUse.Sysfs = "/srv/state", "/srv/pins", "/host/sys"
	err = inUseCNIError(&netnsstore.InUseError{Record: rec, References: refs[:1]}, c)
	require.True(t, errors.As(err, &cniErr))
	assert.Contains(t, cniErr.Msg, "netns-pinctl --pin-dir /srv/pins --state-dir /srv/state --sysfs /host/sys inuse abc.net1",
		"the command finds the same pin and reads the same kernel files")
	assert.NotContains(t, cniErr.Msg, "more")
}
