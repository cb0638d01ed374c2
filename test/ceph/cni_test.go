package ceph

// CNI harness: a conflist [bridge + host-local (, netns-pin)] on the Ceph
// cluster's bridge, run by the real cnitool binary (what a runtime does) and,
// for the error code, by libcni in process (cnitool prints only the message).

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

const (
	clusterNS   = "rook-ceph"
	clusterName = "my-cluster"
	clusterRef  = clusterNS + "/" + clusterName
	ifName      = "eth0"
	cniTimeout  = 60 * time.Second
)

// chain is a conflist on disk plus what is needed to run it.
type chain struct {
	env        env
	name       string
	pin        bool
	work       string
	netconfDir string
	confPath   string
	pinDir     string
	stateDir   string
	logFile    string
}

// newChain writes a conflist whose bridge plugin attaches pods to the
// cluster's bridge with addresses from [rangeStart, rangeEnd] of its subnet
// (no gateway, no address on the host); with pin, netns-pin comes last with a
// holders rule for rook-ceph/csi-holder-* -> rook-ceph/my-cluster.
func newChain(t *testing.T, e env, c *cluster, work string, pin bool, rangeStart, rangeEnd string) *chain {
	t.Helper()
	ch := &chain{env: e, pin: pin, work: work}
	kind := "rook"
	if pin {
		kind = "pin"
	}
	ch.name = "ceph-public-" + kind + "-" + host.RandHex(6)
	ch.netconfDir = filepath.Join(work, "net.d-"+kind)
	ch.pinDir = filepath.Join(work, "pin")
	ch.stateDir = filepath.Join(work, "state")
	ch.logFile = filepath.Join(work, "netns-pin.log")
	require.NoError(t, os.MkdirAll(ch.netconfDir, 0o755))
	plugins := []any{map[string]any{
		"type":      "bridge",
		"bridge":    c.bridge,
		"isGateway": false,
		"ipMasq":    false,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]any{{{"subnet": c.subnet, "rangeStart": rangeStart, "rangeEnd": rangeEnd}}},
			"dataDir": filepath.Join(work, "host-local"),
		},
	}}
	if pin {
		plugins = append(plugins, map[string]any{
			"type":     "netns-pin",
			"pinDir":   ch.pinDir,
			"stateDir": ch.stateDir,
			"holders": []map[string]any{
				{"podNamespace": clusterNS, "podName": "csi-holder-*", "cluster": clusterRef},
			},
			"logFile":  ch.logFile,
			"logLevel": "debug",
		})
	}
	conf := map[string]any{"cniVersion": "1.0.0", "name": ch.name, "plugins": plugins}
	b, err := json.MarshalIndent(conf, "", "  ")
	require.NoError(t, err)
	ch.confPath = filepath.Join(ch.netconfDir, ch.name+".conflist")
	require.NoError(t, os.WriteFile(ch.confPath, b, 0o644))
	t.Cleanup(func() {
		if t.Failed() && pin {
			if log, err := os.ReadFile(ch.logFile); err == nil {
				t.Logf("netns-pin log (%s):\n%s", ch.logFile, host.Tail(string(log), 40))
			}
		}
	})
	return ch
}

// link is the cluster's well-known path (netNamespaceFilePath for ceph-csi).
func (ch *chain) link() string { return filepath.Join(ch.pinDir, clusterNS, clusterName+".net") }

// attachment is one pod sandbox on a chain.
type attachment struct {
	ch          *chain
	ns          *hosttest.NetnsHandle
	args        string // CNI_ARGS
	podName     string
	containerID string
	result      *types100.Result
}

// newAttachment prepares a pod of rook-ceph named podName in ns; its cleanup
// runs a best-effort DEL (reported, never fatal).
func (ch *chain) newAttachment(t *testing.T, ns *hosttest.NetnsHandle, podName string) *attachment {
	t.Helper()
	sum := sha512.Sum512([]byte(ns.Path)) // cnitool's container ID
	a := &attachment{
		ch: ch, ns: ns, podName: podName, containerID: fmt.Sprintf("cnitool-%x", sum[:10]),
		args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", clusterNS, podName, newUUID()),
	}
	t.Cleanup(func() {
		if r := a.cnitool("del"); r.Err != nil {
			t.Logf("cleanup: cnitool del %s: %v: %s", podName, r.Err, strings.TrimSpace(r.Stderr))
		}
		if err := os.Remove(filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-%s-%s", ch.name, a.containerID, ifName))); err != nil && !os.IsNotExist(err) {
			t.Errorf("cleanup: %v", err)
		}
	})
	return a
}

func (a *attachment) cnitool(verb string) host.CmdResult {
	return host.RunCmd(cniTimeout, []string{
		"CNI_PATH=" + a.ch.env.cniPath,
		"NETCONFPATH=" + a.ch.netconfDir,
		"CNI_IFNAME=" + ifName,
		"CNI_ARGS=" + a.args,
	}, nil, a.ch.env.cnitool, verb, a.ch.name, a.ns.Path)
}

// add runs `cnitool add` and returns the result.
func (a *attachment) add(t *testing.T) *types100.Result {
	t.Helper()
	r := a.cnitool("add")
	require.NoError(t, r.Err, "cnitool add %s: %s", a.podName, r)
	var res types100.Result
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &res), "cnitool add printed no CNI 1.0 result:\n%s", r.Stdout)
	require.NotEmpty(t, res.IPs, "cnitool add: no IP in %s", r.Stdout)
	a.result = &res
	return &res
}

// ip is the pod's address.
func (a *attachment) ip() string { return a.result.IPs[0].Address.IP.String() }

// hostVeth is the host end of the bridge plugin's veth pair.
func (a *attachment) hostVeth(t *testing.T) string {
	t.Helper()
	for _, ifc := range a.result.Interfaces {
		if ifc.Sandbox == "" && ifc.Name != "" && !strings.HasPrefix(ifc.Name, "npcbr") {
			return ifc.Name
		}
	}
	t.Fatalf("no host veth in the ADD result: %+v", a.result.Interfaces)
	return ""
}

// delLibcni runs DEL of the chain through libcni with the same runtime
// configuration as cnitool (container ID, netns path, ifname, CNI_ARGS and
// the cached result in /var/lib/cni), so that the error keeps its CNI code.
func (a *attachment) delLibcni(t *testing.T) error {
	t.Helper()
	list, err := libcni.ConfListFromFile(a.ch.confPath)
	require.NoError(t, err)
	var args [][2]string
	for _, kv := range strings.Split(a.args, ";") {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, [2]string{k, v})
	}
	rt := &libcni.RuntimeConf{ContainerID: a.containerID, NetNS: a.ns.Path, IfName: ifName, Args: args}
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	return libcni.NewCNIConfig([]string{a.ch.env.cniPath}, nil).DelNetworkList(ctx, list, rt)
}

func (a *attachment) attachmentName() string { return a.containerID + "." + ifName }
func (a *attachment) pinPath() string {
	return filepath.Join(a.ch.pinDir, "pins", a.attachmentName())
}
func (a *attachment) recordPath() string {
	return filepath.Join(a.ch.stateDir, "records", a.attachmentName()+".json")
}

// record reads the plugin's record of the attachment.
func (a *attachment) record(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(a.recordPath())
	require.NoError(t, err, "record of %s", a.podName)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(b, &rec))
	return rec
}

// cniCode returns the CNI error code carried by err, or 0.
func cniCode(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}
