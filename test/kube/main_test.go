package kube

// The suite's cluster: hack/kube/up.sh on first use, hack/kube/down.sh at
// the end, and the helpers every scenario uses (kubectl, the manifests of
// deploy/ with their names and addresses patched, what netns-pin leaves on
// the node).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/deploy"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

const (
	upTimeout  = 40 * time.Minute // from nothing: Kubernetes builds in ~10 min on 2 cores
	cmdTimeout = 2 * time.Minute
	// downTimeout bounds hack/kube/down.sh (13 s here), so that a process
	// that does not stop cannot hold the suite until CI's limit.
	downTimeout = 5 * time.Minute
	// podTimeout bounds a pod's start or a DaemonSet's rollout step.
	podTimeout = 2 * time.Minute
	// releaseTimeout bounds the release of a holder once unused: the kubelet
	// retries a failed KillPod on its pod worker's backoff, at most a
	// minute or so apart (plus the sync period), so one retry fits.
	releaseTimeout = 3 * time.Minute
	// pinNamespace is where the holders run and what the NADs of deploy/
	// list in cniArgsNamespaces.
	pinNamespace = "rook-ceph"
	storageIf    = "net1"
)

// cluster is the running Kubernetes shared by every test.
type cluster struct {
	repo       string
	env        map[string]string // .cache/kube/env
	kubectlBin string
	kubeconfig string
	crictl     string
	crictlConf string
	pinBin     string // the binary the installer put into the node's CNI bin dir
	ctl        string // netns-pinctl of make image, the sweep container's
	pinDir     string // the NADs' pinDir: the kubelet's plugins folder, as on a real node
	stateDir   string
	owned      bool // up.sh started it: down.sh removes it at the end

	// The node this view of the cluster looks at (pods, sandboxes,
	// records, pins): node 1, the host, unless viewOf made it another.
	nodeN    int
	nodeName string
	root     string // the node's files as the host reaches them; "" on node 1
}

// shared is the cluster every test uses.
var shared hosttest.Shared[cluster]

// kubeEnvKeys are what hack/kube/up.sh writes to .cache/kube/env.
var kubeEnvKeys = []string{"KUBECTL", "KUBECONFIG", "KUBE_DIR", "KUBELET_DIR", "KUBE_CNI_BIN_DIR", "KUBE_CRICTL_CONFIG",
	"KUBE_STORAGE_MASTER", "KUBE_STORAGE_SUBNET", "KUBE_WHEREABOUTS_CONF", "KUBE_BUSYBOX_IMAGE",
	"KUBE_IMAGE", "KUBE_IMAGE_ARCHIVE", "KUBE_IMAGE_BIN_DIR", "KUBE_REGISTRY", "KUBE_UPGRADE_FROM", "KUBE_UPGRADE_FROM_IMAGE", "KUBE_NODE", "KUBE_MULTUS"}

func TestMain(m *testing.M) {
	shared.Main(m, "kube", func(c *cluster) error {
		if !c.owned {
			return nil
		}
		return c.down()
	})
}

// requireCluster returns the running cluster, making it on first use. It
// fails (never skips) the test when that is impossible.
func requireCluster(t *testing.T) *cluster {
	t.Helper()
	return shared.Get(t, "Kubernetes end to end suite", newCluster)
}

func newCluster() (*cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("it needs root (a kubelet, containerd, network namespaces): run `make test` or `go test ./test/kube/` as root")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	c := &cluster{repo: repo}
	envFile := filepath.Join(repo, ".cache", "kube", "env")
	wasUp := false
	if env, err := host.ReadEnvFile(envFile, kubeEnvKeys...); err == nil {
		c.env = env
		wasUp = c.kubectl("get", "--raw", "/readyz").Err == nil
	}
	c.owned = !wasUp && os.Getenv("NETNS_PIN_KUBE_KEEP") != "1"
	// up.sh is idempotent: with the cluster up it checks and re-applies.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(repo, "hack", "kube", "up.sh")).CombinedOutput()
	fmt.Fprintf(os.Stderr, "hack/kube/up.sh (%s):\n%s", time.Since(start).Round(time.Millisecond), host.Tail(string(out), 30))
	if err != nil {
		return c, fmt.Errorf("hack/kube/up.sh: %v", err)
	}
	if c.env, err = host.ReadEnvFile(envFile, kubeEnvKeys...); err != nil {
		return c, err
	}
	c.kubectlBin, c.kubeconfig = c.env["KUBECTL"], c.env["KUBECONFIG"]
	c.crictl = filepath.Join(repo, ".cache", "runtime", "bin", "crictl")
	c.crictlConf = c.env["KUBE_CRICTL_CONFIG"]
	c.pinBin = filepath.Join(c.env["KUBE_CNI_BIN_DIR"], "netns-pin")
	c.ctl = filepath.Join(c.env["KUBE_IMAGE_BIN_DIR"], "netns-pinctl")
	c.pinDir = filepath.Join(c.env["KUBELET_DIR"], "plugins", "netns-pin")
	c.stateDir = filepath.Join(c.env["KUBE_DIR"], "lib", "cni", "netns-pin")
	c.nodeN, c.nodeName = 1, c.env["KUBE_NODE"]
	return c, errors.Join(host.CheckExecutable(c.pinBin), host.CheckExecutable(c.ctl))
}

func (c *cluster) down() error {
	r := host.RunCmd(downTimeout, nil, nil, filepath.Join(c.repo, "hack", "kube", "down.sh"))
	fmt.Fprintf(os.Stderr, "hack/kube/down.sh:\n%s", host.Tail(r.Stdout+r.Stderr, 20))
	return r.Err
}

// kubectl runs kubectl against the cluster.
func (c *cluster) kubectl(args ...string) host.CmdResult {
	return c.kubectlIn(nil, args...)
}

func (c *cluster) kubectlIn(stdin []byte, args ...string) host.CmdResult {
	bin := c.kubectlBin
	if bin == "" {
		bin = c.env["KUBECTL"]
	}
	kc := c.kubeconfig
	if kc == "" {
		kc = c.env["KUBECONFIG"]
	}
	return host.RunCmd(cmdTimeout, nil, stdin, bin, append([]string{"--kubeconfig", kc}, args...)...)
}

func (c *cluster) mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	r := c.kubectl(args...)
	require.NoError(t, r.Err, "%s", r)
	return r.Stdout
}

// apply sends objects to the API server with kubectl apply, as JSON.
func (c *cluster) apply(t *testing.T, objs ...map[string]any) {
	t.Helper()
	for _, o := range objs {
		b, err := json.Marshal(o)
		require.NoError(t, err)
		r := c.kubectlIn(b, "apply", "-f", "-")
		require.NoError(t, r.Err, "kubectl apply %s %s:\n%s", str(o, "kind"), str(o, "metadata", "name"), r)
	}
}

// getJSON decodes `kubectl get ... -o json`.
func (c *cluster) getJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := c.mustKubectl(t, append(args, "-o", "json")...)
	require.NoError(t, json.Unmarshal([]byte(out), v), "kubectl get %v", args)
}

// crictlRun runs crictl against the node's containerd.
func (c *cluster) crictlRun(args ...string) host.CmdResult {
	return host.RunCmd(cmdTimeout, nil, nil, c.crictl, append([]string{"--config", c.crictlConf}, args...)...)
}

// thick reports whether the node's Multus is thick (hack/kube/up.sh with
// NETNS_PIN_KUBE_MULTUS=thick): multus-shim answers every DEL with success.
func (c *cluster) thick() bool { return c.env["KUBE_MULTUS"] == "thick" }

// get and str read a field of an object (deploy.Field, deploy.String).
var get, str = deploy.Field, deploy.String
