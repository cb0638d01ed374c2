package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

// execTimeout bounds one plugin or cnitool run: a hung in-use check must
// fail the benchmark, not stall it.
const execTimeout = 30 * time.Second

// call is one process run the way a CNI runtime runs a plugin: stdin
// configuration, CNI_* environment, result on stdout.
type call struct {
	bin   string
	args  []string
	env   []string // added to the runner's environment (CNI_* removed)
	stdin []byte
	extra []*os.File // inherited as fd 3, 4, ...
}

// baseEnv is the runner's environment without CNI variables, which a
// runtime sets per call.
var baseEnv = func() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CNI_") || strings.HasPrefix(kv, "NETCONFPATH=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}()

// run executes c and measures it: wall time from fork to reap (what a
// runtime waits for) and the child's CPU time.
func (c call) run(ctx context.Context) (sample, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, c.args...)
	cmd.Env = append(append([]string{}, baseEnv...), c.env...)
	cmd.Stdin = bytes.NewReader(c.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.ExtraFiles = c.extra
	start := time.Now()
	err := cmd.Run()
	s := sample{d: time.Since(start)}
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			// ru_maxrss is not kept here: see rsswrap.go.
			s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	if err != nil {
		return s, stdout.Bytes(), fmt.Errorf("%s %s: %v\nstdout: %s\nstderr: %s", c.bin, strings.Join(c.args, " "),
			err, bytes.TrimSpace(stdout.Bytes()), bytes.TrimSpace(stderr.Bytes()))
	}
	return s, stdout.Bytes(), nil
}

// cniEnv is the environment of a direct plugin call.
func cniEnv(command, containerID, netns, cniArgs, cniPath string) []string {
	return []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + containerID, "CNI_NETNS=" + netns,
		"CNI_IFNAME=eth0", "CNI_PATH=" + cniPath, "CNI_ARGS=" + cniArgs}
}

// attachment is one holder pod's interface as a runtime hands it to a
// plugin: container ID, CNI_ARGS, netns and the plugin's stdin.
type attachment struct {
	cid, args, netns string
	conf             []byte
}

// attach is a fresh attachment of holder pod pod, in netns, to network net
// of the plugin whose conflist entry is entry; its prevResult has address
// ip.
func (b *bench) attach(net, netns, pod string, entry map[string]any, ip string) attachment {
	cid := newCID()
	return attachment{cid: cid, args: podArgs(holderNS, pod, cid), netns: netns, conf: pluginConf(b.name(net), entry, prevResult(ip))}
}

// call is the plugin call of bin for a.
func (b *bench) call(bin, verb string, a attachment) call {
	return call{bin: bin, env: cniEnv(verb, a.cid, a.netns, a.args, b.cfg.cniPath), stdin: a.conf}
}

func podUID() string {
	return fmt.Sprintf("%s-%s-%s-%s-%s", host.RandHex(8), host.RandHex(4), host.RandHex(4), host.RandHex(4), host.RandHex(12))
}

// podArgs are CNI_ARGS as containerd passes them for a pod.
func podArgs(namespace, name, containerID string) string {
	return strings.Join([]string{
		"IgnoreUnknown=1",
		"K8S_POD_NAMESPACE=" + namespace,
		"K8S_POD_NAME=" + name,
		"K8S_POD_INFRA_CONTAINER_ID=" + containerID,
		"K8S_POD_UID=" + podUID(),
	}, ";")
}

// prevResult is what a bridge + host-local ADD prints for a pod: the one
// previous result every passthrough command gets.
func prevResult(ip string) map[string]any {
	two := 2
	return map[string]any{
		"cniVersion": "1.0.0",
		"interfaces": []map[string]any{
			{"name": "cni0", "mac": "2a:5c:19:8e:41:07"},
			{"name": "veth3f1a9c2e", "mac": "c6:1e:83:52:9b:aa"},
			{"name": "eth0", "mac": "8e:2d:07:4b:c3:11", "sandbox": "/var/run/netns/cni-0b5f7a1e-6c1d-8e4a-2f3b-9d8c7e6f5a4b"},
		},
		"ips": []map[string]any{
			{"interface": two, "address": ip + "/24", "gateway": "10.250.0.1"},
		},
		"routes": []map[string]any{{"dst": "0.0.0.0/0", "gw": "10.250.0.1"}},
		"dns":    map[string]any{"nameservers": []string{"10.96.0.10"}, "search": []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}, "options": []string{"ndots:5"}},
	}
}

// pluginConf is a chained plugin's stdin: name, cniVersion, prevResult and
// the plugin's own fields.
func pluginConf(netName string, entry map[string]any, prev map[string]any) []byte {
	conf := map[string]any{"cniVersion": "1.0.0", "name": netName}
	for k, v := range entry {
		conf[k] = v
	}
	if prev != nil {
		conf["prevResult"] = prev
	}
	b, err := json.Marshal(conf)
	if err != nil {
		panic(err)
	}
	return b
}

// sameJSON reports whether two JSON documents are equal as values.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
