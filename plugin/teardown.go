package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/nsinfo"
	"github.com/netns-pin/netns-pin/internal/smallfile"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// maxCacheEntry bounds the libcni cache entry copied into a record; a
// chain's configuration and result are a few KiB.
const maxCacheEntry = 256 << 10

// teardownOf is what a later teardown of this DEL's attachment needs,
// kept by the store at the first refusal (docs/design.md §7): the
// runtime's CNI_NETNS and CNI_PATH, and the libcni result cache entry of
// the attachment (the chain's configuration, CNI_ARGS, capability
// arguments and result), looked up in c.CacheDirs. A runtime that gives up
// (CRI-O) removes that entry right after the failed DEL.
func teardownOf(args *skel.CmdArgs, c *conf.Config) *netnsstore.Teardown {
	td := &netnsstore.Teardown{Netns: args.Netns, CNIPath: args.Path}
	name := fmt.Sprintf("%s-%s-%s", c.Name, args.ContainerID, args.IfName)
	for _, dir := range c.CacheDirs {
		p := filepath.Join(dir, "results", name)
		if data, err := smallfile.ReadPath(p, maxCacheEntry); err == nil {
			td.CacheFile, td.Cache = p, data
			break
		}
	}
	return td
}

// errNoCache is returned when an abandoned attachment's chain cannot be
// torn down for want of its cache entry: the pin is released all the same
// and the log names what IPAM did not get back.
var errNoCache = errors.New("no libcni cache entry was captured")

// chainTeardown runs, for an abandoned attachment, the DEL of every plugin
// that comes before netns-pin in its chain, in reverse order, with the
// captured configuration, CNI_PATH and arguments and with CNI_NETNS set to
// the pin: what the runtime would have done on a retry.
// DEL is idempotent in every CNI plugin, so running it again after a crash
// frees nothing twice.
func chainTeardown(log *slog.Logger) func(*netnsstore.Record) error {
	return func(r *netnsstore.Record) error {
		err := runChainDel(r)
		if errors.Is(err, errNoCache) {
			log.Warn("abandoned teardown: the chain's earlier plugins were not run, IPAM keeps the address",
				"network", r.Network, "containerID", r.ContainerID, "ifname", r.IfName, "ips", r.IPs)
			return nil
		}
		return err
	}
}

// cacheEntry is the part of a libcni result cache entry ("cniCacheV1",
// libcni/api.go cachedInfo) that a DEL of the chain needs.
type cacheEntry struct {
	Kind           string          `json:"kind"`
	Config         []byte          `json:"config"` // the network configuration list
	CNIArgs        [][2]string     `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]any  `json:"capabilityArgs,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
}

// confList is the part of a network configuration list the DEL needs;
// plugins are kept raw, to be passed on as they were.
type confList struct {
	Name       string            `json:"name"`
	CNIVersion string            `json:"cniVersion"`
	Plugins    []json.RawMessage `json:"plugins"`
}

// runChainDel runs the DEL of the chain's plugins before netns-pin, in
// reverse order, the way libcni's DelNetworkList does: each plugin gets its
// own configuration with the list's name and version, the cached result as
// prevResult (in that version) and the capability arguments it declares, and
// the first failure stops the chain. It is written out here rather than
// taken from libcni because libcni and its invoke package link net/http and
// OpenTelemetry into the binary that every pod's ADD and DEL execs.
func runChainDel(r *netnsstore.Record) error {
	td := r.Teardown
	if td == nil || len(td.Cache) == 0 {
		return errNoCache
	}
	var entry cacheEntry
	if err := json.Unmarshal(td.Cache, &entry); err != nil || entry.Kind != "cniCacheV1" {
		return fmt.Errorf("captured cache entry %s: not a libcni cache entry (%v)", td.CacheFile, err)
	}
	var list confList
	if err := json.Unmarshal(entry.Config, &list); err != nil {
		return fmt.Errorf("captured configuration of %s: %w", r.Network, err)
	}
	var prev types.Result
	if len(entry.Result) > 0 {
		res, err := create.CreateFromBytes(entry.Result)
		if err == nil {
			prev, err = res.GetAsVersion(list.CNIVersion)
		}
		if err != nil {
			return fmt.Errorf("captured result of %s: %w", r.Network, err)
		}
	}
	// CNI_NETNS is the pin, derived from the attachment (never a path read
	// from the record), and only when it is the recorded netns.
	netns := filepath.Join(r.PinDir, netnsstore.PinsSubdir, r.Attachment)
	if fd, err := nsinfo.OpenNetns(netns); err != nil {
		netns = "" // the pin was lost (unpinned): a DEL without a netns, as runtimes send
	} else {
		var st unix.Stat_t
		err := unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil || (netnsstore.NetnsID{Dev: st.Dev, Ino: st.Ino}) != r.NetnsID() {
			return fmt.Errorf("pin %s is netns %d:%d, the record's is %s (%v): the chain's DEL is not run", netns, st.Dev, st.Ino, r.NetnsID(), err)
		}
	}
	// As libcni's invoke.Args.AsEnv: this process's environment without
	// its CNI_ variables, then the DEL's.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CNI_COMMAND=DEL", "CNI_CONTAINERID="+r.ContainerID, "CNI_NETNS="+netns,
		"CNI_IFNAME="+r.IfName, "CNI_ARGS="+cniArgs(entry.CNIArgs), "CNI_PATH="+td.CNIPath)
	own := -1
	for i, raw := range list.Plugins {
		if pluginType(raw) == "netns-pin" {
			own = i
		}
	}
	if own < 0 {
		return fmt.Errorf("captured configuration of %s has no netns-pin entry", r.Network)
	}
	for i := own - 1; i >= 0; i-- {
		conf, err := pluginConfig(list, list.Plugins[i], prev, entry.CapabilityArgs)
		if err != nil {
			return err
		}
		if err := execDel(pluginType(list.Plugins[i]), td.CNIPath, conf, env); err != nil {
			return fmt.Errorf("DEL of the chain before netns-pin: plugin %s: %w", pluginType(list.Plugins[i]), err)
		}
	}
	return nil
}

func pluginType(raw json.RawMessage) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &p) // a plugin without a type is found nowhere
	return p.Type
}

// pluginConfig is one plugin's configuration as libcni builds it
// (buildOneConfig, injectRuntimeConfig).
func pluginConfig(list confList, raw json.RawMessage, prev types.Result, capArgs map[string]any) ([]byte, error) {
	conf := map[string]any{}
	if err := json.Unmarshal(raw, &conf); err != nil {
		return nil, fmt.Errorf("plugin configuration of %s: %w", list.Name, err)
	}
	conf["name"], conf["cniVersion"] = list.Name, list.CNIVersion
	if prev != nil {
		conf["prevResult"] = prev
	}
	caps, _ := conf["capabilities"].(map[string]any)
	rc := map[string]any{}
	for name, on := range caps {
		if v, ok := capArgs[name]; ok && on == true {
			rc[name] = v
		}
	}
	if len(rc) > 0 {
		conf["runtimeConfig"] = rc
	}
	return json.Marshal(conf)
}

func cniArgs(args [][2]string) string {
	parts := make([]string, len(args))
	for i, kv := range args {
		parts[i] = kv[0] + "=" + kv[1]
	}
	return strings.Join(parts, ";")
}

// execDel runs plugin typ from cniPath with DEL; a failure is the plugin's
// CNI error when it printed one.
func execDel(typ, cniPath string, conf []byte, env []string) error {
	var bin string
	for _, dir := range filepath.SplitList(cniPath) {
		if p := filepath.Join(dir, typ); typ != "" && !strings.Contains(typ, "/") && isExecutable(p) {
			bin = p
			break
		}
	}
	if bin == "" {
		return fmt.Errorf("no plugin %q in CNI_PATH %s", typ, cniPath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var cniErr types.Error
		if json.Unmarshal(stdout.Bytes(), &cniErr) == nil && cniErr.Msg != "" {
			return &cniErr
		}
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
