package main

// The CNI side, as on a node: a conflist [bridge + host-local (, netns-pin)]
// on the guest's bridge br0 (enslaving the tap that reaches the cluster),
// run by cnitool; libcni in process for the CNI error code of a DEL (cnitool
// prints only the message).

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/netns-pin/netns-pin/internal/host"
)

const (
	cniPath    = "/np"
	clusterNS  = "rook-ceph"
	ifName     = "eth0"
	cniTimeout = 60 * time.Second
	cmdTimeout = 60 * time.Second
)

// setup mounts debugfs (the CephFS scenario unmounts it for a while) and
// checks that the kernel has what the scenarios use.
func setup() error {
	if err := os.MkdirAll("/sys/kernel/debug", 0o755); err != nil {
		return err
	}
	if r := sh("mount -t debugfs debugfs /sys/kernel/debug"); r.Err != nil {
		return fmt.Errorf("mount debugfs: %s", r)
	}
	for _, p := range []string{"/sys/bus/rbd/add_single_major", "/sys/class/net/br0", "/proc/filesystems"} {
		if _, err := os.Stat(p); err != nil {
			return err
		}
	}
	fs, _ := os.ReadFile("/proc/filesystems")
	if !strings.Contains(string(fs), "\tceph\n") {
		return errors.New("the kernel has no ceph file system (ceph.ko not loaded)")
	}
	return os.MkdirAll("/var/lib/cni", 0o755)
}

// sh runs a busybox shell command line.
func sh(line string) host.CmdResult { return host.RunCmd(cmdTimeout, nil, nil, "/bin/sh", "-c", line) }

// inNetns runs a command in a netns path, as ceph-csi runs its clients.
func inNetns(path string, args ...string) host.CmdResult {
	return host.RunCmd(cmdTimeout, nil, nil, "nsenter", append([]string{"--net=" + path, "--"}, args...)...)
}

// chain is one network of the node: its conflist and folders.
type chain struct {
	name, cluster, dir, netconf, confPath string
	pinDir, stateDir, leaseDir, logFile   string
	pin                                   bool
}

// newChain writes a conflist whose bridge plugin attaches holders to br0
// with the guest's block of addresses from first on (the cluster's subnet); with pin,
// netns-pin comes last with a holders rule rook-ceph/csi-holder-* ->
// rook-ceph/<cluster>.
func newChain(s *S, cluster string, pin bool, first netip.Addr) *chain {
	return newChainOn(s, cluster, pin, first, "br0", cfg.Subnet)
}

// newChainOn is newChain on another bridge and subnet.
func newChainOn(s *S, cluster string, pin bool, first netip.Addr, bridge, subnet string) *chain {
	ch := &chain{cluster: cluster, pin: pin, dir: filepath.Join("/run/np", s.name+"-"+host.RandHex(4))}
	ch.name = "ceph-public-" + cluster
	ch.netconf = filepath.Join(ch.dir, "net.d")
	ch.pinDir = filepath.Join(ch.dir, "pin")
	ch.stateDir = filepath.Join(ch.dir, "state")
	ch.leaseDir = filepath.Join(ch.dir, "host-local")
	ch.logFile = filepath.Join(ch.dir, "netns-pin.log")
	s.mustOK(os.MkdirAll(ch.netconf, 0o755), "mkdir")
	last := first
	for range block - 1 {
		last = last.Next()
	}
	plugins := []any{map[string]any{
		"type": "bridge", "bridge": bridge, "isGateway": false, "ipMasq": false,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]any{{{"subnet": subnet, "rangeStart": first.String(), "rangeEnd": last.String()}}},
			"dataDir": ch.leaseDir,
		},
	}}
	if pin {
		plugins = append(plugins, map[string]any{
			"type": "netns-pin", "pinDir": ch.pinDir, "stateDir": ch.stateDir,
			"holders":  []map[string]any{{"podNamespace": clusterNS, "podName": "csi-holder-*", "cluster": clusterNS + "/" + cluster}},
			"logFile":  ch.logFile,
			"logLevel": "debug",
		})
	}
	b, err := json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": ch.name, "plugins": plugins}, "", "  ")
	s.mustOK(err, "conflist")
	ch.confPath = filepath.Join(ch.netconf, ch.name+".conflist")
	s.mustOK(os.WriteFile(ch.confPath, b, 0o644), "conflist")
	s.cleanup(func() {
		if len(s.res.Failures) > 0 && pin {
			if log, err := os.ReadFile(ch.logFile); err == nil {
				s.step("netns-pin log (%s):\n%s", ch.logFile, host.Tail(string(log), 30))
			}
		}
	})
	return ch
}

// link is the cluster's well-known path (netNamespaceFilePath for ceph-csi).
func (ch *chain) link() string { return filepath.Join(ch.pinDir, clusterNS, ch.cluster+".net") }

// netnsPin runs netns-pinctl against this chain's folders.
func (ch *chain) netnsPin(args ...string) host.CmdResult {
	return host.RunCmd(cmdTimeout, nil, nil, "/np/netns-pinctl", append([]string{"--conf", ch.confPath}, args...)...)
}

// holder is one pod sandbox on a chain, in a netns made by `ip netns add`.
type holder struct {
	ch                   *chain
	pod, ns, nsPath      string
	containerID, args    string
	ip                   netip.Addr
	veth                 string
	nsID                 host.NSID
	added, deleted, gone bool
}

// addHolder makes the pod's netns and runs `cnitool add`; its cleanup runs
// a best-effort DEL and deletes the netns name.
func (ch *chain) addHolder(s *S, pod string) *holder {
	h := &holder{ch: ch, pod: pod, ns: pod + "-" + host.RandHex(4)}
	h.nsPath = filepath.Join("/run/netns", h.ns)
	sum := sha512.Sum512([]byte(h.nsPath)) // cnitool's container ID
	h.containerID = fmt.Sprintf("cnitool-%x", sum[:10])
	h.args = fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", clusterNS, pod, host.RandHex(8))
	r := host.RunCmd(cmdTimeout, nil, nil, "ip", "netns", "add", h.ns)
	s.mustOK(r.Err, "ip netns add %s: %s", h.ns, r.Stderr)
	s.cleanup(func() {
		if !h.deleted {
			if r := h.cnitool("del"); r.Err != nil {
				s.step("cleanup: cnitool del %s: %v: %s", pod, r.Err, strings.TrimSpace(r.Stderr))
			}
		}
		if !h.gone {
			_ = host.RunCmd(cmdTimeout, nil, nil, "ip", "netns", "del", h.ns)
		}
	})
	id, err := host.NSIDOf(h.nsPath)
	s.mustOK(err, "netns %s", h.nsPath)
	h.nsID = id
	r = h.cnitool("add")
	s.mustOK(r.Err, "cnitool add %s: %s", pod, r)
	var res types100.Result
	s.mustOK(json.Unmarshal([]byte(r.Stdout), &res), "cnitool add printed no CNI result: %s", r.Stdout)
	s.must(len(res.IPs) > 0, "cnitool add: no IP in %s", r.Stdout)
	h.ip, _ = netip.AddrFromSlice(res.IPs[0].Address.IP)
	h.ip = h.ip.Unmap()
	for _, ifc := range res.Interfaces {
		if ifc.Sandbox == "" && ifc.Name != "" && !strings.HasPrefix(ifc.Name, "br") {
			h.veth = ifc.Name
		}
	}
	s.must(h.veth != "", "no host veth in the ADD result: %s", r.Stdout)
	h.added = true
	return h
}

func (h *holder) cnitool(verb string) host.CmdResult {
	return host.RunCmd(cniTimeout, []string{
		"CNI_PATH=" + cniPath, "NETCONFPATH=" + h.ch.netconf, "CNI_IFNAME=" + ifName, "CNI_ARGS=" + h.args,
	}, nil, "/np/cnitool", verb, h.ch.name, h.nsPath)
}

// delLibcni runs the chain's DEL through libcni with cnitool's runtime
// configuration, so that the error keeps its CNI code.
func (h *holder) delLibcni() error {
	list, err := libcni.ConfListFromFile(h.ch.confPath)
	if err != nil {
		return err
	}
	var args [][2]string
	for _, kv := range strings.Split(h.args, ";") {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, [2]string{k, v})
	}
	rt := &libcni.RuntimeConf{ContainerID: h.containerID, NetNS: h.nsPath, IfName: ifName, Args: args}
	ctx, cancel := context.WithTimeout(context.Background(), cniTimeout)
	defer cancel()
	return libcni.NewCNIConfig([]string{cniPath}, nil).DelNetworkList(ctx, list, rt)
}

func (h *holder) attachment() string { return h.containerID + "." + ifName }
func (h *holder) pinPath() string    { return filepath.Join(h.ch.pinDir, "pins", h.attachment()) }
func (h *holder) recordPath() string {
	return filepath.Join(h.ch.stateDir, "records", h.attachment()+".json")
}
func (h *holder) leasePath() string { return filepath.Join(h.ch.leaseDir, h.ch.name, h.ip.String()) }

// refusedDel checks that DEL is refused with CNI code 11 by both cnitool and
// libcni, and returns the libcni error's message and details.
func (s *S) refusedDel(h *holder, why string) (msg, details string) {
	r := h.cnitool("del")
	s.check(r.Err != nil, "%s: cnitool del %s must be refused:\n%s", why, h.pod, r)
	err := h.delLibcni()
	var te *types.Error
	if !errors.As(err, &te) {
		s.fail("%s: libcni DEL of %s: want a CNI error with code 11, got %v", why, h.pod, err)
		panic(abort{})
	}
	s.check(te.Code == types.ErrTryAgainLater, "%s: CNI code %d, want %d (%s)", why, te.Code, types.ErrTryAgainLater, te.Msg)
	s.step("%s: DEL refused: cnitool %q; libcni code %d, msg %q", why, errorLine(r.Stderr+r.Stdout), te.Code, te.Msg)
	return te.Msg, te.Details
}

// delOK runs DEL once the last client is gone and requires it to succeed.
// The kernel tears a client down a moment after its unmap or umount
// returns (its sockets close, its debugfs folder goes), so a DEL refused
// meanwhile is retried, as kubelet retries it, for up to 30s; every refusal
// is logged with what it named.
func (s *S) delOK(h *holder) {
	var r host.CmdResult
	tries := 0
	ok := host.Poll(30*time.Second, 200*time.Millisecond, func() bool {
		tries++
		r = h.cnitool("del")
		if r.Err != nil {
			s.step("DEL of %s (try %d) still refused: %s", h.pod, tries, errorLine(r.Stderr+r.Stdout))
		}
		return r.Err == nil
	})
	s.must(ok, "cnitool del %s after its clients went: %s", h.pod, r)
	h.deleted = true
}

// netnsDel deletes the holder's runtime netns path, as a runtime does when
// it removes the pod.
func (s *S) netnsDel(h *holder) {
	r := host.RunCmd(cmdTimeout, nil, nil, "ip", "netns", "del", h.ns)
	s.mustOK(r.Err, "ip netns del %s: %s", h.ns, r.Stderr)
	h.gone = true
	_, err := os.Stat(h.nsPath)
	s.check(os.IsNotExist(err), "%s still exists after ip netns del: %v", h.nsPath, err)
}

// released checks what a released holder leaves: nothing (pin, record,
// lease), and its netns goes with its veth.
func (s *S) released(h *holder) {
	for what, p := range map[string]string{"pin": h.pinPath(), "record": h.recordPath(), "lease": h.leasePath()} {
		_, err := os.Lstat(p)
		s.check(os.IsNotExist(err), "%s of %s after its DEL: %s exists (%v)", what, h.pod, p, err)
	}
	gone := host.Poll(30*time.Second, 50*time.Millisecond, func() bool { return !host.LinkExists(h.veth) })
	s.check(gone, "veth %s of %s still exists 30s after its DEL: its netns did not go", h.veth, h.pod)
	s.step("%s released: no pin, no record, no lease %s, veth %s gone with its netns", h.pod, h.ip, h.veth)
}

// addrStays checks that the holder's interface and address are still in
// its (pinned) netns.
func (s *S) addrStays(h *holder, path string) {
	r := inNetns(path, "/sbin/ip", "-br", "addr", "show", "dev", ifName) // iproute2, not busybox's applet
	s.check(r.Err == nil && strings.Contains(r.Stdout, " "+h.ip.String()+"/"), "%s's %s with %s must stay: %s", h.pod, ifName, h.ip, r)
	s.check(host.LinkExists(h.veth), "%s's veth %s must stay", h.pod, h.veth)
}

// linkIs checks where the cluster's link leads.
func (s *S) linkIs(ch *chain, h *holder) bool {
	id, err := host.NSIDOf(ch.link())
	return s.check(err == nil && id == h.nsID, "%s must lead to %s's netns %s: %v %v", ch.link(), h.pod, h.nsID, id, err)
}

func errorLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// startInNetns starts a long-running process in a netns (a Rook-style
// holder's pause process), detached from our output.
func startInNetns(path string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=" + path, "--"}, args...)...)
	return cmd, cmd.Start()
}
