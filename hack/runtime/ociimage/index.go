package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const mediaLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"

// release is the image of `make image` (hack/image.sh): one image index
// with a manifest per platform, each of one layer holding the files of
// that platform's folder at /, mode 0755.
type release struct {
	platforms   []string          // "linux/amd64=DIR", in flag order
	entrypoint  string            // e.g. /netns-pin
	cmd         []string          // default arguments
	annotations map[string]string // of the index, and the configs' labels
}

// runRelease writes the OCI archive of r: the index and everything it
// names, in sorted tar entries, every time epoch, owner 0:0. The same
// binaries, epoch and annotations give the same bytes, so the same
// digests, wherever it runs.
func runRelease(r release, ref, out string) error {
	if r.entrypoint == "" || !strings.HasPrefix(r.entrypoint, "/") {
		return fmt.Errorf("-entrypoint %q: want an absolute path", r.entrypoint)
	}
	blobs := map[string][]byte{}
	var manifests []descriptor
	seen := map[string]bool{}
	for _, p := range r.platforms {
		plat, dir, ok := strings.Cut(p, "=")
		osName, arch, ok2 := strings.Cut(plat, "/")
		if !ok || !ok2 || osName == "" || arch == "" || dir == "" {
			return fmt.Errorf("-platform %q: want os/arch=folder", p)
		}
		if seen[plat] {
			return fmt.Errorf("-platform %s given twice", plat)
		}
		seen[plat] = true
		m, err := platformManifest(osName, arch, dir, r, blobs)
		if err != nil {
			return fmt.Errorf("%s: %w", plat, err)
		}
		manifests = append(manifests, m)
	}
	if len(manifests) == 0 {
		return fmt.Errorf("no -platform")
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests":     manifests,
		"annotations":   r.annotations,
	})
	if err != nil {
		return err
	}
	blobs[hexDigest(index)] = index
	indexDesc := describe(mediaIndex, index)
	all := make([][]byte, 0, len(blobs))
	for _, b := range blobs {
		all = append(all, b)
	}
	if err := writeLayout(out, ref, indexDesc, all); err != nil {
		return err
	}
	// The digest a registry shows for the pushed tag.
	fmt.Println(indexDesc.Digest)
	return nil
}

// platformManifest adds the layer, config and manifest of one platform
// to blobs and returns the manifest's descriptor.
func platformManifest(osName, arch, dir string, r release, blobs map[string][]byte) (descriptor, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return descriptor{}, err
	}
	content := map[string][]byte{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return descriptor{}, fmt.Errorf("%s: only regular files go into the image", filepath.Join(dir, e.Name()))
		}
		if content[e.Name()], err = os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
			return descriptor{}, err
		}
	}
	if _, ok := content[strings.TrimPrefix(r.entrypoint, "/")]; !ok {
		return descriptor{}, fmt.Errorf("the entrypoint %s is not in %s", r.entrypoint, dir)
	}
	tarLayer, err := tarball(content, 0o755)
	if err != nil {
		return descriptor{}, err
	}
	layer, err := gzipped(tarLayer)
	if err != nil {
		return descriptor{}, err
	}
	imgConfig := map[string]any{"Entrypoint": []string{r.entrypoint}, "User": "0:0"}
	if len(r.cmd) > 0 {
		imgConfig["Cmd"] = r.cmd
	}
	if len(r.annotations) > 0 {
		imgConfig["Labels"] = r.annotations
	}
	config, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": arch,
		"os":           osName,
		"config":       imgConfig,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hexDigest(tarLayer)}},
		"history":      []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "hack/image.sh"}},
	})
	if err != nil {
		return descriptor{}, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        describe(mediaConfig, config),
		"layers":        []descriptor{describe(mediaLayerGzip, layer)},
	})
	if err != nil {
		return descriptor{}, err
	}
	for _, b := range [][]byte{layer, config, manifest} {
		blobs[hexDigest(b)] = b
	}
	d := describe(mediaManifest, manifest)
	d.Platform = &platform{Architecture: arch, OS: osName}
	return d, nil
}

// gzipped compresses b with no name and no time in the gzip header:
// compress/gzip's output depends only on the input, the level and the Go
// release that builds this tool (go.mod's go line).
func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// keyValues is a repeatable KEY=VALUE flag.
type keyValues map[string]string

func (p keyValues) String() string { return fmt.Sprint(map[string]string(p)) }
func (p keyValues) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", v)
	}
	p[k] = val
	return nil
}

// list is a repeatable flag kept in order.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }
