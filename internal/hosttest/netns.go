package hosttest

import (
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/netns-pin/netns-pin/internal/host"
)

// StatNS is host.NSIDOf that fails the test on error.
func StatNS(t *testing.T, path string) host.NSID {
	t.Helper()
	id, err := host.NSIDOf(path)
	require.NoError(t, err, "stat %s", path)
	return id
}

// NetnsHandle is a named network namespace made with `ip netns add`, as a
// container runtime makes a pod's.
type NetnsHandle struct {
	Name string
	Path string // /run/netns/<Name>
	ID   host.NSID
}

// Exists reports whether the namespace's name is still there.
func (n *NetnsHandle) Exists() bool {
	_, err := os.Lstat(n.Path)
	return err == nil
}

// NewNetns makes a network namespace named <prefix>-<random>, with lo up,
// deleted at cleanup unless the test deleted it already.
func NewNetns(t *testing.T, prefix string) *NetnsHandle {
	t.Helper()
	return NewNetnsWithAddr(t, prefix, "")
}

// NewNetnsWithAddr is NewNetns with, when cidr is not empty, a veth end eth0
// inside the namespace that has cidr (see host.AddNetns).
func NewNetnsWithAddr(t *testing.T, prefix, cidr string) *NetnsHandle {
	t.Helper()
	n := &NetnsHandle{Name: prefix + "-" + host.RandHex(8)}
	t.Cleanup(func() {
		if err := host.DelNetns(n.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	var err error
	n.Path, err = host.AddNetns(n.Name, cidr)
	require.NoError(t, err)
	n.ID = StatNS(t, n.Path)
	return n
}

// Delete removes the namespace's name, as a runtime does when it removes a
// sandbox (the namespace lives on while anything pins or holds it).
func (n *NetnsHandle) Delete(t *testing.T) {
	t.Helper()
	MustRun(t, "ip", "netns", "del", n.Name)
	_, err := os.Lstat(n.Path)
	require.True(t, os.IsNotExist(err), "%s still exists after ip netns del", n.Path)
}

// StartInNetns starts name with args inside the network namespace at path
// (host.StartInNetns) and stops it at cleanup.
func StartInNetns(t *testing.T, path, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd, err := host.StartInNetns(path, name, args...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := host.Stop(cmd); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return cmd
}

// AddrsIn lists the global IPv4/IPv6 addresses of ifname in the netns at
// path (none when the interface is missing).
func AddrsIn(t *testing.T, path, ifname string) []string {
	t.Helper()
	h := NetlinkHandle(t, path)
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err != nil {
		return nil
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	require.NoError(t, err)
	var out []string
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
			out = append(out, ip.Unmap().String())
		}
	}
	return out
}

// NetlinkHandle is a netlink handle in the netns at path; the caller
// closes it.
func NetlinkHandle(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	require.NoError(t, err, "open netns %s", path)
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	require.NoError(t, err, "netlink handle in %s", path)
	return h
}
