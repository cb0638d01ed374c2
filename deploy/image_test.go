package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// makeImage runs hack/image.sh (make image) into dir and returns what it
// prints: reference@digest.
func makeImage(t *testing.T, dir string) string {
	t.Helper()
	r := host.RunCmd(10*time.Minute, []string{"IMAGE_DIR=" + dir}, nil, "../hack/image.sh")
	require.NoError(t, r.Err, "%s", r)
	return strings.TrimSpace(r.Stdout)
}

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", ".."}, args...)...).Output()
	require.NoError(t, err, "git %v", args)
	return strings.TrimSpace(string(out))
}

// make image twice gives the same archive byte for byte, so the same
// digests; skopeo (Debian's) reads it as one index of two platforms and
// copies it; each platform's one layer holds exactly the static binaries,
// mode 0755, owner 0:0, at the commit's time; the binaries carry the
// version and the commit of git.
func TestImageReproducible(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	refA := makeImage(t, a)
	refB := makeImage(t, b)
	assert.Equal(t, refA, refB, "the same commit, the same digest")
	archA, err := os.ReadFile(filepath.Join(a, "netns-pin.oci.tar"))
	require.NoError(t, err)
	archB, err := os.ReadFile(filepath.Join(b, "netns-pin.oci.tar"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(archA, archB), "the two archives differ")

	version := gitOut(t, "describe", "--tags", "--always", "--dirty")
	commit := gitOut(t, "rev-parse", "HEAD")
	epoch, err := strconv.ParseInt(gitOut(t, "log", "-1", "--format=%ct", "HEAD"), 10, 64)
	require.NoError(t, err)
	ref, digest, ok := strings.Cut(refA, "@")
	require.True(t, ok, "make image printed %q", refA)
	assert.Equal(t, "registry.example.org/netns-pin:"+version, ref)

	archive := "oci-archive:" + filepath.Join(a, "netns-pin.oci.tar")
	r := host.RunCmd(time.Minute, nil, nil, "skopeo", "inspect", "--raw", archive)
	require.NoError(t, r.Err, "%s", r)
	var index struct {
		MediaType string `json:"mediaType"`
		Manifests []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
			Platform  struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
		Annotations map[string]string `json:"annotations"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &index))
	assert.Equal(t, "application/vnd.oci.image.index.v1+json", index.MediaType)
	var platforms []string
	for _, m := range index.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	assert.Equal(t, []string{"linux/amd64", "linux/arm64"}, platforms)
	assert.Equal(t, version, index.Annotations["org.opencontainers.image.version"])
	assert.Equal(t, commit, index.Annotations["org.opencontainers.image.revision"])

	r = host.RunCmd(time.Minute, nil, nil, "skopeo", "inspect", archive)
	require.NoError(t, r.Err, "%s", r)
	var inspected struct{ Digest string }
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &inspected))
	assert.Equal(t, digest, inspected.Digest, "the digest make image prints is the index's")

	for _, arch := range []string{"amd64", "arm64"} {
		r = host.RunCmd(time.Minute, nil, nil, "skopeo", "inspect", "--config", "--override-arch", arch, archive)
		require.NoError(t, r.Err, "%s", r)
		var config struct {
			Architecture string `json:"architecture"`
			Config       struct {
				Entrypoint []string `json:"Entrypoint"`
				User       string   `json:"User"`
			} `json:"config"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &config))
		assert.Equal(t, arch, config.Architecture)
		assert.Equal(t, []string{"/netns-pinctl"}, config.Config.Entrypoint)
	}
	copied := filepath.Join(t.TempDir(), "copy")
	r = host.RunCmd(time.Minute, nil, nil, "skopeo", "copy", "--all", archive, "dir:"+copied)
	require.NoError(t, r.Err, "skopeo copies every blob and checks its digest: %s", r)

	blobs := readArchive(t, archA)
	for _, m := range index.Manifests {
		var manifest struct {
			Layers []struct {
				MediaType string `json:"mediaType"`
				Digest    string `json:"digest"`
			} `json:"layers"`
		}
		require.NoError(t, json.Unmarshal(blobs[m.Digest], &manifest))
		require.Len(t, manifest.Layers, 1)
		assert.Equal(t, "application/vnd.oci.image.layer.v1.tar+gzip", manifest.Layers[0].MediaType)
		files := layerFiles(t, blobs[manifest.Layers[0].Digest], epoch)
		binDir := filepath.Join(a, "bin", "linux-"+m.Platform.Architecture)
		assert.Equal(t, []string{"netns-pin", "netns-pin-agent", "netns-pin-controller", "netns-pinctl"}, sortedNames(files), "only the static binaries, no shell")
		for name, data := range files {
			built, err := os.ReadFile(filepath.Join(binDir, name))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(built, data), "%s/%s is the built binary", m.Platform.Architecture, name)
		}
	}

	// The stamp: version and commit from git, in both binaries; the plugin
	// run without CNI_COMMAND names itself on stderr.
	r = host.RunCmd(time.Minute, nil, nil, filepath.Join(a, "bin", "linux-amd64", "netns-pinctl"), "version")
	require.NoError(t, r.Err, "%s", r)
	assert.Equal(t, "netns-pinctl "+version+" (commit "+commit+")", strings.SplitN(r.Stdout, "\n", 2)[0])
	r = host.RunCmd(time.Minute, nil, nil, filepath.Join(a, "bin", "linux-amd64", "netns-pin"))
	assert.True(t, strings.HasPrefix(r.Stderr, "netns-pin "+version+" (commit "+commit+"): "), "%s", r)
}

// readArchive returns the blobs of an OCI archive by digest.
func readArchive(t *testing.T, archive []byte) map[string][]byte {
	t.Helper()
	blobs := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return blobs
		}
		require.NoError(t, err)
		if d, ok := strings.CutPrefix(h.Name, "blobs/sha256/"); ok {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			blobs["sha256:"+d] = b
		}
	}
}

// layerFiles returns the regular files of a gzip'ed layer, checking every
// entry's owner, mode and time.
func layerFiles(t *testing.T, layer []byte, epoch int64) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	require.NoError(t, err)
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		require.NoError(t, err)
		assert.Equal(t, 0, h.Uid, h.Name)
		assert.Equal(t, 0, h.Gid, h.Name)
		assert.Equal(t, epoch, h.ModTime.Unix(), "%s: the commit's time", h.Name)
		require.Equal(t, byte(tar.TypeReg), h.Typeflag, "%s: only regular files", h.Name)
		assert.Equal(t, int64(0o755), h.Mode, h.Name)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[h.Name] = b
	}
}

func sortedNames(m map[string][]byte) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
