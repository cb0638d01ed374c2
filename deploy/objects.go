package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// Objects decodes the Kubernetes objects of the manifest file at path, in
// order, skipping empty documents: for the suites that check the
// manifests and that apply them to a cluster.
func Objects(path string) ([]map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ObjectsOf(path, data)
}

// ObjectsOf decodes the Kubernetes objects of a manifest's text (name says
// whose, in an error), as Objects does a file's.
func ObjectsOf(name string, data []byte) ([]map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var objs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s is not valid YAML: %w", name, err)
		}
		if doc != nil {
			objs = append(objs, doc)
		}
	}
}

// Field walks nested maps along path; nil when a key is missing.
func Field(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// String is the string at path, or "" when there is none.
func String(v any, path ...string) string {
	s, _ := Field(v, path...).(string)
	return s
}
