package kube

// The node agent without its list and watch rights (an RBAC edit, a
// ClusterRole of another release): it says so out loud and lifts nothing;
// holders wait; given its rights back, it lifts.

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/controller"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// controllerMetricsPort is deploy/controller.yaml's --listen-address port.
const controllerMetricsPort = "9854"

// agentPodReady is the Ready condition of the node's agent pod that is not
// being deleted ("" when there is none).
func (c *cluster) agentPodReady(t *testing.T) string {
	t.Helper()
	var list struct {
		Items []pod `json:"items"`
	}
	c.getJSON(t, &list, "-n", agentNS, "get", "pods", "-l", controller.AgentLabel+"="+controller.AgentName,
		"--field-selector", "spec.nodeName="+c.nodeName)
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == "Ready" {
				return cond.Status
			}
		}
	}
	return ""
}

// Scenario: the agent's ClusterRole loses list and watch of pods and the
// agent starts again. Its pod stays not Ready, /readyz names the verb, its
// metric netns_pin_agent_ready is 0 (what the alert NetnsPinAgentNotReady
// of deploy/monitoring/ looks at: max by (node) (netns_pin_agent_ready) ==
// 0); a holder deleted meanwhile is released on the node but keeps its
// object, and the controller counts it as agent_not_ready. deploy/rbac.yaml
// applied again: the agent becomes ready and lifts the finalizer.
func TestAgentWithoutListRBAC(t *testing.T) {
	c := requireCluster(t)
	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	ho := h.waitHolder(t)
	restore := func() {
		c.mustKubectl(t, "apply", "-f", filepath.Join(c.repo, "deploy", "rbac.yaml"))
	}
	t.Cleanup(func() {
		restore()
		require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool { return c.agentPodReady(t) == "True" }),
			"the agent is not Ready again with deploy/rbac.yaml")
	})
	c.mustKubectl(t, "patch", "clusterrole", "netns-pin-agent", "--type=json",
		"-p", `[{"op":"test","path":"/rules/0/resources","value":["pods"]},{"op":"replace","path":"/rules/0/verbs","value":["get","patch"]}]`)
	name, _ := c.agentPod(t)
	require.NotEmpty(t, name)
	c.mustKubectl(t, "-n", agentNS, "delete", "pod", name, "--wait=true")

	// the new agent: not Ready, saying why
	var body string
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool {
		resp, err := (&http.Client{Timeout: cmdTimeout}).Get("http://127.0.0.1:" + metricsPort + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, "list")
	}), "the agent without list rights is not said not ready: %q", body)
	t.Logf("/readyz of the agent without list rights: %s", strings.TrimSpace(body))
	ready, ok := hosttest.MetricValue(scrapeLocal(t, metricsPort), "netns_pin_agent_ready")
	require.True(t, ok)
	assert.Zero(t, ready, "netns_pin_agent_ready: NetnsPinAgentNotReady's expression is true")
	require.True(t, host.Poll(podTimeout, 500*time.Millisecond, func() bool { return c.agentPodReady(t) == "False" }),
		"the agent's pod is not marked not Ready by its readiness probe")

	// a holder deleted meanwhile: released on the node, its object kept
	c.mustKubectl(t, "-n", pinNamespace, "delete", "pod", ho.pod.Metadata.Name, "--wait=false")
	require.True(t, host.Poll(releaseTimeout, 250*time.Millisecond, func() bool { return c.unpinned(ho.sb) }),
		"the unused holder's pin was not released")
	require.True(t, host.Poll(podTimeout, time.Second, func() bool {
		v, ok := hosttest.MetricValue(scrapeLocal(t, controllerMetricsPort), "netns_pin_controller_holders_waiting",
			"node", c.nodeName, "reason", controller.WaitAgentNotReady)
		return ok && v >= 1
	}), "the controller does not count the holder as waiting for a node agent that is not ready")
	p, ok := c.podNamed(t, ho.pod)
	require.True(t, ok, "the released holder's object must wait for the agent")
	assert.Contains(t, p.Metadata.Finalizers, pinFinalizer)

	// its rights back: ready, and the finalizer lifted
	restored := time.Now()
	restore()
	require.True(t, host.Poll(releaseTimeout, 250*time.Millisecond, func() bool {
		_, ok := c.podNamed(t, ho.pod)
		return !ok
	}), "the agent given its rights back did not lift the finalizer")
	t.Logf("the holder's object gone %s after the agent's rights came back", time.Since(restored).Round(time.Millisecond))
}
