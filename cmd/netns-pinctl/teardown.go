package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containernetworking/cni/libcni"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/nsinfo"
	"github.com/netns-pin/netns-pin/internal/pinstore"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// openStore opens c's store as every command and the sweeper need it:
// able to finish the teardown of an attachment whose runtime gave up.
func openStore(c *conf.Config, log *slog.Logger, actor string) (*netnsstore.Store, error) {
	return pinstore.Open(c, log, actor, Version, chainTeardown(log))
}

// errNoCache is returned when an abandoned attachment's chain cannot be
// torn down for want of its cache entry: the pin is released all the same
// and the log names what IPAM did not get back.
var errNoCache = errors.New("no libcni cache entry was captured")

// chainTeardown runs, for an abandoned attachment, the DEL of every plugin
// that comes before netns-pin in its chain, with the captured
// configuration, CNI_PATH and arguments and with CNI_NETNS set to the pin:
// what the runtime would have done on a retry. DEL is idempotent in every
// CNI plugin, so running it again after a crash frees nothing twice.
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

// runChainDel is libcni's DelNetworkList of the chain cut before
// netns-pin, from the cache entry the record captured: the entry is put
// back into a cache folder of this run's own, where libcni reads the
// configuration, CNI_ARGS, capability arguments and result of the
// attachment as a runtime's DEL would.
func runChainDel(r *netnsstore.Record) error {
	td := r.Teardown
	if td == nil || len(td.Cache) == 0 {
		return errNoCache
	}
	netns, err := recordedPin(r)
	if err != nil {
		return err
	}
	cacheDir, err := os.MkdirTemp("", "netns-pin-teardown-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cacheDir)
	name := r.Network + "-" + r.ContainerID + "-" + r.IfName
	if err := os.Mkdir(filepath.Join(cacheDir, "results"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cacheDir, "results", name), td.Cache, 0o600); err != nil {
		return err
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(td.CNIPath), cacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: r.ContainerID, NetNS: netns, IfName: r.IfName}
	raw, rt, err := cni.GetNetworkListCachedConfig(&libcni.NetworkConfigList{Name: r.Network}, rt)
	if err == nil && raw == nil {
		err = errors.New("not a libcni cache entry")
	}
	if err != nil {
		return fmt.Errorf("captured cache entry %s: %w", td.CacheFile, err)
	}
	list, err := libcni.NetworkConfFromBytes(raw)
	if err != nil {
		return fmt.Errorf("captured configuration of %s: %w", r.Network, err)
	}
	own := slices.IndexFunc(list.Plugins, func(p *libcni.PluginConfig) bool { return p.Network.Type == pluginName })
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

// recordedPin is the CNI_NETNS of the chain's DEL: the pin, derived from
// the attachment (never a path read from the record), and only when it is
// the recorded netns; "" when the pin was lost, a DEL without a netns as
// runtimes send.
func recordedPin(r *netnsstore.Record) (string, error) {
	netns := filepath.Join(r.PinDir, netnsstore.PinsSubdir, r.Attachment)
	fd, err := nsinfo.OpenNetns(netns)
	if err != nil {
		return "", nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err != nil || (netnsstore.NetnsID{Dev: st.Dev, Ino: st.Ino}) != r.NetnsID() {
		return "", fmt.Errorf("pin %s is netns %d:%d, the record's is %s (%v): the chain's DEL is not run", netns, st.Dev, st.Ino, r.NetnsID(), err)
	}
	return netns, nil
}
