package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every pod's ADD and DEL execs this binary: the node agent's API client
// (client-go) and Prometheus client stay in cmd/netns-pin-agent, whose
// size and package initialisation would otherwise be paid by every pod
// (docs/design.md, "The node agent").
func TestPluginLinksNoAPIClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/prometheus/", "github.com/netns-pin/netns-pin/agent", "github.com/netns-pin/netns-pin/controller"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("the CNI plugin links %s", dep)
			}
		}
	}
}
