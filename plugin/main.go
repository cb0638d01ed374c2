// Command netns-pin is a chained CNI plugin that pins the network namespace
// of a Ceph holder pod at a well-known path and refuses to release it while
// Ceph clients still use it. It speaks CNI only; the operator's commands
// are netns-pinctl's (cmd/netns-pinctl).
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/netns-pin/netns-pin/internal/buildinfo"
)

// Version and Commit are stamped at build time from git (hack/version.sh:
// -ldflags "-X main.Version=<git describe> -X main.Commit=<commit>");
// unstamped, main takes them from the build information
// (internal/buildinfo).
var (
	Version = buildinfo.Unstamped
	Commit  = ""
)

// supportedVersions: 0.3.x where the library allows it; CHECK needs 0.4.0,
// GC and STATUS 1.1.0 (skel enforces both).
var supportedVersions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

func main() {
	Version, Commit = buildinfo.Resolve(Version, Commit)
	// Run without CNI_COMMAND, skel prints this line first on stderr:
	// netns-pinctl install checks the installed binary by it.
	about := buildinfo.String("netns-pin", Version, Commit) + ": pins Ceph holder pods' network namespaces"
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		GC:     cmdGC,
		Status: cmdStatus,
	}, supportedVersions, about)
}
