package main

import (
	"fmt"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/pinstore"
	"github.com/netns-pin/netns-pin/internal/regfile"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// teardownOf is what a later teardown of this DEL's attachment needs,
// kept by the store at the first refusal (docs/design.md §7): the
// runtime's CNI_NETNS and CNI_PATH, and the libcni result cache entry of
// the attachment (the chain's configuration, CNI_ARGS, capability
// arguments and result), looked up in c.CacheDirs. A runtime that gives up
// (CRI-O) removes that entry right after the failed DEL; the sweeper
// (netns-pinctl sweep) runs the chain's DEL from this copy.
func teardownOf(args *skel.CmdArgs, c *conf.Config) *netnsstore.Teardown {
	td := &netnsstore.Teardown{Netns: args.Netns, CNIPath: args.Path}
	name := fmt.Sprintf("%s-%s-%s", c.Name, args.ContainerID, args.IfName)
	for _, dir := range c.CacheDirs {
		p := filepath.Join(dir, "results", name)
		if data, err := regfile.ReadFile(p, unix.O_NOFOLLOW, pinstore.MaxCacheEntry); err == nil {
			td.CacheFile, td.Cache = p, data
			break
		}
	}
	return td
}
