// Command netns-pin is a chained CNI plugin that pins the network namespace
// of a Ceph holder pod at a well-known path and refuses to release it while
// Ceph clients still use it. Run with CNI_COMMAND set it speaks CNI; run
// with a subcommand it is the operator's command line.
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/netns-pin/netns-pin/conf"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

// supportedVersions: 0.3.x where the library allows it; CHECK needs 0.4.0,
// GC and STATUS 1.1.0 (skel enforces both).
var supportedVersions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

func main() {
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
	}
	if err := limitStdin(); err != nil {
		_ = err.Print()
		os.Exit(1)
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		GC:     cmdGC,
		Status: cmdStatus,
	}, supportedVersions, "netns-pin "+Version+": pins Ceph holder pods' network namespaces")
}

// limitStdin refuses a configuration over conf.MaxConfigSize before skel
// reads it whole into memory, and hands skel the bytes that were read.
func limitStdin() *types.Error {
	if os.Getenv("CNI_COMMAND") == "VERSION" {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(os.Stdin, conf.MaxConfigSize+1))
	if err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("read configuration: %v", err), "")
	}
	if len(data) > conf.MaxConfigSize {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("configuration is over the %d byte limit", conf.MaxConfigSize), "")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return types.NewError(types.ErrIOFailure, err.Error(), "")
	}
	go func() {
		_, _ = io.Copy(w, bytes.NewReader(data))
		w.Close()
	}()
	os.Stdin = r
	return nil
}
