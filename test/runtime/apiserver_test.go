package runtime

// kubeAPI is a real kube-apiserver (with its etcd) for Multus to read pods
// and NetworkAttachmentDefinitions from, the binaries hack/kube/build.sh
// builds: the suite creates the objects kubelet's API server would hold
// before the runtime starts a pod's sandbox, and Multus reads them and
// writes the pod's network-status annotation back, through its own
// kubeconfig. There is no kubelet and no scheduler: the pods stay Pending
// in the API, which is all Multus needs.

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netns-pin/netns-pin/internal/host"
)

const apiStartTimeout = 2 * time.Minute

type kubeAPI struct {
	dir        string
	kubectlBin string
	kubeconfig string // cluster-admin through a static token
	token      string // that token
	url        string
	procs      []*exec.Cmd
}

// startKubeAPI starts etcd and kube-apiserver on free local ports with
// their data under dir, and installs Multus' NetworkAttachmentDefinition
// CRD (the copy hack/kube/build.sh took from Multus' sources).
func startKubeAPI(repo, dir string) (*kubeAPI, error) {
	bin := filepath.Join(repo, ".cache", "kube", "bin")
	k := &kubeAPI{dir: dir, kubectlBin: filepath.Join(bin, "kubectl")}
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if err := host.CheckExecutable(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%w: run hack/kube/build.sh (make tools)", err)
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	token := host.RandHex(32)
	if err := k.writeFiles(token, ports[2]); err != nil {
		return k, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	if err := k.start("etcd", filepath.Join(bin, "etcd"), "--name", "runtime", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "runtime="+peerURL); err != nil {
		return k, err
	}
	// The serving certificate is the one kube-apiserver makes for itself in
	// --cert-dir; clients skip its verification (127.0.0.1 only).
	if err := k.start("kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+etcdURL, "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--advertise-address=127.0.0.1", "--cert-dir="+filepath.Join(dir, "certs"),
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"), "--authorization-mode=RBAC",
		// no controller manager makes the namespaces' default service
		// accounts, and the pods never run
		"--disable-admission-plugins=ServiceAccount",
		"--service-cluster-ip-range=10.98.255.0/24",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key")); err != nil {
		return k, err
	}
	if !host.Poll(apiStartTimeout, 200*time.Millisecond, func() bool { return k.kubectl(nil, "get", "--raw", "/readyz").Err == nil }) {
		return k, fmt.Errorf("kube-apiserver not ready after %s: %s", apiStartTimeout, host.Tail(k.log("kube-apiserver"), 20))
	}
	crd, err := filepath.Glob(filepath.Join(repo, ".cache", "kube", "nad-crd-*.yaml"))
	if err != nil || len(crd) != 1 {
		return k, fmt.Errorf("the NetworkAttachmentDefinition CRD from Multus (.cache/kube/nad-crd-*.yaml) is missing: run hack/kube/build.sh")
	}
	if r := k.kubectl(nil, "apply", "-f", crd[0]); r.Err != nil {
		return k, errors.New(r.String())
	}
	r := k.kubectl(nil, "wait", "--for=condition=Established", "--timeout=60s", "crd/network-attachment-definitions.k8s.cni.cncf.io")
	if r.Err != nil {
		return k, errors.New(r.String())
	}
	return k, nil
}

// writeFiles writes the token file (one cluster-admin user, for the suite
// and Multus), the service account key and the kubeconfig.
func (k *kubeAPI) writeFiles(token string, port int) error {
	if err := os.MkdirAll(filepath.Join(k.dir, "certs"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(k.dir, "tokens.csv"), []byte(token+",netns-pin-runtime,1000,system:masters\n"), 0o600); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(k.dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	k.url, k.token = "https://127.0.0.1:"+strconv.Itoa(port), token
	k.kubeconfig = filepath.Join(k.dir, "kubeconfig")
	return writeJSON(k.kubeconfig, map[string]any{
		"apiVersion": "v1", "kind": "Config",
		"clusters":        []any{map[string]any{"name": "runtime", "cluster": map[string]any{"server": k.url, "insecure-skip-tls-verify": true}}},
		"users":           []any{map[string]any{"name": "runtime", "user": map[string]any{"token": token}}},
		"contexts":        []any{map[string]any{"name": "runtime", "context": map[string]any{"cluster": "runtime", "user": "runtime"}}},
		"current-context": "runtime",
	})
}

// freePorts returns n TCP ports nothing listens on now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (k *kubeAPI) start(name, bin string, args ...string) error {
	logf, err := os.Create(filepath.Join(k.dir, name+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// its own process group: a Ctrl-C of go test reaches the test, which
	// stops it in Close
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(k.dir, name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	k.procs = append(k.procs, cmd)
	return nil
}

func (k *kubeAPI) log(name string) string {
	b, _ := os.ReadFile(filepath.Join(k.dir, name+".log"))
	return string(b)
}

// Close stops kube-apiserver, then etcd.
func (k *kubeAPI) Close() {
	for i := len(k.procs) - 1; i >= 0; i-- {
		p := k.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	k.procs = nil
}

func (k *kubeAPI) kubectl(stdin []byte, args ...string) host.CmdResult {
	return host.RunCmd(cmdTimeout, nil, stdin, k.kubectlBin, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
}

func (k *kubeAPI) apply(obj map[string]any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if r := k.kubectl(b, "apply", "-f", "-"); r.Err != nil {
		return errors.New(r.String())
	}
	return nil
}

// ensureNamespace creates ns unless it exists.
func (k *kubeAPI) ensureNamespace(ns string) error {
	return k.apply(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}})
}

// createPod creates the Pod kubelet's API server would hold before the
// runtime starts its sandbox, and returns the UID the API server gave it
// (Multus checks the sandbox's K8S_POD_UID against it).
func (k *kubeAPI) createPod(ns, name string, annotations map[string]string) (string, error) {
	return k.createPodObject(podObject{ns: ns, name: name, annotations: annotations})
}

// podObject is a Pod as the suite creates it in the API server.
type podObject struct {
	ns, name    string
	annotations map[string]string
	labels      map[string]string
	// node is spec.nodeName: a pod scheduled to it. Its graceful delete
	// only sets the deletionTimestamp; the object goes at the kubelet's
	// final delete (grace period 0, finalDelete) once no finalizer is
	// left.
	node           string
	serviceAccount string
	finalizers     []string
}

// createPodObject creates the pod and returns its UID.
func (k *kubeAPI) createPodObject(p podObject) (string, error) {
	if err := k.ensureNamespace(p.ns); err != nil {
		return "", err
	}
	meta := map[string]any{"name": p.name, "namespace": p.ns, "annotations": p.annotations, "labels": p.labels}
	if len(p.finalizers) > 0 {
		meta["finalizers"] = p.finalizers
	}
	spec := map[string]any{
		"containers": []any{map[string]any{"name": "holder", "image": "localhost/netns-pin/pause:test"}},
	}
	if p.node != "" {
		spec["nodeName"] = p.node
	}
	if p.serviceAccount != "" {
		spec["serviceAccountName"] = p.serviceAccount
	}
	if err := k.apply(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}); err != nil {
		return "", err
	}
	r := k.kubectl(nil, "-n", p.ns, "get", "pod", p.name, "-o", "jsonpath={.metadata.uid}")
	if r.Err != nil {
		return "", errors.New(r.String())
	}
	return strings.TrimSpace(r.Stdout), nil
}

// getPod returns the pod of that UID, nil when it is gone (a pod being
// deleted that still carries a finalizer is there).
func (k *kubeAPI) getPod(ns, name, uid string) (*corev1.Pod, error) {
	r := k.kubectl(nil, "-n", ns, "get", "pod", name, "-o", "json")
	if r.Err != nil {
		if strings.Contains(r.Stderr, "NotFound") {
			return nil, nil
		}
		return nil, errors.New(r.String())
	}
	var p corev1.Pod
	if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	if string(p.UID) != uid {
		return nil, nil // a newer pod of the same name
	}
	return &p, nil
}

// finalDelete deletes the pod with grace period 0, as the kubelet does once
// it has stopped the pod's sandbox (its status manager): without a
// finalizer the object goes at once, with one it stays until the finalizer
// is lifted.
func (k *kubeAPI) finalDelete(ns, name string) error {
	if r := k.kubectl(nil, "-n", ns, "delete", "pod", name, "--grace-period=0", "--force", "--wait=false"); r.Err != nil {
		return errors.New(r.String())
	}
	return nil
}

// setPodReady sets the pod's Ready condition, as its kubelet would.
func (k *kubeAPI) setPodReady(ns, name string, ready corev1.ConditionStatus) error {
	patch := `{"status":{"conditions":[{"type":"Ready","status":"` + string(ready) + `"}]}}`
	if r := k.kubectl(nil, "-n", ns, "patch", "pod", name, "--subresource=status", "--type=merge", "-p", patch); r.Err != nil {
		return errors.New(r.String())
	}
	return nil
}

// forgetPod lifts every finalizer of the pod and deletes it at once: the
// cleanup of a test's pod objects, whatever it left.
func (k *kubeAPI) forgetPod(ns, name string) {
	k.kubectl(nil, "-n", ns, "patch", "pod", name, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	k.kubectl(nil, "-n", ns, "delete", "pod", name, "--ignore-not-found", "--grace-period=0", "--force", "--wait=false")
}

// events returns the Events on the object of that UID.
func (k *kubeAPI) events(ns, uid string) ([]corev1.Event, error) {
	r := k.kubectl(nil, "-n", ns, "get", "events", "--field-selector", "involvedObject.uid="+uid, "-o", "json")
	if r.Err != nil {
		return nil, errors.New(r.String())
	}
	var l corev1.EventList
	if err := json.Unmarshal([]byte(r.Stdout), &l); err != nil {
		return nil, fmt.Errorf("events of %s: %w", uid, err)
	}
	return l.Items, nil
}

// deletePod deletes a pod; unscheduled, it goes at once.
func (k *kubeAPI) deletePod(ns, name string) {
	k.kubectl(nil, "-n", ns, "delete", "pod", name, "--ignore-not-found", "--wait=false")
}

// putNAD creates a NetworkAttachmentDefinition whose spec.config is
// conflist.
func (k *kubeAPI) putNAD(ns, name string, conflist []byte) error {
	if err := k.ensureNamespace(ns); err != nil {
		return err
	}
	return k.apply(map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"config": string(conflist)},
	})
}

// nadJSON returns the NetworkAttachmentDefinition as the API server has
// it, in JSON: the form conf.PluginEntry and `netns-pinctl --conf` read.
func (k *kubeAPI) nadJSON(ns, name string) ([]byte, error) {
	r := k.kubectl(nil, "-n", ns, "get", "network-attachment-definitions.k8s.cni.cncf.io", name, "-o", "json")
	if r.Err != nil {
		return nil, errors.New(r.String())
	}
	return []byte(r.Stdout), nil
}

// networkStatus returns the interfaces Multus reported in the pod's
// network-status annotation, which it writes through the API server after
// a successful ADD.
func (k *kubeAPI) networkStatus(ns, name string) ([]networkStatus, error) {
	r := k.kubectl(nil, "-n", ns, "get", "pod", name, "-o", `jsonpath={.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}`)
	if r.Err != nil {
		return nil, errors.New(r.String())
	}
	var st []networkStatus
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		return nil, fmt.Errorf("network-status of %s/%s: %w (%q)", ns, name, err, r.Stdout)
	}
	return st, nil
}

type networkStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
}
