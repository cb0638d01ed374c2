package runtime

// An agent that cannot do its work says so and lifts nothing: one that
// looks at the wrong host root (no store registry there), and one whose
// ServiceAccount may not list pods.

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/nodecheck"
)

// runAgent starts bin/netns-pin-agent with kubeconfig kc as node node and
// these extra flags, and returns the address of its endpoint; it stops it
// when the test ends. It does not wait for the informer to sync.
func (s *suite) runAgent(t *testing.T, kc, node string, extra ...string) string {
	t.Helper()
	bin := filepath.Join(s.repo, "bin", "netns-pin-agent")
	require.NoError(t, host.CheckExecutable(bin), "run `make build`")
	args := append([]string{"--kubeconfig", kc, "--listen-address", "127.0.0.1:0", "--interval", "200ms"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "NODE_NAME="+node)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var logBuf strings.Builder
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", host.Tail(logBuf.String(), 40))
		}
	})
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		logBuf.WriteString(lines.Text() + "\n")
		if addr, ok := strings.CutPrefix(lines.Text(), "netns-pin-agent: serving metrics at http://"); ok {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return strings.TrimSuffix(addr, "/metrics")
		}
	}
	t.Fatalf("the agent did not start:\n%s", logBuf.String())
	return ""
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// An agent whose host root holds no store registry (the host's / not
// mounted where it looks) knows no store: it is not ready and keeps the
// finalizer of a holder being deleted.
func TestAgentWrongHostRootKeepsFinalizers(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, s *suite) {
		node := "rt-hostroot-" + host.RandHex(4)
		kc, err := s.api.nodeAgentKubeconfig(s.repo, node)
		require.NoError(t, err)
		name := "holder-" + host.RandHex(4)
		t.Cleanup(func() { s.api.forgetPod(nadNamespace, name) })
		uid, err := s.api.createPodObject(holderObject(nadNamespace, name, node, nil))
		require.NoError(t, err)
		status := t.TempDir()
		addr := s.runAgent(t, kc, node, "--host-root", t.TempDir(), "--status-dir", status)
		s.api.deletePod(nadNamespace, name)
		var body string
		require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool {
			var code int
			code, body = get(t, "http://"+addr+"/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, "store registry")
		}), "not ready, saying why: %s", body)
		// After each of several passes (a new heartbeat in the status file)
		// the finalizer is still there.
		var last time.Time
		for range 5 {
			require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool {
				b, err := os.ReadFile(nodecheck.AgentStatusFile(status))
				var st nodecheck.AgentStatus
				if err != nil || json.Unmarshal(b, &st) != nil || !st.Heartbeat.After(last) {
					return false
				}
				last = st.Heartbeat
				return true
			}), "the agent makes passes")
			p, err := s.api.getPod(nadNamespace, name, uid)
			require.NoError(t, err)
			require.NotNil(t, p, "the holder's object is kept")
			require.Contains(t, p.Finalizers, agent.Finalizer)
			require.NotNil(t, p.DeletionTimestamp)
		}
		_, metrics := get(t, "http://"+addr+"/metrics")
		assert.Contains(t, metrics, "netns_pin_agent_ready 0")
		assert.Contains(t, metrics, "netns_pin_agent_lifts_blocked 1")
		st, err := os.ReadFile(nodecheck.AgentStatusFile(status))
		require.NoError(t, err)
		assert.Contains(t, string(st), "cannot be found")
	})
}

// An agent whose ServiceAccount may not list pods is not ready, says
// which verb (readiness, status file, api_errors_total with Forbidden),
// and lifts nothing (it has no pod to look at).
func TestAgentWithoutListRBACIsNotReady(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, s *suite) {
		require.NoError(t, s.api.ensureAgentAccess(s.repo))
		const sa = "netns-pin-agent-norights"
		r := s.api.kubectl(nil, "-n", agentNamespace, "create", "serviceaccount", sa)
		require.True(t, r.Err == nil || strings.Contains(r.Stderr, "already exists"), "%s", r)
		tok := s.api.kubectl(nil, "-n", agentNamespace, "create", "token", sa, "--duration=1h")
		require.NoError(t, tok.Err, "%s", tok)
		kc := filepath.Join(t.TempDir(), "norights.kubeconfig")
		require.NoError(t, writeJSON(kc, map[string]any{
			"apiVersion": "v1", "kind": "Config",
			"clusters":        []any{map[string]any{"name": "runtime", "cluster": map[string]any{"server": s.api.url, "insecure-skip-tls-verify": true}}},
			"users":           []any{map[string]any{"name": "agent", "user": map[string]any{"token": strings.TrimSpace(tok.Stdout)}}},
			"contexts":        []any{map[string]any{"name": "agent", "context": map[string]any{"cluster": "runtime", "user": "agent"}}},
			"current-context": "agent",
		}))
		status := t.TempDir()
		addr := s.runAgent(t, kc, "rt-norights-"+host.RandHex(4), "--host-root", "/", "--status-dir", status)
		var body string
		require.True(t, host.Poll(30*time.Second, 100*time.Millisecond, func() bool {
			var code int
			code, body = get(t, "http://"+addr+"/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, "list")
		}), "not ready, naming the verb: %s", body)
		t.Logf("readyz: %s", strings.TrimSpace(body))
		_, metrics := get(t, "http://"+addr+"/metrics")
		assert.Contains(t, metrics, "netns_pin_agent_ready 0")
		assert.Contains(t, metrics, `netns_pin_agent_api_errors_total{op="watch",reason="Forbidden"}`)
		var st []byte
		require.True(t, host.Poll(10*time.Second, 100*time.Millisecond, func() bool {
			st, _ = os.ReadFile(nodecheck.AgentStatusFile(status))
			return strings.Contains(string(st), `"list pods: `)
		}), "the status file names the refused verb for netns-pinctl check: %s", st)
		// Its Event on the Node cannot be posted either: that is said too.
		assert.Contains(t, string(st), `"create events: `)
	})
}
