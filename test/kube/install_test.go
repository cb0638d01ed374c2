package kube

// netns-pin on the node came from deploy/installer-daemonset.yaml and the
// archive of make image (.cache/image/netns-pin.oci.tar, its linux/amd64
// image), not from a copy by the test harness: what is tested is what
// ships.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// installerImages returns the images of the installer DaemonSet's init
// container and sweep container.
func (c *cluster) installerImages(t *testing.T) (install, sweep string) {
	t.Helper()
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					InitContainers []struct {
						Image string `json:"image"`
					} `json:"initContainers"`
					Containers []struct {
						Image string `json:"image"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	c.getJSON(t, &ds, "-n", "kube-system", "get", "daemonset", "netns-pin-installer")
	require.Len(t, ds.Spec.Template.Spec.InitContainers, 1)
	require.Len(t, ds.Spec.Template.Spec.Containers, 1)
	return ds.Spec.Template.Spec.InitContainers[0].Image, ds.Spec.Template.Spec.Containers[0].Image
}

func TestInstalledByDaemonSet(t *testing.T) {
	c := requireCluster(t)
	var ds struct {
		Status struct {
			NumberReady int `json:"numberReady"`
		} `json:"status"`
	}
	c.getJSON(t, &ds, "-n", "kube-system", "get", "daemonset", "netns-pin-installer")
	assert.Equal(t, 1, ds.Status.NumberReady)
	install, sweep := c.installerImages(t)
	assert.Equal(t, c.env["KUBE_IMAGE"], install, "the installer runs make image's image, by the reference its archive names")
	assert.Equal(t, c.env["KUBE_IMAGE"], sweep)
	// The node's store has make image's index, by its digest: the archive
	// imported as it is (.cache/image/netns-pin.oci.tar.digest is what
	// hack/image.sh printed).
	digest, err := os.ReadFile(filepath.Join(c.repo, ".cache", "image", "netns-pin.oci.tar.digest"))
	require.NoError(t, err)
	r := c.crictlRun("inspecti", "-o", "json", install)
	require.NoError(t, r.Err, "image %s is not in the node's image store:\n%s", install, r)
	var img struct {
		Status struct {
			RepoDigests []string `json:"repoDigests"`
		} `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &img), "crictl inspecti: %s", r.Stdout)
	want := strings.SplitN(install, ":", 2)[0] + "@" + strings.TrimSpace(string(digest))
	assert.Contains(t, img.Status.RepoDigests, want, "the node's image is make image's index")
	r = c.crictlRun("inspecti", "registry.k8s.io/pause:3.10")
	assert.NoError(t, r.Err, "the holder's image is in the node's store:\n%s", r)

	logs := c.mustKubectl(t, "-n", "kube-system", "logs", "daemonset/netns-pin-installer", "-c", "install")
	assert.Contains(t, logs, "installed ", "netns-pin install printed what it installed")
	// the node's sweeper runs the installed binary in the host's mount
	// namespace
	sweepLog := c.mustKubectl(t, "-n", "kube-system", "logs", "daemonset/netns-pin-installer", "-c", "sweep")
	assert.Contains(t, sweepLog, `"msg":"sweeper started"`, "the sweep container runs netns-pin sweep")
	// the binary in the node's CNI bin folder is the one the image carries
	installed, err := os.ReadFile(c.pinBin)
	require.NoError(t, err)
	built, err := os.ReadFile(filepath.Join(c.env["KUBE_IMAGE_BIN_DIR"], "netns-pin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(installed, built), "%s is not the linux/amd64 netns-pin of make image", c.pinBin)
}
