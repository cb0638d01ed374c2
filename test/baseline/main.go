// Command baseline is the reference point of the netns-pin benchmarks
// (hack/bench.sh): the cheapest chained CNI plugin that can be written with
// the same CNI library as netns-pin. It parses its configuration with skel
// and types (prevResult included, as every chained plugin must) and prints
// the previous result unchanged; DEL, CHECK, GC and STATUS succeed without
// doing anything. Whatever netns-pin takes beyond this is what netns-pin adds.
package main

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// parse decodes the configuration and its prevResult exactly like a chained
// plugin has to.
func parse(stdin []byte) (*types.PluginConf, error) {
	c := &types.PluginConf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, fmt.Errorf("parse configuration: %w", err)
	}
	if c.RawPrevResult != nil {
		if err := version.ParsePrevResult(c); err != nil {
			return nil, fmt.Errorf("parse prevResult: %w", err)
		}
	}
	return c, nil
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := parse(args.StdinData)
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "baseline: "+err.Error(), "")
	}
	if c.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "baseline: prevResult is missing", "")
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}

func cmdNop(args *skel.CmdArgs) error {
	if _, err := parse(args.StdinData); err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "baseline: "+err.Error(), "")
	}
	return nil
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdNop,
		Check:  cmdNop,
		GC:     cmdNop,
		Status: func(*skel.CmdArgs) error { return nil },
	}, version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"),
		"baseline: chained CNI plugin that prints prevResult (netns-pin benchmarks)")
}
