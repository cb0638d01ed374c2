package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// maxCacheEntry bounds the libcni cache entry copied into a record; a
// chain's configuration and result are a few KiB.
const maxCacheEntry = 256 << 10

// teardownOf is what a later teardown of this DEL's attachment needs,
// kept by the store at the first refusal (docs/design.md §7): the
// runtime's CNI_NETNS, CNI_PATH and CNI_ARGS, and the libcni result cache
// entry of the attachment (the chain's configuration, arguments,
// capability arguments and result), looked up in c.CacheDirs. A runtime
// that gives up (CRI-O) removes that entry right after the failed DEL.
func teardownOf(args *skel.CmdArgs, c *conf.Config) *netnsstore.Teardown {
	td := &netnsstore.Teardown{Netns: args.Netns, CNIPath: args.Path, CNIArgs: args.Args}
	name := fmt.Sprintf("%s-%s-%s", c.Name, args.ContainerID, args.IfName)
	for _, dir := range c.CacheDirs {
		p := filepath.Join(dir, "results", name)
		data, err := readLimited(p, maxCacheEntry)
		if err == nil {
			td.CacheFile, td.Cache = p, data
			break
		}
	}
	return td
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("%s is over %d bytes", path, limit)
	}
	return data, err
}

// errNoCache is returned when an abandoned attachment's chain cannot be
// torn down for want of its cache entry: the pin is released all the same
// and the log names what IPAM did not get back.
var errNoCache = errors.New("no libcni cache entry was captured")

// chainTeardown runs, for an abandoned attachment, the DEL of every plugin
// that comes before netns-pin in its chain, in reverse order, through
// libcni, with the captured configuration, CNI_PATH and arguments and with
// CNI_NETNS set to the pin: what the runtime would have done on a retry.
// DEL is idempotent in every CNI plugin, so running it again after a crash
// frees nothing twice.
func chainTeardown(log logger) netnsstore.TeardownFunc {
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

type logger interface {
	Warn(msg string, args ...any)
}

func runChainDel(r *netnsstore.Record) error {
	td := r.Teardown
	if td == nil || len(td.Cache) == 0 {
		return errNoCache
	}
	// libcni reads the cached configuration and result from a cache
	// folder; give it a private one holding the captured entry.
	dir, err := os.MkdirTemp("", "netns-pin-teardown-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	entry := filepath.Join(dir, "results", fmt.Sprintf("%s-%s-%s", r.Network, r.ContainerID, r.IfName))
	if err := os.MkdirAll(filepath.Dir(entry), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(entry, td.Cache, 0o600); err != nil {
		return err
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(td.CNIPath), dir, nil)
	rt := &libcni.RuntimeConf{ContainerID: r.ContainerID, IfName: r.IfName, NetNS: r.PinPath}
	if f, _, err := netnsstore.OpenNetns(r.PinPath); err != nil {
		rt.NetNS = "" // the pin was lost (unpinned): a DEL without a netns, as runtimes send
	} else {
		f.Close()
	}
	raw, rt, err := cni.GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: r.Network}, rt)
	if err != nil {
		return fmt.Errorf("captured cache entry %s: %w", td.CacheFile, err)
	}
	if raw == nil {
		return fmt.Errorf("captured cache entry %s: %w", td.CacheFile, errNoCache)
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		return fmt.Errorf("captured configuration of %s: %w", r.Network, err)
	}
	own := -1
	for i, p := range list.Plugins {
		if p.Network.Type == "netns-pin" {
			own = i
		}
	}
	if own < 0 {
		return fmt.Errorf("captured configuration of %s has no netns-pin entry", r.Network)
	}
	list.Plugins = list.Plugins[:own]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cni.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("DEL of the chain before netns-pin: %w", err)
	}
	return nil
}
