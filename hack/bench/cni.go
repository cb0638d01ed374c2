package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"slices"
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
	log   *bytes.Buffer // when not nil, receives stderr too
}

// baseEnv is the runner's environment without CNI variables, which a
// runtime sets per call.
var baseEnv = slices.DeleteFunc(os.Environ(), func(kv string) bool {
	return strings.HasPrefix(kv, "CNI_") || strings.HasPrefix(kv, "NETCONFPATH=")
})

// run executes c and measures it: wall time from fork to reap (what a
// runtime waits for), the child's CPU time and, when wrap is not "", its
// peak RSS, which rsswrap wrap reports on fd 3 (see rsswrap.go).
func (c call) run(ctx context.Context, wrap string) (sample, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, c.args...)
	var rss *os.File
	if wrap != "" {
		r, w, err := os.Pipe()
		if err != nil {
			return sample{}, nil, fmt.Errorf("rsswrap: %w", err)
		}
		defer r.Close()
		defer w.Close()
		cmd = exec.CommandContext(ctx, wrap, append([]string{c.bin}, c.args...)...)
		cmd.ExtraFiles, rss = []*os.File{w}, r
	}
	cmd.Env = append(slices.Clip(baseEnv), c.env...)
	cmd.Stdin = bytes.NewReader(c.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if c.log != nil {
		cmd.Stderr = io.MultiWriter(&stderr, c.log)
	}
	start := time.Now()
	err := cmd.Run()
	s := sample{d: time.Since(start)}
	if ps := cmd.ProcessState; ps != nil { // nil when it did not start
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok { // ru_maxrss: see rsswrap.go
			s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	if err == nil && rss != nil {
		s.rssKiB, err = readRSS(cmd.ExtraFiles[0], rss)
	}
	if err != nil {
		return s, stdout.Bytes(), fmt.Errorf("%s %s: %w\nstdout: %s\nstderr: %s", c.bin, strings.Join(c.args, " "),
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

// prevResult is what a bridge + host-local ADD prints for a pod whose
// address is ip: the previous result every chained plugin call gets.
func prevResult(ip string) json.RawMessage {
	return json.RawMessage(`{"cniVersion": "1.0.0",
		"interfaces": [{"name": "cni0", "mac": "2a:5c:19:8e:41:07"}, {"name": "veth3f1a9c2e", "mac": "c6:1e:83:52:9b:aa"},
			{"name": "eth0", "mac": "8e:2d:07:4b:c3:11", "sandbox": "/var/run/netns/cni-0b5f7a1e-6c1d-8e4a-2f3b-9d8c7e6f5a4b"}],
		"ips": [{"interface": 2, "address": "` + ip + `/24", "gateway": "10.250.0.1"}],
		"routes": [{"dst": "0.0.0.0/0", "gw": "10.250.0.1"}],
		"dns": {"nameservers": ["10.96.0.10"], "search": ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"], "options": ["ndots:5"]}}`)
}

// pluginConf is a chained plugin's stdin: name, cniVersion, prevResult and
// the plugin's own fields.
func pluginConf(netName string, entry map[string]any, prev json.RawMessage) []byte {
	conf := map[string]any{"cniVersion": "1.0.0", "name": netName, "prevResult": prev}
	maps.Copy(conf, entry)
	b, err := json.Marshal(conf)
	if err != nil { // strings, numbers, maps and valid JSON: cannot happen
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
