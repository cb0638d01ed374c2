package conf

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/netnsstore"
)

type linkTemplate struct {
	source string
	t      fieldTemplate
}

func compileLink(pinDir, s string) (linkTemplate, error) {
	t, err := parseFieldTemplate(s, "Namespace", "Name")
	if err != nil {
		return linkTemplate{}, err
	}
	lt := linkTemplate{source: s, t: t}
	// Render with a sample cluster so errors show up at parse time.
	if _, err := lt.render(pinDir, Cluster{Namespace: "ns", Name: "name"}); err != nil {
		return linkTemplate{}, err
	}
	return lt, nil
}

func (lt linkTemplate) render(pinDir string, c Cluster) (string, error) {
	raw := lt.t.expand(func(f string) string {
		if f == "Namespace" {
			return c.Namespace
		}
		return c.Name
	})
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
