package e2e

// The node's Prometheus metrics (netns-pin-agent --store-only, beside the
// sweeper, reading the store as the agent's read-only mount does): a holder rollout seen
// through /metrics, the draining pin, its age growing, the refusal and the
// release counted, and a teardown the runtime gave up on finished by the
// sweeper (docs/operating.md, "Metrics").

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// metricsSweeper is `netns-pinctl sweep` for a chain and the node agent's
// metrics (`netns-pin-agent --store-only`, no API) of its store, with the
// address they are served at.
type metricsSweeper struct {
	cmd  *exec.Cmd
	done chan error
	url  string
}

func startMetricsSweeper(t *testing.T, c *chain) *metricsSweeper {
	t.Helper()
	startSweeper(t, c)
	// The agent reads every store registered on the host (the chain's
	// registered at its first ADD); those of earlier tests are gone with
	// their folders.
	cmd := exec.Command(agentBinary(t), "--host-root", "/", "--store-only", "--interval", "100ms", "--status-dir", "-", "--listen-address", "127.0.0.1:0")
	cmd.Stdout = os.Stderr
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sw := &metricsSweeper{cmd: cmd, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(os.Stderr, line)
			if _, a, ok := strings.Cut(line, "serving metrics at "); ok {
				addr <- strings.TrimSpace(a)
			}
		}
		sw.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("SIGTERM to the sweeper: %v", err)
		}
		select {
		case err := <-sw.done:
			assert.NoError(t, err, "the sweeper with metrics exits 0 on SIGTERM")
		case <-time.After(10 * time.Second):
			t.Errorf("the sweeper did not stop on SIGTERM (kill: %v)", cmd.Process.Kill())
		}
	})
	select {
	case sw.url = <-addr:
	case err := <-sw.done:
		t.Fatalf("the sweeper with metrics exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the sweeper did not say where it serves metrics within 30s")
	}
	return sw
}

// agentBinary builds cmd/netns-pin-agent once per test binary (it is no
// CNI plugin: not in the CNI bin folder).
func agentBinary(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "netns-pin-agent-")
		if err != nil {
			agentErr = err
			return
		}
		agentPath = filepath.Join(dir, "netns-pin-agent")
		r := host.RunCmd(5*time.Minute, nil, nil, "go", "build", "-o", agentPath, "../cmd/netns-pin-agent")
		agentErr = r.Err
		if r.Err != nil {
			agentErr = fmt.Errorf("go build ./cmd/netns-pin-agent: %w: %s", r.Err, r.Stderr)
		}
	})
	require.NoError(t, agentErr)
	return agentPath
}

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// scrape reads /metrics in Prometheus' text format.
func (sw *metricsSweeper) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(sw.url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "/metrics is in the text exposition format")
	return mfs
}

// waitMetric polls /metrics until the series satisfies cond.
func (sw *metricsSweeper) waitMetric(t *testing.T, what string, cond func(v float64) bool, name string, labels ...string) float64 {
	t.Helper()
	var v float64
	var ok bool
	var last map[string]*dto.MetricFamily
	if !host.Poll(30*time.Second, 50*time.Millisecond, func() bool {
		last = sw.scrape(t)
		v, ok = hosttest.MetricValue(last, name, labels...)
		return ok && cond(v)
	}) {
		t.Fatalf("%s: %s%v is %v (present: %v)", what, name, labels, v, ok)
	}
	return v
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

func TestSweeperMetricsOfAHolderRollout(t *testing.T) {
	cniPath, calls := countingCNIPath(t)
	c := newChain(t, chainSpec{cniPath: cniPath})
	old := c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), holderArgs(), false)
	old.mustAdd(t)
	sw := startMetricsSweeper(t, c)
	cl := []string{"cluster", cluster}
	sw.waitMetric(t, "the first holder is active", eq(1), "netns_pin_pins", append(cl, "state", "active")...)
	sw.waitMetric(t, "nothing refused yet, from 0", eq(0), "netns_pin_refusals_total", cl...)
	sw.waitMetric(t, "no release yet, from 0", eq(0), "netns_pin_releases_total", append(cl, "by", "del")...)
	first := sw.waitMetric(t, "the sweeper swept", func(v float64) bool { return v > 0 }, "netns_pin_last_sweep_timestamp_seconds")

	// The rollout: a new holder, the old one's DEL refused while a client
	// that came through the link is inside its netns.
	client := startClient(t, c.defaultLink(), old.netns.ID, "")
	holder := c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), holderArgs(), false)
	holder.mustAdd(t)
	err := old.del()
	require.Error(t, err)
	require.Equal(t, uint(11), cniErrorCode(err), "the old holder's DEL is refused: %v", err)
	sw.waitMetric(t, "the old holder is draining", eq(1), "netns_pin_pins", append(cl, "state", "draining")...)
	sw.waitMetric(t, "the new holder is active", eq(1), "netns_pin_pins", append(cl, "state", "active")...)
	sw.waitMetric(t, "the refusal is counted", eq(1), "netns_pin_refusals_total", cl...)
	age := sw.waitMetric(t, "the draining pin has an age", func(v float64) bool { return v > 0 }, "netns_pin_oldest_draining_seconds", cl...)
	sw.waitMetric(t, "its age grows", func(v float64) bool { return v > age+0.2 }, "netns_pin_oldest_draining_seconds", cl...)
	sw.waitMetric(t, "the sweeper goes on sweeping", func(v float64) bool { return v > first }, "netns_pin_last_sweep_timestamp_seconds")

	// The client goes; the runtime's retry releases the pin.
	client.stop(t)
	require.NoError(t, old.del())
	sw.waitMetric(t, "the release by the runtime's DEL is counted", eq(1), "netns_pin_releases_total", append(cl, "by", "del")...)
	sw.waitMetric(t, "nothing drains", eq(0), "netns_pin_pins", append(cl, "state", "draining")...)
	sw.waitMetric(t, "no draining age", eq(0), "netns_pin_oldest_draining_seconds", cl...)
	sw.waitMetric(t, "the in-use checks of the refusal and the release are timed", func(v float64) bool { return v >= 2 }, "netns_pin_inuse_check_seconds")

	// A holder whose runtime gives up after one refused DEL (CRI-O
	// 1.32.8+): abandoned, then finished by the sweeper.
	ns := hosttest.NewNetns(t, "npe2e")
	gone := c.newAttachment(t, ns, holderArgs(), true)
	gone.mustAdd(t)
	client = startClient(t, gone.pinPath(), ns.ID, "")
	require.Error(t, gone.cnitoolRun("del").Err, "the one DEL CRI-O sends is refused")
	sw.waitMetric(t, "the second refusal is counted", eq(2), "netns_pin_refusals_total", cl...)
	ns.Delete(t)
	require.NoError(t, os.Remove(filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-%s-%s", c.name, gone.containerID, ifName))))
	gone.noCleanDel = true
	sw.waitMetric(t, "the sweeper sees the teardown abandoned", eq(1), "netns_pin_pins", append(cl, "state", "abandoned")...)
	client.stop(t)
	sw.waitMetric(t, "the sweeper's release is counted", eq(1), "netns_pin_releases_total", append(cl, "by", "sweeper")...)
	sw.waitMetric(t, "the finished teardown is counted", eq(1), "netns_pin_abandoned_teardowns_total")
	sw.waitMetric(t, "nothing is abandoned any more", eq(0), "netns_pin_pins", append(cl, "state", "abandoned")...)
	assert.Equal(t, 1, hostLocalDels(t, calls, gone.containerID), "the lease is freed once")

	mfs := sw.scrape(t)
	v, ok := hosttest.MetricValue(mfs, "netns_pin_sweep_errors_total")
	assert.True(t, ok)
	assert.Zero(t, v, "no round failed")
	_, ok = hosttest.MetricValue(mfs, "process_resident_memory_bytes")
	assert.True(t, ok, "the agent exports its own process metrics")
}

// The sweeper serves no metrics: the flag that asked it to is refused,
// naming the agent that serves them now.
func TestSweepRefusesMetricsAddress(t *testing.T) {
	e := requireEnv(t)
	dir := t.TempDir()
	r := host.RunCmd(host.CmdTimeout, nil, nil, e.ctl, "--state-dir", filepath.Join(dir, "state"), "sweep", "--once", "--metrics-address", "127.0.0.1:0")
	require.Error(t, r.Err)
	assert.Contains(t, r.Stderr, "netns-pin-agent", "the error names the agent: %s", r)
}

// The sweeper keeps the events file small with or without metrics: past
// 256 KiB it folds it into one line per counter, every count kept.
func TestSweeperFoldsTheEventsFile(t *testing.T) {
	c := newChain(t, chainSpec{})
	a := c.newAttachment(t, hosttest.NewNetns(t, "npe2e"), holderArgs(), false)
	a.mustAdd(t) // makes stateDir
	events := filepath.Join(c.stateDir, "events")
	var b strings.Builder
	for i := 0; b.Len() < 300<<10; i++ {
		fmt.Fprintf(&b, "refusal del %s 1 0.001500\n", cluster)
		if i%3 == 0 {
			fmt.Fprintf(&b, "release del %s 1 0.001200\n", cluster)
		}
	}
	refusals, releases := strings.Count(b.String(), "refusal"), strings.Count(b.String(), "release")
	require.NoError(t, os.WriteFile(events, []byte(b.String()), 0o600))
	startSweeper(t, c)
	var data []byte
	require.True(t, host.Poll(30*time.Second, 50*time.Millisecond, func() bool {
		var err error
		data, err = os.ReadFile(events)
		require.NoError(t, err)
		return len(data) < 1<<10
	}), "the sweeper folds the events file")
	assert.Equal(t, fmt.Sprintf("refusal del %s %d -\nrelease del %s %d -\n", cluster, refusals, cluster, releases),
		strings.Join(sortedLines(string(data)), ""))
}

// sortedLines puts refusal lines first, as the expectation above does.
func sortedLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	var out []string
	for _, prefix := range []string{"refusal", "release"} {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				out = append(out, l)
			}
		}
	}
	return out
}
