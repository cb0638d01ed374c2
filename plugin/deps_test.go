package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every pod's ADD and DEL execs this binary, which does the CNI verbs and
// nothing else: the node agent's API client (client-go) and Prometheus
// client stay in cmd/netns-pin-agent, and the sweeper's libcni (which runs
// an abandoned chain's DEL) in cmd/netns-pinctl (docs/design.md, "Two
// binaries").
func TestPluginLinksNoAPIClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/prometheus/", "github.com/netns-pin/netns-pin/agent", "github.com/netns-pin/netns-pin/controller",
			"github.com/containernetworking/cni/libcni", "net/http", "github.com/netns-pin/netns-pin/cmd/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("the CNI plugin links %s", dep)
			}
		}
	}
}
