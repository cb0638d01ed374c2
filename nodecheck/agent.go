package nodecheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/netns-pin/netns-pin/internal/human"
	"github.com/netns-pin/netns-pin/internal/regfile"
)

// AgentStatus is what the node agent (cmd/netns-pin-agent) writes to
// <stateDir>-agent/status.json at each pass: check sees no API, and learns
// from it whether an agent runs and which pods of the node carry the
// finalizer netns-pin.io/pin. Defined here, not in the agent's package:
// that one links client-go, which the plugin (and so check) must not.
type AgentStatus struct {
	Node      string        `json:"node"`
	PID       int           `json:"pid"`
	Version   string        `json:"version,omitempty"`
	Started   time.Time     `json:"started"`
	Interval  time.Duration `json:"interval"`
	Heartbeat time.Time     `json:"heartbeat"`
	APIError  string        `json:"apiError,omitempty"`
	Blocked   string        `json:"blocked,omitempty"`
	// Refused names each request the API refuses the agent ("verb
	// resource: message").
	Refused []string `json:"refused,omitempty"`
	// Stores is how many stores are registered on the node, and
	// UnreadableStores why each one the agent cannot read cannot be.
	Stores           int              `json:"stores"`
	UnreadableStores []string         `json:"unreadableStores,omitempty"`
	Finalizers       []AgentStatusPod `json:"finalizers"`
	Stopped          time.Time        `json:"stopped,omitzero"`
}

// AgentStatusPod is a pod of the node carrying the finalizer.
type AgentStatusPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Deleting  bool   `json:"deleting,omitempty"`
}

// AgentStatusFile is the node agent's status file in dir, the agent's
// status folder (<stateDir>-agent).
func AgentStatusFile(dir string) string { return filepath.Join(dir, AgentStatusName) }

// AgentStatusName is the name of the node agent's status file in its
// status folder.
const AgentStatusName = "status.json"

// FinalizerPods reads the node agent's status in dir and returns the pods
// of the node ("namespace/name") that carried the finalizer
// netns-pin.io/pin at the agent's last pass. No status file: no agent ever
// ran there, and nil. A status that cannot be read is an error: the pods
// are unknown.
func FinalizerPods(dir string) ([]string, error) {
	st, err := readAgentStatus(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pods := make([]string, 0, len(st.Finalizers))
	for _, p := range st.Finalizers {
		pods = append(pods, p.Namespace+"/"+p.Name)
	}
	return pods, nil
}

// readAgentStatus reads status.json beneath dir, dir itself opened
// without following a symlink as its last component: as the store's
// readers read stateDir, a link planted there is never followed.
func readAgentStatus(dir string) (*AgentStatus, error) {
	where := AgentStatusFile(dir)
	data, err := regfile.ReadIn(dir, AgentStatusName, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("the node agent's status %s: %w", where, err)
	}
	var st AgentStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("the node agent's status %s is not JSON: %w", where, err)
	}
	return &st, nil
}

// agent reports the node agent: running or not, and the pods that carry
// the finalizer without a pin (being deleted: waiting for the agent).
func (c *checker) agent() {
	dir := strings.TrimSuffix(c.o.StateDir, "/") + "-agent"
	where := AgentStatusFile(dir)
	st, err := readAgentStatus(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.r.add(Finding{Check: "agent", Level: Warning, Where: where,
			What: "no node agent has run on this node: holders that carry the finalizer netns-pin.io/pin stay Terminating once deleted",
			Fix:  "install the netns-pin-agent DaemonSet (deploy/agent-daemonset.yaml); pods of this node that carry it: kubectl get pods -A --field-selector spec.nodeName=<node> -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.finalizers}{\"\\n\"}{end}'"})
		return
	case err != nil:
		c.r.add(Finding{Check: "agent", Level: Unknown, Where: where, What: err.Error()})
		return
	}
	var pinned map[string]bool
	if c.snap != nil {
		pinned = map[string]bool{}
		for _, r := range c.snap.Records {
			pinned[r.PodUID] = true
		}
	}
	var waiting []string
	for _, p := range st.Finalizers {
		if p.Deleting && pinned != nil && !pinned[p.UID] {
			waiting = append(waiting, p.Namespace+"/"+p.Name)
		}
	}
	age := c.o.Now().Sub(st.Heartbeat)
	down := !st.Stopped.IsZero() || age > max(3*st.Interval, time.Minute)
	switch {
	case down && len(st.Finalizers) > 0:
		c.r.add(Finding{Check: "agent", Level: Error, Where: where,
			What: fmt.Sprintf("no node agent runs (last seen %s ago) and %d pod(s) of this node carried the finalizer netns-pin.io/pin then: once deleted they stay Terminating", human.Age(age), len(st.Finalizers)),
			Fix:  "check the netns-pin-agent pod on this node (kubectl -n kube-system get pods -l app.kubernetes.io/name=netns-pin-agent --field-selector spec.nodeName=<node>)"})
	case down:
		c.r.add(Finding{Check: "agent", Level: Warning, Where: where, What: fmt.Sprintf("no node agent runs (last seen %s ago)", human.Age(age)),
			Fix: "check the netns-pin-agent pod on this node"})
	case len(st.Refused) > 0:
		// A refusal is no "next pass": nothing is lifted until RBAC or
		// the admission policy lets the agent.
		c.r.add(Finding{Check: "agent", Level: Error, Where: where,
			What: "the API refuses the node agent: " + strings.Join(st.Refused, "; "),
			Fix:  "give the agent's ServiceAccount what deploy/rbac.yaml gives it, and check deploy/validating-admission-policy.yaml"})
	case len(st.UnreadableStores) > 0:
		c.r.add(Finding{Check: "agent", Level: Error, Where: where,
			What: "the node agent cannot read a registered store, and lifts no finalizer: " + strings.Join(st.UnreadableStores, "; "),
			Fix:  "repair the store, or unregister one removed by hand (netns-pinctl --state-dir <dir> uninstall, or its file in /var/lib/netns-pin/stores)"})
	case len(waiting) > 0:
		c.r.add(Finding{Check: "agent", Level: Warning, Where: where,
			What: fmt.Sprintf("being deleted, carrying the finalizer without a pin (the agent lifts it at its next pass): %s", strings.Join(waiting, ", "))})
	case st.Blocked != "":
		c.r.add(Finding{Check: "agent", Level: Error, Where: where, What: "the node agent lifts no finalizer: " + st.Blocked, Fix: "netns-pinctl list shows the record that cannot be read"})
	case st.APIError != "":
		c.r.add(Finding{Check: "agent", Level: Warning, Where: where, What: "the node agent cannot reach the API: " + st.APIError})
	default:
		c.r.add(Finding{Check: "agent", Level: OK, Where: where,
			What: fmt.Sprintf("running (pid %d), last pass %s ago; %d pod(s) of the node carry the finalizer", st.PID, human.Age(age), len(st.Finalizers))})
	}
}
