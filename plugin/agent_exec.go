//go:build !agent

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/netns-pin/netns-pin/conf"
)

// sweepWithMetrics hands `sweep --metrics-address` to netns-pin-agent, this
// program built with the Prometheus client (go build -tags agent), found
// beside this binary. The plugin that every pod's ADD and DEL execs stays
// without it: the client library's size and its package initialisation
// would be paid by every pod (docs/operating.md, "Metrics").
func sweepWithMetrics(argv []string, _ *conf.Config, _ commandFlags, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "netns-pin: --metrics-address: find this binary:", err)
		return 1
	}
	agent := filepath.Join(filepath.Dir(self), agentName)
	err = syscall.Exec(agent, append([]string{agent}, argv...), os.Environ())
	fmt.Fprintf(stderr, "netns-pin: --metrics-address needs %s beside %s (the installer image ships both): %v\n", agent, self, err)
	return 1
}

// agentName is the binary that serves the sweeper's metrics: this program
// built with -tags agent, installed beside netns-pin.
const agentName = "netns-pin-agent"
