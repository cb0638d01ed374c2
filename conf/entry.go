package conf

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// PluginEntry finds the netns-pin entry in a configuration file as an
// operator has it at hand: a conflist ({"plugins": [...]}), a Multus
// NetworkAttachmentDefinition in JSON (spec.config holds the conflist as a
// string), or a bare plugin entry. The conflist's name and cniVersion are
// copied into the entry, as a runtime does.
func PluginEntry(data []byte) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("not a JSON configuration: %w", err)
	}
	if spec, ok := top["spec"]; ok {
		var s struct {
			Config string `json:"config"`
		}
		if err := json.Unmarshal(spec, &s); err != nil || s.Config == "" {
			return nil, errors.New("NetworkAttachmentDefinition without spec.config")
		}
		return PluginEntry([]byte(s.Config))
	}
	plugins, ok := top["plugins"]
	if !ok {
		return data, nil
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(plugins, &list); err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	for _, p := range list {
		var typ string
		_ = json.Unmarshal(p["type"], &typ)
		if typ != "netns-pin" {
			continue
		}
		for _, k := range []string{"name", "cniVersion"} {
			if v, ok := top[k]; ok {
				p[k] = v
			}
		}
		return json.Marshal(p)
	}
	return nil, errors.New(`no plugin of type "netns-pin" in the conflist`)
}

// LoadFile is the configuration that --conf names for the command line
// and the node agent: the plugin entry of a conflist, a Multus
// NetworkAttachmentDefinition's config or a bare plugin entry (the
// defaults when path is ""), with the flags' path settings applied before
// validation. The file is read as every small file of netns-pin: a
// regular file of at most 1 MiB (the bound of a CNI call's stdin), opened
// without blocking.
func LoadFile(path string, overrides map[string]string) (*Config, error) {
	data := []byte(`{"type":"netns-pin"}`)
	if path != "" {
		raw, err := regfile.ReadFile(path, 0, 1<<20)
		if err != nil {
			return nil, err
		}
		if data, err = PluginEntry(raw); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return ParseWith(data, overrides)
}
