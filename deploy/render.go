package deploy

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// The chart (deploy/chart/netns-pin) is the one source of netns-pin's
// objects: the manifests of deploy/ that are objects of the chart are
// rendered from it by `make manifests` (hack/manifests), and a test of
// this package fails when they drift (docs/design.md, "The chart and
// deploy/"). The rest of deploy/ is written by hand: the kustomizations,
// and what changes other projects' objects or configuration
// (ceph-csi-config.yaml, multus-thick-patch.yaml,
// nodeplugin/daemonset-patch.yaml).

// ChartDir is the chart's folder under the repository.
const ChartDir = "deploy/chart/netns-pin"

// renderNamespace and renderRelease are what deploy/'s manifests are
// rendered as: the namespace every kustomize user has had.
const (
	renderNamespace = "kube-system"
	renderRelease   = "netns-pin"
)

// A Rendering is one `helm template` of the chart into deploy/: with
// Values (files under the repository) and Set, each template named in
// Files is written to its deploy/ path; with Files nil, every template
// that renders anything but Helm's hooks is, to the same path under
// deploy/ as under templates/.
type Rendering struct {
	Values []string
	Set    []string
	Files  map[string]string
}

// Renderings are deploy/'s manifests: the holder + link example with the
// monitoring objects (the kustomize base and deploy/monitoring/), and the
// network of the Rook-links and node-plugin examples.
var Renderings = []Rendering{
	{Values: []string{"deploy/chart/examples/holder-link.yaml"}, Set: []string{"monitoring.enabled=true"}},
	{Values: []string{"deploy/chart/examples/rook-links.yaml"}, Files: map[string]string{
		"network-attachment-definition.yaml": "network-attachment-definition-rook-links.yaml",
	}},
	{Values: []string{"deploy/chart/examples/nodeplugin.yaml"}, Files: map[string]string{
		"network-attachment-definition.yaml": "nodeplugin/network-attachment-definition.yaml",
	}},
}

// HelmPath is the helm binary make tools builds (hack/tools.sh helm),
// under the repository root, unless NETNS_PIN_HELM names another.
func HelmPath(root string) string {
	if p := os.Getenv("NETNS_PIN_HELM"); p != "" {
		return p
	}
	return filepath.Join(root, ".cache", "bin", "helm")
}

// Render renders every Rendering with the helm binary from the chart of
// the repository at root, and returns each manifest by its path under
// deploy/ (slash-separated), as `make manifests` writes it: without the
// documents of Helm's hooks (withoutHooks).
func Render(helm, root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, r := range Renderings {
		all, err := Template(helm, root, r.Values, r.Set)
		if err != nil {
			return nil, err
		}
		docs, err := withoutHooks(all)
		if err != nil {
			return nil, err
		}
		for _, src := range slices.Sorted(maps.Keys(docs)) {
			dst := src
			if r.Files != nil {
				var ok bool
				if dst, ok = r.Files[src]; !ok {
					continue
				}
			}
			if _, dup := out[dst]; dup {
				return nil, fmt.Errorf("deploy/%s: rendered twice (deploy.Renderings)", dst)
			}
			out[dst] = []byte(strings.Join(docs[src], "---\n"))
		}
		for src := range r.Files {
			if _, ok := docs[src]; !ok {
				return nil, fmt.Errorf("helm template with %s rendered nothing from templates/%s", strings.Join(r.Values, ", "), src)
			}
		}
	}
	return out, nil
}

// HookAnnotation marks a Helm hook: an object helm creates at an event of
// the release (the uninstall check before `helm uninstall`), not one of
// the release.
const HookAnnotation = "helm.sh/hook"

// withoutHooks is the documents of each template but Helm's hooks, and
// no template left with none. deploy/ has no hook: kustomize has no
// event to run one at, and its users have the removal guard and
// `netns-pinctl uninstall` instead.
func withoutHooks(docs map[string][]string) (map[string][]string, error) {
	out := map[string][]string{}
	for tmpl, texts := range docs {
		for _, text := range texts {
			objs, err := ObjectsOf("templates/"+tmpl, []byte(text))
			if err != nil {
				return nil, err
			}
			if !slices.ContainsFunc(objs, isHook) {
				out[tmpl] = append(out[tmpl], text)
			}
		}
	}
	return out, nil
}

// isHook: the object carries the annotation helm.sh/hook.
func isHook(obj map[string]any) bool {
	annotations, _ := Field(obj, "metadata", "annotations").(map[string]any)
	_, ok := annotations[HookAnnotation]
	return ok
}

// Template runs `helm template` of the chart of the repository at root
// as deploy/'s manifests are rendered (release netns-pin, namespace
// kube-system) with the values files (paths under root) and --set
// values, and returns the documents of each template by its path under
// templates/, in their order, each ending in one newline.
func Template(helm, root string, values, set []string) (map[string][]string, error) {
	args := []string{"template", renderRelease, filepath.Join(root, ChartDir), "--namespace", renderNamespace}
	for _, v := range values {
		args = append(args, "--values", filepath.Join(root, v))
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helm, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", helm, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return splitSources(stdout.String())
}

// sourcePrefix starts each document `helm template` prints, naming the
// template it came from (helm's action.renderResources prints
// "---\n# Source: <chart>/<template path>\n<document>\n").
const sourcePrefix = "---\n# Source: "

// splitSources splits helm template's output into the documents of each
// template. Helm strips the whitespace that leads a document and keeps
// the rest; each document here ends in exactly one newline, as in a file
// of several documents separated by "---" lines.
func splitSources(out string) (map[string][]string, error) {
	if out == "" {
		return nil, fmt.Errorf("helm template printed nothing")
	}
	if !strings.HasPrefix(out, sourcePrefix) {
		return nil, fmt.Errorf("helm template's output does not start with %q: %.80q", sourcePrefix, out)
	}
	docs := map[string][]string{}
	for _, part := range strings.Split(out, "\n"+sourcePrefix) {
		part = strings.TrimPrefix(part, sourcePrefix)
		name, doc, ok := strings.Cut(part, "\n")
		if !ok {
			return nil, fmt.Errorf("helm template: a document of %s without a newline", name)
		}
		_, tmpl, ok := strings.Cut(name, "/templates/")
		if !ok || path.Clean(tmpl) != tmpl || strings.HasPrefix(tmpl, "../") {
			return nil, fmt.Errorf("helm template: a document of %q, not of a template of the chart", name)
		}
		docs[tmpl] = append(docs[tmpl], strings.TrimRight(doc, "\n")+"\n")
	}
	return docs, nil
}
