// Command ociimage writes a one-layer OCI image archive (an image layout in
// a tar file, as `ctr images import` reads it) whose layer holds one static
// binary as its entrypoint. hack/runtime/setup.sh uses it to make the pause
// image of the runtime end to end suite without a registry:
//
//	go run ./hack/runtime/ociimage -bin pause -ref localhost/netns-pin/pause:test -o pause.tar
//
// hack/kube/build.sh also packs images of several files with it: -add puts
// more files in the layer, -symlink adds symbolic links (busybox's applets)
// and -cmd sets the image's default arguments:
//
//	go run ./hack/runtime/ociimage -bin netns-pin -add /bin/busybox=busybox \
//	    -symlink /bin/sh=busybox -cmd version -ref registry.example.org/netns-pin:v0.1.0 -o installer.tar
//
// With -platform it writes a release image instead (make image,
// hack/image.sh): an image index with one manifest per platform, each of
// one gzip'ed layer holding every file of that platform's folder at /,
// every time -epoch (seconds since 1970, SOURCE_DATE_EPOCH):
//
//	go run ./hack/runtime/ociimage -platform linux/amd64=out/linux-amd64 \
//	    -platform linux/arm64=out/linux-arm64 -entrypoint /netns-pin -cmd version \
//	    -epoch 1764547200 -annotation org.opencontainers.image.version=v0.1.0 \
//	    -ref registry.example.org/netns-pin:v0.1.0 -o netns-pin.oci.tar
//
// and prints the index's digest, the one a registry shows for the tag.
//
// The output is deterministic: the same binaries give the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
)

// epoch is the fixed timestamp of every file (-epoch), so digests are
// reproducible.
var epoch = time.Unix(0, 0).UTC()

// pairs is a repeatable DST=SRC flag.
type pairs map[string]string

func (p pairs) String() string { return fmt.Sprint(map[string]string(p)) }
func (p pairs) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || !strings.HasPrefix(dst, "/") || src == "" {
		return fmt.Errorf("%q: want /path/in/image=source", v)
	}
	p[dst] = src
	return nil
}

// image is what goes into the archive besides the entrypoint binary.
type image struct {
	add      pairs // path in the image -> file on the host
	symlinks pairs // path in the image -> link target
	cmd      []string
}

func main() {
	bin := flag.String("bin", "", "static binary to put into the image")
	name := flag.String("name", "", "path of the binary in the image (default /<basename of -bin>)")
	ref := flag.String("ref", "localhost/netns-pin/pause:test", "image reference (io.containerd.image.name)")
	out := flag.String("o", "image.tar", "output archive")
	img := image{add: pairs{}, symlinks: pairs{}}
	flag.Var(img.add, "add", "/path/in/image=file: one more file (repeatable)")
	flag.Var(img.symlinks, "symlink", "/path/in/image=target: a symbolic link (repeatable)")
	cmd := flag.String("cmd", "", "default arguments of the entrypoint, space separated")
	var rel release
	flag.Var((*list)(&rel.platforms), "platform", "os/arch=folder: a release image's platform and the folder of its files (repeatable)")
	flag.StringVar(&rel.entrypoint, "entrypoint", "", "with -platform: the entrypoint, one of the folder's files")
	rel.annotations = keyValues{}
	flag.Var(keyValues(rel.annotations), "annotation", "key=value: with -platform, an annotation of the index and a label of each config (repeatable)")
	epochSeconds := flag.Int64("epoch", 0, "time of every file and of the image, seconds since 1970 (SOURCE_DATE_EPOCH)")
	flag.Parse()
	img.cmd = strings.Fields(*cmd)
	epoch = time.Unix(*epochSeconds, 0).UTC()
	if len(rel.platforms) > 0 {
		if *bin != "" || *name != "" || len(img.add) > 0 || len(img.symlinks) > 0 {
			fmt.Fprintln(os.Stderr, "ociimage: -platform takes its files from the folders, not from -bin, -name, -add or -symlink")
			os.Exit(2)
		}
		rel.cmd = img.cmd
		if err := runRelease(rel, *ref, *out); err != nil {
			fmt.Fprintln(os.Stderr, "ociimage:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*bin, *name, *ref, *out, img); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(bin, name, ref, out string, img image) error {
	if bin == "" {
		return fmt.Errorf("-bin is required")
	}
	if name == "" {
		name = "/" + path.Base(bin)
	}
	if !strings.HasPrefix(name, "/") {
		return fmt.Errorf("-name %q: want an absolute path", name)
	}
	layer, err := layerOf(bin, name, img)
	if err != nil {
		return err
	}
	layerDesc := describe(mediaLayer, layer)
	imgConfig := map[string]any{"Entrypoint": []string{name}}
	if len(img.cmd) > 0 {
		imgConfig["Cmd"] = img.cmd
	}
	config, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       imgConfig,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
		"history":      []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "hack/runtime/ociimage"}},
	})
	if err != nil {
		return err
	}
	configDesc := describe(mediaConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := describe(mediaManifest, manifest)
	manifestDesc.Platform = &platform{Architecture: runtime.GOARCH, OS: "linux"}
	return writeLayout(out, ref, manifestDesc, [][]byte{layer, config, manifest})
}

// writeLayout writes the OCI archive out: an image layout whose index.json
// names top under ref (the annotations containerd and skopeo read), with
// the blobs, atomically (a temporary file, then a rename).
func writeLayout(out, ref string, top descriptor, blobs [][]byte) error {
	top.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": tagOf(ref),
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests":     []descriptor{top},
	})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": index,
	}
	for _, b := range blobs {
		files["blobs/sha256/"+hexDigest(b)] = b
	}
	archive, err := tarball(files, 0o644)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, archive, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// layerOf is the image's one layer: the binary at name, the files of
// -add and the links of -symlink.
func layerOf(bin, name string, img image) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	content := map[string][]byte{strings.TrimPrefix(name, "/"): data}
	for dst, src := range img.add {
		if content[strings.TrimPrefix(dst, "/")], err = os.ReadFile(src); err != nil {
			return nil, err
		}
	}
	links := map[string]string{}
	for dst, target := range img.symlinks {
		links[strings.TrimPrefix(dst, "/")] = target
	}
	return tarballWithLinks(content, links, 0o755)
}

// tagOf returns the tag of ref ("localhost/x/pause:test" -> "test").
func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}

func hexDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func describe(mediaType string, b []byte) descriptor {
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hexDigest(b), Size: int64(len(b))}
}

// tarball writes files (with their parent folders) in sorted order.
func tarball(files map[string][]byte, mode int64) ([]byte, error) {
	return tarballWithLinks(files, nil, mode)
}

// tarballWithLinks is tarball plus symbolic links (name -> target).
func tarballWithLinks(files map[string][]byte, links map[string]string, mode int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	linkNames := make([]string, 0, len(links))
	for n := range links {
		linkNames = append(linkNames, n)
	}
	slices.Sort(linkNames)
	dirs := map[string]bool{}
	for _, n := range append(slices.Clone(names), linkNames...) {
		for d := path.Dir(n); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	slices.Sort(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: mode, Size: int64(len(files[n])), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	for _, n := range linkNames {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: n, Linkname: links[n], Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
