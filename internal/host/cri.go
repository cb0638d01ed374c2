package host

import (
	"encoding/json"
	"fmt"
)

// SandboxInspect is the part of `crictl inspectp -o json` of a pod
// sandbox that the suites read.
type SandboxInspect struct {
	Status struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Network struct {
			IP string `json:"ip"`
		} `json:"network"`
	} `json:"status"`
	Info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct {
					Type string `json:"type"`
					Path string `json:"path"`
				} `json:"namespaces"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	} `json:"info"`
}

// ParseInspectp decodes the output of `crictl inspectp -o json`.
func ParseInspectp(out []byte) (SandboxInspect, error) {
	var st SandboxInspect
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("crictl inspectp output: %w", err)
	}
	return st, nil
}

// NetnsPath is the sandbox's network namespace file ("" when it has none).
func (st SandboxInspect) NetnsPath() string {
	for _, n := range st.Info.RuntimeSpec.Linux.Namespaces {
		if n.Type == "network" {
			return n.Path
		}
	}
	return ""
}
