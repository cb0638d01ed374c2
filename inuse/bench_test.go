package inuse

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/cephfixture"
)

// BenchmarkCheck measures a check on a node with n rbd devices (half of them
// the pin's, sharing two clients), n CephFS clients with status (half the
// pin's), n ceph mountinfo entries, a few dozen
// processes and a socket table with candidates (so descriptors are scanned).
// "debugfs" is the normal path; "mountinfo" the one without debugfs.
// ns/ref is the time per check divided by n.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 4096} {
		f := benchFixture(b, n)
		tg := f.selfTarget(ourIP4)
		for _, v := range []struct {
			name    string
			debugfs string
		}{{"debugfs", f.debugfs}, {"mountinfo", filepath.Join(f.root, "no-debugfs")}} {
			o := f.options(PolicyBlock)
			o.Debugfs = v.debugfs
			b.Run(fmt.Sprintf("n=%d/%s", n, v.name), func(b *testing.B) {
				b.ReportAllocs()
				var refs []Reference
				cpu0 := cpuTime(b)
				for b.Loop() {
					var err error
					if refs, err = Check(tg, o); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/ref")
				// CPU time (user+system, all threads) is steadier than
				// wall time on a shared machine.
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(len(refs)), "refs")
			})
		}
	}
}

func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func benchFixture(b *testing.B, n int) *fixture {
	b.Helper()
	f := newFixture(b)
	ip := func(i int) string {
		if i%2 == 0 {
			return ourIP4.String()
		}
		return otherIP4.String()
	}
	// Two krbd clients, ours and the other's.
	require.NoError(b, cephfixture.Volumes(f.sysfs, f.debugfs, n, ip))
	var mounts []string
	for i := range n {
		mounts = append(mounts, fmt.Sprintf("%d 22 0:%d / /var/lib/kubelet/plugins/kubernetes.io/csi/cephfs.csi.ceph.com/%064x/globalmount rw,relatime shared:%d - ceph 10.0.0.1:6789,10.0.0.2:6789,10.0.0.3:6789:/volumes/csi/csi-vol-%d/%064x rw,name=csi-cephfs-node,secret=<hidden>,acl,mds_namespace=myfs", 1000+i, 100+i, i, 100+i, i, i))
	}
	f.mountinfo(strings.Join(mounts, "\n"))
	ap := netip.MustParseAddrPort
	var socks []tcpSocket
	for i := range 16 {
		socks = append(socks, tcpSocket{Local: ap(fmt.Sprintf("192.168.20.5:%d", 40000+i)), Remote: ap(fmt.Sprintf("10.0.0.%d:%d", 1+i%3, 6800+i)), State: tcpEstablished, Inode: uint64(1000 + i)})
	}
	socks = append(socks, tcpSocket{Local: ap("192.168.20.5:39999"), Remote: ap("10.0.0.1:443"), State: tcpEstablished, Inode: 999})
	f.tcp(socks, nil)
	for pid := 100; pid < 164; pid++ {
		p := proc{Comm: fmt.Sprintf("daemon%d", pid), Netns: f.other, FDs: map[int]string{3: "socket:[77]", 4: "anon_inode:[eventfd]", 5: "/var/log/x.log"}}
		if pid%32 == 0 {
			p.Netns = selfNetns
			p.FDs[6] = fmt.Sprintf("socket:[%d]", 1000+pid/32)
		}
		f.process(pid, p)
	}
	refs, err := Check(f.selfTarget(ourIP4), f.options(PolicyBlock))
	require.NoError(b, err)
	require.Len(b, refs, (n+1)/2+(n+1)/2+2+14)
	return f
}
