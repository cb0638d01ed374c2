package inuse

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
)

// BenchmarkCheckNode is the in-use check of an unused pin on a large node,
// the figure `make bench` prints: 5,000 processes, 500 mounts (100 of
// them CephFS), 100 rbd devices and 100 CephFS clients, none of them the
// pin's, and a socket table of the pin's netns with no Ceph socket. Every
// one is looked at and nothing is found, as in the DEL of an unused holder.
func BenchmarkCheckNode(b *testing.B) {
	const procs, mounts, volumes = 5000, 500, 100
	f := newFixture(b)
	other := func(int) string { return otherIP4.String() }
	if err := cephfixture.Volumes(f.sysfs, f.debugfs, volumes, other); err != nil {
		b.Fatal(err)
	}
	var lines []string
	for i := range mounts {
		id := 1000 + i
		if i < volumes {
			lines = append(lines, cephfixture.CephMountinfo(id, 100+i,
				fmt.Sprintf("/var/lib/kubelet/plugins/kubernetes.io/csi/cephfs.csi.ceph.com/%064x/globalmount", i),
				fmt.Sprintf("10.0.0.1:6789,10.0.0.2:6789:/volumes/csi/csi-vol-%d", i), "rw,name=csi-cephfs-node,secret=<hidden>,acl"))
			continue
		}
		lines = append(lines, fmt.Sprintf("%d 22 0:%d / /var/lib/kubelet/pods/%032x/volumes/kubernetes.io~projected/kube-api-access rw,relatime shared:%d - tmpfs tmpfs rw,size=65536k", id, 200+i, i, id))
	}
	f.mountinfo(lines...)
	ap := netip.MustParseAddrPort
	var socks []tcpSocket
	for i := range 16 {
		socks = append(socks, tcpSocket{Local: ap(fmt.Sprintf("192.168.20.5:%d", 40000+i)), Remote: ap("10.96.0.1:443"), State: tcpEstablished, Inode: uint64(1000 + i)})
	}
	f.tcp(socks, nil)
	for pid := 100; pid < 100+procs; pid++ {
		f.process(pid, proc{Comm: fmt.Sprintf("worker%d", pid), Netns: f.other,
			FDs: map[int]string{3: fmt.Sprintf("socket:[%d]", 100000+pid), 4: "anon_inode:[eventfd]", 5: "/var/log/x.log"}})
	}
	tg, o := f.selfTarget(ourIP4), f.options(PolicyBlock)
	for b.Loop() {
		refs, err := Check(tg, o)
		if err != nil || len(refs) != 0 {
			b.Fatalf("check of an unused pin: %v, %v", refs, err)
		}
	}
}
