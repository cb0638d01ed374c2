package kube

// netns-pin on the node came from deploy/installer-daemonset.yaml and the
// image of the binaries of make build, not from a copy by the test harness.

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInstalledByDaemonSet(t *testing.T) {
	c := requireCluster(t)
	var ds struct {
		Status struct {
			NumberReady int `json:"numberReady"`
		} `json:"status"`
		Spec struct {
			Template struct {
				Spec struct {
					InitContainers []struct {
						Image string `json:"image"`
					} `json:"initContainers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	c.getJSON(t, &ds, "-n", "kube-system", "get", "daemonset", "netns-pin-installer")
	assert.Equal(t, 1, ds.Status.NumberReady)
	require.Len(t, ds.Spec.Template.Spec.InitContainers, 1)
	image := ds.Spec.Template.Spec.InitContainers[0].Image
	// the image deploy/ names is in the node's store, as are the holder's
	for _, ref := range []string{image, "registry.k8s.io/pause:3.10"} {
		r := c.crictlRun("inspecti", ref)
		assert.NoError(t, r.Err, "image %s is not in the node's image store:\n%s", ref, r)
	}
	logs := c.mustKubectl(t, "-n", "kube-system", "logs", "daemonset/netns-pin-installer", "-c", "install")
	assert.Contains(t, logs, "netns-pin", "the installer ran the installed binary's version command")
	// the node's sweeper runs the installed binary in the host's mount
	// namespace
	sweep := c.mustKubectl(t, "-n", "kube-system", "logs", "daemonset/netns-pin-installer", "-c", "sweep")
	assert.Contains(t, sweep, `"msg":"sweeper started"`, "the sweep container runs netns-pin sweep")
	// the binary in the node's CNI bin folder is the one the image carries
	installed, err := os.ReadFile(c.pinBin)
	require.NoError(t, err)
	built, err := os.ReadFile(filepath.Join(c.repo, ".cache", "cni", "bin", "netns-pin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(installed, built), "%s is not the plugin built into the image", c.pinBin)
}
