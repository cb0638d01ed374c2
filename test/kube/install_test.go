package kube

// netns-pin on the node came from deploy/installer-daemonset.yaml and the
// archive of make image (.cache/image/netns-pin.oci.tar, its linux/amd64
// image), not from a copy by the test harness: what is tested is what
// ships.

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
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
	// The node's image is make image's linux/amd64 image: its image ID is
	// the config digest the archive's index names for linux/amd64.
	want := archiveConfigDigest(t, filepath.Join(c.repo, ".cache", "image", "netns-pin.oci.tar"), "amd64")
	r := c.crictlRun("inspecti", "-o", "json", install)
	require.NoError(t, r.Err, "image %s is not in the node's image store:\n%s", install, r)
	var img struct {
		Status struct {
			ID string `json:"id"`
		} `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &img), "crictl inspecti: %s", r.Stdout)
	assert.Equal(t, strings.TrimPrefix(want, "sha256:"), strings.TrimPrefix(img.Status.ID, "sha256:"),
		"the node's %s is the linux/amd64 image of make image's archive", install)
	r = c.crictlRun("inspecti", "registry.k8s.io/pause:3.10")
	assert.NoError(t, r.Err, "the holder's image is in the node's store:\n%s", r)

	logs := c.mustKubectl(t, "-n", "kube-system", "logs", "daemonset/netns-pin-installer", "-c", "install")
	assert.Contains(t, logs, "installed ", "netns-pinctl install printed what it installed")
	// the node's sweeper runs the installed binary in the host's mount
	// namespace
	sweepLog := c.mustKubectl(t, "-n", "kube-system", "logs", "daemonset/netns-pin-installer", "-c", "sweep")
	assert.Contains(t, sweepLog, `"msg":"sweeper started"`, "the sweep container runs netns-pinctl sweep")
	// the binary in the node's CNI bin folder is the one the image carries
	installed, err := os.ReadFile(c.pinBin)
	require.NoError(t, err)
	built, err := os.ReadFile(filepath.Join(c.env["KUBE_IMAGE_BIN_DIR"], "netns-pin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(installed, built), "%s is not the linux/amd64 netns-pin of make image", c.pinBin)
}

// archiveConfigDigest reads an OCI archive of hack/image.sh (index.json ->
// the image index -> the manifest of arch -> its config) and returns the
// config's digest, the image ID a runtime shows.
func archiveConfigDigest(t *testing.T, path, arch string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "read %s", path)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[strings.TrimPrefix(h.Name, "./")] = b
	}
	type desc struct {
		Digest   string `json:"digest"`
		Platform struct {
			Architecture string `json:"architecture"`
		} `json:"platform"`
	}
	blob := func(d string) []byte {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")]
		require.True(t, ok, "%s has no blob %s", path, d)
		return b
	}
	var top, index struct {
		Manifests []desc `json:"manifests"`
	}
	require.NoError(t, json.Unmarshal(files["index.json"], &top), "%s: index.json", path)
	require.Len(t, top.Manifests, 1)
	require.NoError(t, json.Unmarshal(blob(top.Manifests[0].Digest), &index))
	for _, m := range index.Manifests {
		if m.Platform.Architecture != arch {
			continue
		}
		var man struct {
			Config desc `json:"config"`
		}
		require.NoError(t, json.Unmarshal(blob(m.Digest), &man))
		return man.Config.Digest
	}
	t.Fatalf("%s has no %s image", path, arch)
	return ""
}
