package runtime

// whereabouts as its users run it, against the suite's kube-apiserver: the
// CNI binary as the IPAM of a storage network (netSpec.whereabouts), and its
// stock controller, ip-control-loop (cmd/controlloop of the same module and
// version, both built by hack/kube/build.sh into .cache/kube/whereabouts-<v>),
// as whereabouts' doc/crds/daemonset-install.yaml runs it on a node:
//
//   - its CRDs (the module's doc/crds copies hack/kube/build.sh keeps) and
//     its ServiceAccount, ClusterRole and ClusterRoleBinding from
//     daemonset-install.yaml as they are;
//   - the CNI binary's kubeconfig and flat file as whereabouts' install-cni.sh
//     writes them on the node (script/lib.sh): the ServiceAccount's token, the
//     API server's CA, namespace kube-system;
//   - the controller with rest.InClusterConfig, which reads
//     KUBERNETES_SERVICE_HOST/PORT and the token and CA at
//     /var/run/secrets/kubernetes.io/serviceaccount, its reconciler's
//     schedule from /cron-schedule/config (the DaemonSet's ConfigMap) and
//     the flat file from /host/etc/cni/net.d/whereabouts.d: those absolute
//     paths are a root of its own, chrooted into, as its container's image
//     would be (the binary alone, the mounted files beside it), with
//     NODENAME (spec.nodeName: its pod informer sees that node's pods) and
//     WHEREABOUTS_NAMESPACE of its DaemonSet. Its reconciler runs every
//     couple of seconds instead of daily, so a scenario can wait for a run.
//
// What the controller does (pkg/controlloop/pod.go): a pod informer whose
// DeleteFunc, when a pod's object leaves the API, reads the pod's
// network-status annotation (Multus writes it), the NetworkAttachmentDefinition
// of each interface and its IPPool, and deallocates every allocation whose
// podref is the pod, with an Event IPAddressGarbageCollected on it. The
// reconciler (pkg/reconciler) frees every allocation whose pod is not in
// the API or does not list the address in its network-status.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/netns-pin/netns-pin/deploy"
	"github.com/netns-pin/netns-pin/internal/host"
)

const (
	// whereaboutsNS is where whereabouts' ServiceAccount, its IPPools and its
	// leader-election lease are (WHEREABOUTS_NAMESPACE of its DaemonSet).
	whereaboutsNS = "kube-system"
	whereaboutsSA = "whereabouts"
	// whereaboutsSchedule is the reconciler's schedule here (upstream's
	// default is daily, "30 4 * * *"; robfig/cron takes descriptors).
	whereaboutsSchedule = "@every 2s"
	// reconcilerTimeout bounds the wait for one reconciler run.
	reconcilerTimeout = 30 * time.Second
	// controllerComponent is the source of the controller's Events.
	controllerComponent = "pod-ip-controlloop"
	// garbageCollected is the reason of its Event for a freed address.
	garbageCollected = "IPAddressGarbageCollected"
)

// whereaboutsFiles is what the suite's API server and runtimes share of
// whereabouts: the folder of hack/kube/build.sh and the CNI binary's
// credentials.
type whereaboutsFiles struct {
	bin   string // .cache/kube/whereabouts-<v>: whereabouts, ip-control-loop, CRDs, daemonset-install.yaml
	token string // a token of the ServiceAccount
	ca    []byte // the API server's serving certificate
}

var whereaboutsSetup fixture[whereaboutsFiles]

// requireWhereabouts installs whereabouts in the API server on first use
// and links its CNI binary into the runtime's CNI bin folder.
func (s *suite) requireWhereabouts(t *testing.T) *whereaboutsFiles {
	t.Helper()
	w, err := whereaboutsSetup.get(func() (*whereaboutsFiles, error) { return s.api.installWhereabouts(s.repo) })
	require.NoError(t, err, "whereabouts in the suite's API server")
	link := filepath.Join(s.cniBin, "whereabouts")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		require.NoError(t, os.Symlink(filepath.Join(w.bin, "whereabouts"), link))
	}
	return w
}

// installWhereabouts applies whereabouts' CRDs and its RBAC as it ships
// them, and takes a token of its ServiceAccount.
func (k *kubeAPI) installWhereabouts(repo string) (*whereaboutsFiles, error) {
	dirs, err := filepath.Glob(filepath.Join(repo, ".cache", "kube", "whereabouts-v*"))
	if err != nil || len(dirs) != 1 {
		return nil, fmt.Errorf("whereabouts (.cache/kube/whereabouts-<version>) is missing: run hack/kube/build.sh (make tools)")
	}
	w := &whereaboutsFiles{bin: dirs[0]}
	for _, b := range []string{"whereabouts", "ip-control-loop"} {
		if err := host.CheckExecutable(filepath.Join(w.bin, b)); err != nil {
			return nil, fmt.Errorf("%w: run hack/kube/build.sh (make tools)", err)
		}
	}
	crds, _ := filepath.Glob(filepath.Join(w.bin, "whereabouts.cni.cncf.io_*.yaml"))
	if len(crds) < 2 {
		return nil, fmt.Errorf("whereabouts' CRDs (%s/whereabouts.cni.cncf.io_*.yaml) are missing: run hack/kube/build.sh", w.bin)
	}
	args := []string{"apply"}
	for _, c := range crds {
		args = append(args, "-f", c)
	}
	if r := k.kubectl(nil, args...); r.Err != nil {
		return nil, errors.New(r.String())
	}
	if r := k.kubectl(nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/ippools.whereabouts.cni.cncf.io", "crd/overlappingrangeipreservations.whereabouts.cni.cncf.io"); r.Err != nil {
		return nil, errors.New(r.String())
	}
	if err := k.ensureNamespace(whereaboutsNS); err != nil {
		return nil, err
	}
	rbac, err := manifestObjects(filepath.Join(w.bin, "daemonset-install.yaml"), "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
	if err != nil {
		return nil, fmt.Errorf("%w (hack/kube/build.sh copies it from the module)", err)
	}
	if r := k.kubectl(rbac, "apply", "-f", "-"); r.Err != nil {
		return nil, fmt.Errorf("whereabouts' RBAC: %s", r)
	}
	r := k.kubectl(nil, "-n", whereaboutsNS, "create", "token", whereaboutsSA, "--duration=2h")
	if r.Err != nil {
		return nil, fmt.Errorf("token of %s/%s: %s", whereaboutsNS, whereaboutsSA, r)
	}
	w.token = strings.TrimSpace(r.Stdout)
	if w.ca, err = os.ReadFile(filepath.Join(k.dir, "certs", "apiserver.crt")); err != nil {
		return nil, err
	}
	return w, nil
}

// manifestObjects returns the documents of the manifest at path whose kind
// is one of kinds (every document when none is given) as one JSON List for
// kubectl apply.
func manifestObjects(path string, kinds ...string) ([]byte, error) {
	objs, err := deploy.Objects(path)
	if err != nil {
		return nil, err
	}
	var items []any
	for _, o := range objs {
		if len(kinds) == 0 || slices.Contains(kinds, fmt.Sprint(o["kind"])) {
			items = append(items, o)
		}
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%s has no document of kind %v", path, kinds)
	}
	return json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
}

// writeNodeFiles writes what whereabouts' install-cni.sh writes into a
// node's whereabouts.d: the kubeconfig of the CNI binary and the flat file
// (with a log file, at debug level, for the scenarios to read). It returns
// their paths.
func (w *whereaboutsFiles) writeNodeFiles(dir, apiURL, logFile string) (kubeconfig, flat string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	kubeconfig, flat = filepath.Join(dir, "whereabouts.kubeconfig"), filepath.Join(dir, "whereabouts.conf")
	if err := writeJSON(kubeconfig, map[string]any{
		"apiVersion": "v1", "kind": "Config",
		"clusters": []any{map[string]any{"name": "local", "cluster": map[string]any{
			"server": apiURL, "certificate-authority-data": base64.StdEncoding.EncodeToString(w.ca)}}},
		"users": []any{map[string]any{"name": "whereabouts", "user": map[string]any{"token": w.token}}},
		"contexts": []any{map[string]any{"name": "whereabouts-context", "context": map[string]any{
			"cluster": "local", "user": "whereabouts", "namespace": whereaboutsNS}}},
		"current-context": "whereabouts-context",
	}); err != nil {
		return "", "", err
	}
	err = writeJSON(flat, map[string]any{
		"datastore": "kubernetes", "kubernetes": map[string]any{"kubeconfig": kubeconfig},
		"reconciler_cron_expression": whereaboutsSchedule, "log_file": logFile, "log_level": "debug",
	})
	return kubeconfig, flat, err
}

// wbAllocation is one address of a whereabouts IPPool (spec.allocations,
// keyed by the address' offset in the range).
type wbAllocation struct {
	ID     string `json:"id"`
	PodRef string `json:"podref"`
	IfName string `json:"ifname,omitempty"`
}

// poolName is the IPPool of the network's range (no network_name: the
// range, normalized, pkg/storage/kubernetes IPPoolName).
func (sn *storageNet) poolName() string {
	return strings.NewReplacer("/", "-", ":", "-").Replace(sn.subnet)
}

// pool returns the allocations of the network's IPPool (none when it does
// not exist yet).
func (sn *storageNet) pool(t *testing.T) map[string]wbAllocation {
	t.Helper()
	r := sn.s.api.kubectl(nil, "-n", whereaboutsNS, "get", "ippools.whereabouts.cni.cncf.io", sn.poolName(), "-o", "json")
	if r.Err != nil && strings.Contains(r.Stderr, "NotFound") {
		return map[string]wbAllocation{}
	}
	require.NoError(t, r.Err, "kubectl get ippool %s: %s", sn.poolName(), r)
	var p struct {
		Spec struct {
			Allocations map[string]wbAllocation `json:"allocations"`
		} `json:"spec"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &p))
	if p.Spec.Allocations == nil {
		return map[string]wbAllocation{}
	}
	return p.Spec.Allocations
}

// leaseOf returns the pool's allocations whose podref is the pod, by offset.
func (sn *storageNet) leaseOf(t *testing.T, sb *sandbox) map[string]wbAllocation {
	t.Helper()
	got := map[string]wbAllocation{}
	for off, a := range sn.pool(t) {
		if a.PodRef == sb.ns+"/"+sb.name {
			got[off] = a
		}
	}
	return got
}

// requireLease checks that the pod holds exactly one allocation, of its
// sandbox and storage interface, at its address, and returns it.
func (sn *storageNet) requireLease(t *testing.T, sb *sandbox) map[string]wbAllocation {
	t.Helper()
	l := sn.leaseOf(t, sb)
	require.Len(t, l, 1, "whereabouts' allocations of %s", sb)
	for off, a := range l {
		assert.Equal(t, sb.id, a.ID, "the allocation's container ID")
		assert.Equal(t, sb.ifname, a.IfName)
		assert.Equal(t, sb.storageIP, sn.offsetIP(t, off), "the allocation's address")
	}
	return l
}

// offsetIP is the address at offset off of the network's /24.
func (sn *storageNet) offsetIP(t *testing.T, off string) string {
	t.Helper()
	n, err := strconv.Atoi(off)
	require.NoError(t, err)
	return strings.TrimSuffix(sn.subnet, "0/24") + strconv.Itoa(n)
}

// othersOf returns the pool's allocations of every pod but sb.
func (sn *storageNet) othersOf(t *testing.T, sb *sandbox) map[string]wbAllocation {
	t.Helper()
	got := sn.pool(t)
	for off, a := range got {
		if a.PodRef == sb.ns+"/"+sb.name {
			delete(got, off)
		}
	}
	return got
}

// cniDeallocations counts the whereabouts CNI binary's deallocations of ip
// in its log (log_file of the flat file, debug level:
// pkg/allocate DeallocateIP logs each one).
func (sn *storageNet) cniDeallocations(ip string) int {
	return countLines(sn.whereaboutsLog, "Deallocating given previously used IP: "+ip)
}

// countLines counts the lines of the file that end with suffix.
func countLines(path, suffix string) int {
	b, _ := os.ReadFile(path)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), suffix) {
			n++
		}
	}
	return n
}

// wbController is ip-control-loop running for one node.
type wbController struct {
	node string
	log  string
}

// startWhereaboutsController starts whereabouts' controller for node (its
// Node object must exist: the pod informer looks it up) and waits until
// its informers have synced and its reconciler is scheduled. It stops it
// when the test ends.
func (s *suite) startWhereaboutsController(t *testing.T, w *whereaboutsFiles, node string) *wbController {
	t.Helper()
	dir := s.testDir(t)
	root := filepath.Join(dir, "root")
	sa := filepath.Join(root, "var", "run", "secrets", "kubernetes.io", "serviceaccount")
	netd := filepath.Join(root, "host", "etc", "cni", "net.d", "whereabouts.d")
	for _, d := range []string{sa, netd, filepath.Join(root, "cron-schedule"), filepath.Join(root, "tmp")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, copyFile(filepath.Join(w.bin, "ip-control-loop"), filepath.Join(root, "ip-control-loop"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sa, "token"), []byte(w.token), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(sa, "ca.crt"), w.ca, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(sa, "namespace"), []byte(whereaboutsNS), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "cron-schedule", "config"), []byte(whereaboutsSchedule), 0o644))
	// The flat file install-cni.sh writes (script/lib.sh generateWhereaboutsConf).
	require.NoError(t, writeJSON(filepath.Join(netd, "whereabouts.conf"), map[string]any{
		"datastore": "kubernetes", "kubernetes": map[string]any{"kubeconfig": "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"},
		"reconciler_cron_expression": whereaboutsSchedule,
	}))

	c := &wbController{node: node, log: filepath.Join(dir, "ip-control-loop.log")}
	logf, err := os.Create(c.log)
	require.NoError(t, err)
	defer logf.Close()
	// As the DaemonSet's container runs it (command /ip-control-loop
	// -log-level debug; env NODENAME, WHEREABOUTS_NAMESPACE and the
	// kubernetes Service's address, here the API server on the loopback).
	cmd := exec.Command("/ip-control-loop", "-log-level", "debug")
	cmd.Dir = "/"
	cmd.Env = []string{"NODENAME=" + node, "WHEREABOUTS_NAMESPACE=" + whereaboutsNS,
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=" + strings.TrimPrefix(s.api.url, "https://127.0.0.1:")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// its signal handler takes SIGINT (os.Interrupt) only; SIGTERM, as
		// the kubelet sends, ends it
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(c.log)
			t.Logf("ip-control-loop log (tail):\n%s", host.Tail(string(b), 60))
		}
	})
	// It logs "starting network controller", waits for its informers'
	// caches (pods of its node, NADs, IPPools), then reads its schedule
	// ("using expression: ..."): from then on it sees a deleted pod.
	var b []byte
	ok := host.Poll(readyTimeout, 50*time.Millisecond, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		b, _ = os.ReadFile(c.log)
		return bytes.Contains(b, []byte("starting network controller")) && bytes.Contains(b, []byte("using expression: "))
	})
	select {
	case <-exited:
		b, _ = os.ReadFile(c.log)
		t.Fatalf("whereabouts' controller exited (%v):\n%s", waitErr, host.Tail(string(b), 30))
	default:
	}
	require.True(t, ok, "whereabouts' controller did not start within %s:\n%s", readyTimeout, host.Tail(string(b), 30))
	return c
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// lines returns the controller's log lines from byte offset mark on, and
// the offset its log ends at.
func (c *wbController) lines(t *testing.T, mark int64) ([]string, int64) {
	t.Helper()
	b, err := os.ReadFile(c.log)
	require.NoError(t, err)
	if int64(len(b)) < mark {
		mark = int64(len(b))
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b[mark:]))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, int64(len(b))
}

// mark is where the controller's log ends now.
func (c *wbController) mark(t *testing.T) int64 {
	t.Helper()
	_, end := c.lines(t, 0)
	return end
}

// waitReconcilerRun waits until the reconciler has started a run after
// this call and finished it, and fails the test if that run failed. What
// the reconciler would free is what that run freed: a scenario asserts its
// leases right after it.
func (c *wbController) waitReconcilerRun(t *testing.T) {
	t.Helper()
	mark, since := c.mark(t), time.Now()
	var result string
	ok := host.Poll(reconcilerTimeout, 50*time.Millisecond, func() bool {
		ls, _ := c.lines(t, mark)
		var ended bool
		result, ended = host.WhereaboutsReconcilerRun(ls)
		return ended
	})
	require.True(t, ok, "no whereabouts reconciler run started and finished within %s", reconcilerTimeout)
	require.Contains(t, result, "reconciler success", "the reconciler's run failed")
	t.Logf("whereabouts' reconciler ran (%s after the wait began)", time.Since(since).Round(time.Millisecond))
}

// waitDeleteHandled waits until the controller's pod informer has seen the
// object of sb leave the API ("deleted pod [ns/name]") and its worker has
// handled it and every deletion queued after it (one "result of garbage
// collecting pods" line each: one worker, first in first out), and returns
// the log lines from mark on.
func (c *wbController) waitDeleteHandled(t *testing.T, sb *sandbox, mark int64) []string {
	t.Helper()
	var ls []string
	ok := host.Poll(30*time.Second, 50*time.Millisecond, func() bool {
		ls, _ = c.lines(t, mark)
		seen, deleted, results := false, 0, 0
		for _, l := range ls {
			seen = seen || strings.Contains(l, "deleted pod ["+sb.ns+"/"+sb.name+"]")
			switch {
			case !seen:
			case strings.Contains(l, "deleted pod ["):
				deleted++
			case strings.Contains(l, "result of garbage collecting pods"):
				results++
			}
		}
		return seen && results >= deleted
	})
	require.True(t, ok, "whereabouts' controller did not handle the deletion of %s", sb)
	return ls
}

// controllerEvents returns the controller's Events on the pod of sb.
func (k *kubeAPI) controllerEvents(t *testing.T, sb *sandbox, reason string) []corev1.Event {
	t.Helper()
	evs, err := k.events(sb.ns, sb.uid)
	require.NoError(t, err)
	var out []corev1.Event
	for _, e := range evs {
		if e.Source.Component == controllerComponent && (reason == "" || e.Reason == reason) {
			out = append(out, e)
		}
	}
	return out
}

// requireControllerFrees shows that the controller is live and has
// handled every event of its node's pods up to now: the object of app, a
// pod on the network that is no holder and carries no finalizer, is
// force-deleted while its sandbox runs; the controller's informer sees it
// go (its events come in the order of the API server's writes, so by then
// it has seen every deletion made before) and frees its lease (its Event
// IPAddressGarbageCollected on app), as it would free a holder's without
// the finalizer. (Should the reconciler's run land between the delete and
// the controller, the reconciler frees it first, which its log says, and
// the controller finds nothing.) Then app's sandbox is torn down (stop):
// whereabouts' DEL finds nothing left to free.
func (c *wbController) requireControllerFrees(t *testing.T, sn *storageNet, app *sandbox, stop func()) {
	t.Helper()
	sn.requireLease(t, app)
	mark, start := c.mark(t), time.Now()
	require.NoError(t, sn.s.api.finalDelete(app.ns, app.name), "kubectl delete --force --grace-period=0 of %s", app)
	c.waitDeleteHandled(t, app, mark)
	require.True(t, host.Poll(30*time.Second, 50*time.Millisecond, func() bool { return len(sn.leaseOf(t, app)) == 0 }),
		"whereabouts did not free the lease of the force-deleted %s", app)
	var evs []corev1.Event
	if host.Poll(5*time.Second, 50*time.Millisecond, func() bool {
		evs = sn.s.api.controllerEvents(t, app, garbageCollected)
		return len(evs) > 0
	}) {
		assert.Contains(t, evs[0].Message, "["+app.storageIP+"]")
		t.Logf("whereabouts' controller freed %s of the force-deleted %s %s after its delete: %s",
			app.storageIP, app, time.Since(start).Round(time.Millisecond), evs[0].Message)
	} else {
		ls, _ := c.lines(t, mark)
		byReconciler := slices.ContainsFunc(ls, func(l string) bool {
			return strings.Contains(l, "successfully cleanup IPs: ") && (strings.Contains(l, app.storageIP+"]") || strings.Contains(l, app.storageIP+" "))
		})
		require.True(t, byReconciler, "the lease of %s went, but neither whereabouts' controller (no %s Event) nor its reconciler freed it", app, garbageCollected)
		t.Logf("whereabouts' reconciler ran between the delete of %s and its controller, and freed %s first", app, app.storageIP)
	}
	stop()
}
