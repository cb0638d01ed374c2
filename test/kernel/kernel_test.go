package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// scenario is one guest scenario and the subtest that reports it, in the
// order the guest runs them (the Rook-style one, which cuts a client, near
// the end).
var scenarios = []struct{ key, subtest string }{
	{"krbd", "1-krbd-through-the-link"},
	{"holder-replace", "2-holder-replaced-under-block-io"},
	{"cephfs", "3-cephfs-kernel-mounts"},
	{"secure", "5-msgr2-secure-mode"},
	{"ipv6", "6-ipv6-storage-network"},
	{"nodeplugin", "8-node-plugin-as-its-own-holder"},
	{"rook-style", "4-rook-style-side-by-side"},
	{"parsers", "7-parsers-read-the-kernels-files"},
}

// images are the rbd images the guest maps, one (or two) per scenario.
var imageKeys = []string{"krbd", "holder-replace", "holder-replace-2", "secure", "rook-style", "nodeplugin", "nodeplugin-2"}

const (
	guestTimeout = 7 * time.Minute
	osdTimeout   = 5 // osd_request_timeout (s) of the I/O scenarios
)

// guestConfig is test/kernel/guest's config.json.
type guestConfig struct {
	MonIP      string            `json:"monIP"`
	FSID       string            `json:"fsid"`
	Subnet     string            `json:"subnet"`
	RangeStart string            `json:"rangeStart"`
	RangeSize  int               `json:"rangeSize"`
	Pool       string            `json:"pool"`
	RBDUser    string            `json:"rbdUser"`
	RBDKey     string            `json:"rbdKey"`
	FSUser     string            `json:"fsUser"`
	FSKey      string            `json:"fsKey"`
	FSName     string            `json:"fsName"`
	Images     map[string]string `json:"images"`
	Scenarios  []string          `json:"scenarios"`
	OSDTimeout int               `json:"osdTimeout"`
	IPv6       struct {
		MonIP      string `json:"monIP"`
		Subnet     string `json:"subnet"`
		RangeStart string `json:"rangeStart"`
		RangeSize  int    `json:"rangeSize"`
		RBDKey     string `json:"rbdKey"`
		Image      string `json:"image"`
	} `json:"ipv6"`
}

// ipv6Prefix is the IPv6 cluster's /64 (a ULA used only inside the
// namespaces of the suite and the guest).
const ipv6Prefix = "fd96:0:0:1"

// guestResult is one entry of the guest's results.json.
type guestResult struct {
	Name     string   `json:"name"`
	Steps    []string `json:"steps"`
	Failures []string `json:"failures"`
	Seconds  float64  `json:"seconds"`
	Row      *struct {
		Design     string  `json:"design"`
		Removal    string  `json:"removal"`
		Ops        int     `json:"ops"`
		During     int     `json:"during"`
		Failed     int     `json:"failed"`
		Mismatches int     `json:"mismatches"`
		LongestMS  float64 `json:"longestMS"`
		Hung       bool    `json:"hung"`
		FirstError string  `json:"firstError"`
	} `json:"row"`
}

var (
	clustersMu sync.Mutex
	clusters   []*cluster // torn down by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, c := range clusters {
		if err := c.down(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// kernels are the guest kernels, by their names in hack/vm/build.sh's
// KERNELS table (which pins each one's Debian package and version): each is
// booted once and runs every scenario, and the files it printed are kept in
// inuse/testdata/kernel/<name>/.
var kernels = []string{"6.1", "6.12"}

// TestKernelClients brings the clusters up once, then boots the guest once
// per kernel, the boots at once (parallel subtests), and reports each of
// its scenarios as a subtest (TestKernelClients/<kernel>/<scenario>).
func TestKernelClients(t *testing.T) {
	require.Zero(t, os.Geteuid(), "the kernel suite needs root (tap, qemu, the Ceph cluster): run `make test` or `go test ./test/kernel/` as root")
	start := time.Now()
	cniPath, cnitool, err := host.DiscoverCNI(repoRoot(), "netns-pin", "bridge", "host-local")
	require.NoError(t, err)
	ctl, err := host.DiscoverCtl(repoRoot())
	require.NoError(t, err)
	work := t.TempDir()
	runner, err := buildRunner(work)
	require.NoError(t, err)
	bins := map[string]string{
		"netns-pin": filepath.Join(cniPath, "netns-pin"), "netns-pinctl": ctl, "bridge": filepath.Join(cniPath, "bridge"),
		"host-local": filepath.Join(cniPath, "host-local"), "cnitool": cnitool, "kernel-guest": runner,
	}
	for _, p := range bins {
		require.NoError(t, checkStatic(p))
	}

	// both clusters at once: the IPv4 one (every scenario but 6) and an
	// IPv6-only one (ms_bind_ipv6) for scenario 6; both serve every kernel
	t0 := time.Now()
	var c, c6 *cluster
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, spec := range []struct {
		dirVar string
		env    []string
		dst    **cluster
	}{{"NETNS_PIN_CEPH_DIR", nil, &c}, {"NETNS_PIN_CEPH6_DIR", []string{"CEPH_IPV6_PREFIX=" + ipv6Prefix}, &c6}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, upLog, err := startCluster(spec.dirVar, spec.env...)
			if err != nil {
				errs[i] = err
				return
			}
			clustersMu.Lock()
			clusters = append(clusters, cl)
			clustersMu.Unlock()
			*spec.dst = cl
			if cl.ours {
				t.Logf("hack/ceph/up.sh %s: up in %.1fs\n%s", strings.Join(spec.env, " "), cl.upTime.Seconds(), host.Tail(strings.TrimSpace(upLog), 2))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...), "Ceph clusters")
	t.Logf("clusters up in %.1fs: mon %s:3300 (IPv4), [%s]:3300 (IPv6)", time.Since(t0).Seconds(), c.monIP, c6.monIP)

	// the boots run at once (much of a boot is waiting on a cut or a
	// replaced client's I/O): each with its own slice of the clusters'
	// client addresses, its own MACs, taps, images and share
	t.Cleanup(func() { t.Logf("kernel suite: %.1fs in all", time.Since(start).Seconds()) })
	for i, k := range kernels {
		g := guestNet{index: i}
		g.v4, err = c.clientSlice(i, len(kernels))
		require.NoError(t, err)
		g.v6, err = c6.clientSlice(i, len(kernels))
		require.NoError(t, err)
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			bootKernel(t, k, g, c, c6, filepath.Join(work, k), bins)
		})
	}
}

// guestNet is what one boot has of the shared clusters' networks: its
// index (its NICs' MACs) and its client addresses on each.
type guestNet struct {
	index  int
	v4, v6 addrSlice
}

// bootKernel runs every scenario in one boot of the guest with kernel k:
// fresh images (a client cut by one boot must not hold the next one's
// exclusive lock), its own taps and share.
func bootKernel(t *testing.T, k string, g guestNet, c, c6 *cluster, work string, bins map[string]string) {
	start := time.Now()
	vmDir, err := buildGuest(k)
	require.NoError(t, err)
	kver, _ := os.ReadFile(filepath.Join(vmDir, "kernel.release"))
	t.Logf("guest kernel %s (%s), hack/vm/build.sh %s: %.1fs", strings.TrimSpace(string(kver)), vmDir, k, time.Since(start).Seconds())

	t0 := time.Now()
	images := map[string]string{}
	var imgList []string
	suffix := host.RandHex(6)
	for _, key := range imageKeys {
		images[key] = "k-" + key + "-" + suffix
		imgList = append(imgList, images[key])
	}
	rbdKey, fsKey, err := c.prepareRBD(imgList)
	require.NoError(t, err, "rbd pool, user and images")
	t.Cleanup(func() { c.removeImages(imgList) })
	image6 := "k-ipv6-" + suffix
	rbdKey6, _, err := c6.prepareRBD([]string{image6})
	require.NoError(t, err, "rbd pool, user and image on the IPv6 cluster")
	t.Cleanup(func() { c6.removeImages([]string{image6}) })
	t.Logf("pool %s, user client.%s, %d images of 64 MiB: %.1fs", rbdPool, rbdUser, len(imgList)+1, time.Since(t0).Seconds())

	var taps []string
	for _, cl := range []*cluster{c, c6} {
		tap, err := addTap(cl.bridge)
		require.NoError(t, err)
		t.Cleanup(func() {
			if r := host.RunCmd(30*time.Second, nil, nil, "ip", "link", "del", tap); r.Err != nil {
				t.Errorf("cleanup: %s", r)
			}
		})
		taps = append(taps, tap)
	}

	share := filepath.Join(work, "share")
	require.NoError(t, os.MkdirAll(share, 0o700))
	gc := guestConfig{
		MonIP: c.monIP, FSID: c.fsid, Subnet: c.subnet, RangeStart: g.v4.start.String(), RangeSize: g.v4.size, Pool: rbdPool,
		RBDUser: rbdUser, RBDKey: rbdKey, FSUser: strings.TrimPrefix(c.client, "client."), FSKey: fsKey, FSName: c.fs,
		Images: images, OSDTimeout: osdTimeout,
	}
	gc.IPv6.MonIP, gc.IPv6.Subnet, gc.IPv6.RangeStart, gc.IPv6.RangeSize, gc.IPv6.RBDKey, gc.IPv6.Image = c6.monIP, c6.subnet, g.v6.start.String(), g.v6.size, rbdKey6, image6
	t.Logf("client addresses: %s (%d), %s (%d)", g.v4.start, g.v4.size, g.v6.start, g.v6.size)
	for _, s := range scenarios {
		gc.Scenarios = append(gc.Scenarios, s.key)
	}
	b, err := json.Marshal(gc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(share, "config.json"), b, 0o600))
	initrd := filepath.Join(work, "initrd.gz")
	require.NoError(t, writeInitrd(initrd, filepath.Join(vmDir, "initramfs.cpio.gz"), bins))

	consolePath := filepath.Join(work, "console.log")
	v, err := startVM(context.Background(), vmDir, initrd, share, taps, g.index, consolePath, guestTimeout)
	require.NoError(t, err)
	t.Cleanup(v.kill)
	vmErr := <-v.done
	console := v.console.String()
	t.Logf("guest %s ran for %.1fs (qemu exit: %v)", k, v.took.Seconds(), vmErr)

	var results []guestResult
	rb, rerr := os.ReadFile(filepath.Join(share, "out", "results.json"))
	if rerr == nil {
		rerr = json.Unmarshal(rb, &results)
	}
	byName := map[string]guestResult{}
	for _, r := range results {
		byName[r.Name] = r
	}
	showConsole := func(t *testing.T) {
		t.Logf("guest console (%s), last lines:\n%s", consolePath, host.Tail(console, 60))
	}
	if vmErr != nil || rerr != nil || strings.Contains(console, "WATCHDOG") {
		showConsole(t)
		t.Errorf("the guest did not finish cleanly: qemu %v, results %v", vmErr, rerr)
	}

	for _, s := range scenarios {
		t.Run(s.subtest, func(t *testing.T) {
			r, ok := byName[s.key]
			if !ok {
				showConsole(t)
				t.Fatalf("scenario %s did not finish in the guest", s.key)
			}
			t.Logf("%s in the guest (%.1fs):\n%s", s.key, r.Seconds, strings.Join(r.Steps, "\n"))
			for _, f := range r.Failures {
				t.Error(f)
			}
			if s.key == "parsers" {
				compareCapture(t, k, filepath.Join(share, "out", "capture"))
			}
			if t.Failed() {
				showConsole(t)
			}
		})
	}
	printTable(t, k, byName)
	t.Logf("kernel %s: %.1fs from the image build to the table", k, time.Since(start).Seconds())
}

// printTable prints the side-by-side table, as test/ceph prints its own.
func printTable(t *testing.T, k string, byName map[string]guestResult) {
	var b strings.Builder
	b.WriteString("\n| holder design (kernel " + k + ", krbd, O_DIRECT write+read-back, osd_request_timeout=" + fmt.Sprint(osdTimeout) + "s) | what happened to the holder | operations | failed | mismatches | longest operation |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|\n")
	n := 0
	for _, key := range []string{"holder-replace", "rook-style"} {
		r := byName[key].Row
		if r == nil {
			continue
		}
		n++
		longest := (time.Duration(r.LongestMS*1000) * time.Microsecond).Round(10 * time.Millisecond).String()
		if r.Hung {
			longest += " (still blocked: hung)"
		}
		failed := fmt.Sprint(r.Failed)
		if r.FirstError != "" {
			failed += " (" + r.FirstError + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %d (%d after removal began) | %s | %d | %s |\n", r.Design, r.Removal, r.Ops, r.During, failed, r.Mismatches, longest)
	}
	t.Log(b.String())
	if n != 2 {
		t.Errorf("the table needs both designs' rows, has %d", n)
	}
}
