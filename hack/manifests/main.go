// Command manifests (make manifests) renders deploy/'s manifests from the
// chart deploy/chart/netns-pin with the helm binary of make tools, as
// deploy.Renderings lists them, and writes those that changed. deploy/'s
// tests fail, naming make manifests, while a rendered manifest differs
// from its file (docs/design.md, "The chart and deploy/").
package main

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/netns-pin/netns-pin/deploy"
)

func main() {
	root := flag.String("root", ".", "the repository")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	helm := deploy.HelmPath(root)
	if _, err := os.Stat(helm); err != nil {
		return fmt.Errorf("no helm at %s (hack/tools.sh helm builds it): %w", helm, err)
	}
	files, err := deploy.Render(helm, root)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(root, "deploy", filepath.FromSlash(name))
		old, err := os.ReadFile(p)
		if err == nil && bytes.Equal(old, files[name]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return err
		}
		fmt.Printf("deploy/%s\n", name)
	}
	return nil
}
