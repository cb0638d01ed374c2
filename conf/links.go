package conf

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/netnsstore"
)

type linkTemplate struct {
	source string
	t      fieldTemplate
	// perNamespace: the template has no {{.Name}}, so all clusters of a
	// namespace render to the same path (Rook's <namespace>.net.ns); the
	// store refuses a second cluster of the namespace at ADD.
	perNamespace bool
}

func compileLink(pinDir, s string) (linkTemplate, error) {
	t, err := parseFieldTemplate(s, "Namespace", "Name")
	if err != nil {
		return linkTemplate{}, err
	}
	lt := linkTemplate{source: s, t: t}
	// Render with a sample cluster so errors show up at parse time.
	sample, err := lt.render(pinDir, Cluster{Namespace: "ns", Name: "name"})
	if err != nil {
		return linkTemplate{}, err
	}
	if err := lt.oneClusterPerPath(pinDir, sample); err != nil {
		return linkTemplate{}, err
	}
	return lt, nil
}

// oneClusterPerPath refuses a template that two different clusters can
// render to the same path, so that no cluster's link can be another's
// (docs/design.md §6). It holds when, after a literal prefix, the first
// field is {{.Namespace}} followed by '/' or '.', which a namespace (a
// DNS-1123 label) cannot contain: the rendered path then gives the
// namespace back, and, the namespace known, the remaining text gives the
// name back (its length fixes the name's, the first {{.Name}} its
// letters). Path cleaning must change nothing, or "x/{{.Name}}/.." would
// drop the name: the sample rendering shows it, since text that is all
// literal is the same for every cluster and a field never renders to an
// empty, "." or ".." component. A template without {{.Name}} is a link per
// namespace, one cluster each.
func (lt *linkTemplate) oneClusterPerPath(pinDir, sample string) error {
	raw := lt.expand(Cluster{Namespace: "ns", Name: "name"})
	if !filepath.IsAbs(raw) {
		raw = filepath.Clean(pinDir) + "/" + raw
	}
	if raw != sample {
		return fmt.Errorf("renders to %q, which path cleaning changes (a '.' or '..' component, '//' or a trailing '/'): clusters could share a link", raw)
	}
	first := slices.IndexFunc(lt.t.parts, func(p templatePart) bool { return p.field != "" })
	if first < 0 || lt.t.parts[first].field != "Namespace" {
		return errors.New("the first placeholder must be {{.Namespace}}: otherwise clusters of different namespaces can share a link")
	}
	if !slices.ContainsFunc(lt.t.parts, func(p templatePart) bool { return p.field == "Name" }) {
		lt.perNamespace = true
		return nil
	}
	if next := first + 1; next >= len(lt.t.parts) || lt.t.parts[next].field != "" ||
		(lt.t.parts[next].text[0] != '/' && lt.t.parts[next].text[0] != '.') {
		return errors.New("{{.Namespace}} must be followed by '/' or '.', which a namespace cannot contain: " +
			`otherwise two clusters can share a link ("{{.Namespace}}-{{.Name}}" renders a/b-c and a-b/c alike)`)
	}
	return nil
}

func (lt linkTemplate) expand(c Cluster) string {
	return lt.t.expand(func(f string) string {
		if f == "Namespace" {
			return c.Namespace
		}
		return c.Name
	})
}

func (lt linkTemplate) render(pinDir string, c Cluster) (string, error) {
	raw := lt.expand(c)
	p := raw
	if p == "" || strings.ContainsRune(p, 0) {
		return "", errors.New("renders to an empty path or one with a NUL byte")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(pinDir, p)
	}
	p = filepath.Clean(p)
	pins := filepath.Join(pinDir, netnsstore.PinsSubdir)
	if within(p, pins) {
		return "", fmt.Errorf("renders to %q, inside %q where pins live", p, pins)
	}
	if !strings.HasPrefix(raw, "/") && !within(p, pinDir) {
		return "", fmt.Errorf("renders to %q, outside pinDir %q", p, pinDir)
	}
	if p == pinDir || p == "/" {
		return "", fmt.Errorf("renders to the directory %q itself", p)
	}
	for _, part := range strings.Split(p, "/") {
		if len(part) > unix.NAME_MAX {
			return "", fmt.Errorf("renders to %q, whose component %.20q... is longer than %d bytes", p, part, unix.NAME_MAX)
		}
	}
	return p, nil
}

// LinkPaths returns the absolute well-known paths for cluster c.
func (c *Config) LinkPaths(cl Cluster) ([]string, error) {
	out := make([]string, 0, len(c.links))
	for _, lt := range c.links {
		p, err := lt.render(c.PinDir, cl)
		if err != nil {
			return nil, fmt.Errorf("link %q for cluster %s: %w", lt.source, cl, err)
		}
		out = append(out, p)
	}
	return out, nil
}
