package kube

// Upgrading and rolling back netns-pin itself with live pins: the installer
// DaemonSet rolled between the image of an earlier commit
// (hack/kube/upgrade-from, built by that commit's own make image) and make
// image's, while one holder is active and another drains for a client
// (docs/operating.md, "Upgrades and rollbacks").

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// release is an installer DaemonSet as a user applies it: a commit's
// deploy/installer-daemonset.yaml with that commit's image, and the binary
// that carries that release's operator commands on the node.
type release struct {
	commit, image string
	ctl           string // netns-pinctl; the earlier release's plugin carried them itself
}

// setInstaller applies rel's installer DaemonSet, as an operator upgrades
// (kustomize edit set image and apply, or helm upgrade: the manifest and
// the image of one release together), waits for the rollout and returns
// the installed plugin's "netns-pin V (commit C)".
func (c *cluster) setInstaller(t *testing.T, rel release) string {
	t.Helper()
	start := time.Now()
	manifest := filepath.Join(c.repo, "deploy", "installer-daemonset.yaml")
	if rel.commit != "" {
		manifest = filepath.Join(t.TempDir(), "installer-daemonset.yaml")
		r := host.RunCmd(cmdTimeout, nil, nil, "git", "-C", c.repo, "show", rel.commit+":deploy/installer-daemonset.yaml")
		require.NoError(t, r.Err, "%s", r)
		require.NoError(t, os.WriteFile(manifest, []byte(r.Stdout), 0o644))
	}
	r := host.RunCmd(cmdTimeout, nil, nil, filepath.Join(c.repo, "hack", "kube", "up.sh"), "installer-manifest", manifest, rel.image)
	require.NoError(t, r.Err, "%s", r)
	a := c.kubectlIn([]byte(r.Stdout), "apply", "-f", "-")
	require.NoError(t, a.Err, "kubectl apply the installer of %s: %s", rel.image, a)
	c.mustKubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/netns-pin-installer", "--timeout=180s")
	var line string
	if rel.ctl == c.pinBin {
		r = host.RunCmd(cmdTimeout, nil, nil, c.pinBin, "version")
		require.NoError(t, r.Err, "%s version: %s", c.pinBin, r)
		line, _, _ = strings.Cut(r.Stdout, "\n")
	} else {
		// The plugin run without CNI_COMMAND names itself on stderr.
		r = host.RunCmd(cmdTimeout, nil, nil, "env", "-i", c.pinBin)
		line, _, _ = strings.Cut(r.Stderr, ": ")
	}
	t.Logf("installer rolled to %s in %s: %s", rel.image, time.Since(start).Round(time.Millisecond), line)
	return line
}

// versionOf is the version in a `netns-pinctl version` line, "netns-pin V
// (commit C)": what the binary writes into the records it writes.
func versionOf(line string) string {
	v, _, _ := strings.Cut(strings.TrimPrefix(line, "netns-pin "), " ")
	return v
}

// recordHeader is what a record says of its own format.
type recordHeader struct {
	Format int    `json:"format"`
	Writer string `json:"writer"`
	State  string `json:"state"`
}

func (c *cluster) recordHeader(t *testing.T, sb sandbox) recordHeader {
	t.Helper()
	b, err := os.ReadFile(c.recordPath(sb))
	require.NoError(t, err)
	var h recordHeader
	require.NoError(t, json.Unmarshal(b, &h), "%s", c.recordPath(sb))
	return h
}

// pinCLI runs netns-pinctl on the suite's store.
func (c *cluster) pinCLI(args ...string) host.CmdResult {
	return c.cliBy(c.ctl, args...)
}

// cliBy runs bin's operator commands on the suite's store.
func (c *cluster) cliBy(bin string, args ...string) host.CmdResult {
	return host.RunCmd(cmdTimeout, nil, nil, bin, append([]string{"--pin-dir", c.pinDir, "--state-dir", c.stateDir}, args...)...)
}

// listed is `netns-pinctl list --json` by the installed binary: attachment ->
// state of the attachments asked for; the command must succeed (every
// record read).
func (c *cluster) listed(t *testing.T, bin string, atts ...string) map[string]string {
	t.Helper()
	r := c.cliBy(bin, "--json", "list")
	require.NoError(t, r.Err, "list by %s: %s", bin, r)
	var recs []struct {
		Attachment string `json:"attachment"`
		State      string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &recs), "list --json: %s", r.Stdout)
	out := map[string]string{}
	for _, rec := range recs {
		if slices.Contains(atts, rec.Attachment) {
			out[rec.Attachment] = rec.State
		}
	}
	return out
}

// pingLoop is a client's traffic across both pins: from the draining holder's
// netns (its pin) to the active holder's address, and through the
// cluster's link (the active holder's netns) to the draining one's, one
// ping each way every 200 ms, on the storage network's macvlan.
type pingLoop struct {
	stopCh     chan struct{}
	wg         sync.WaitGroup
	mu         sync.Mutex
	ok, failed int
	failures   []string
}

func startPingLoop(drainingPin, activeIP, link, drainingIP string) *pingLoop {
	l := &pingLoop{stopCh: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, p := range [][2]string{{drainingPin, activeIP}, {link, drainingIP}} {
				r := host.RunCmd(10*time.Second, nil, nil, "nsenter", "--net="+p[0], "--", "/bin/busybox", "ping", "-c", "1", "-W", "2", p[1])
				l.mu.Lock()
				if r.Err == nil {
					l.ok++
				} else {
					l.failed++
					if len(l.failures) < 5 {
						l.failures = append(l.failures, time.Now().Format(time.StampMilli)+" "+p[0]+" -> "+p[1]+": "+r.String())
					}
				}
				l.mu.Unlock()
			}
			select {
			case <-l.stopCh:
				return
			case <-tick.C:
			}
		}
	}()
	return l
}

func (l *pingLoop) stop() (ok, failed int, failures []string) {
	close(l.stopCh)
	l.wg.Wait()
	return l.ok, l.failed, l.failures
}

// Scenario: the installer at the earlier commit's image pins an active
// holder and a draining one (the rollout's old pod, its client stays);
// rolling the installer to make image's image, both pins are adopted: the
// draining one's DEL is still refused (now by the new binary, which
// rewrites its record) and the active one's link stays; rolled back to the
// earlier image, that binary reads the records the new one wrote (the same
// format, 2) and finds the client; rolled forward again, the draining pin
// goes once its client leaves. A client's ping loop across both pins has no
// failure throughout, and the new installer removes the netns-pin-agent the
// earlier one put beside the plugin.
func TestUpgradeAndRollbackWithLivePins(t *testing.T) {
	c := requireCluster(t)
	oldRel := release{commit: c.env["KUBE_UPGRADE_FROM"], image: c.env["KUBE_UPGRADE_FROM_IMAGE"], ctl: c.pinBin}
	newRel := release{image: c.env["KUBE_IMAGE"], ctl: c.ctl}
	require.NotEqual(t, oldRel.image, newRel.image)
	t.Cleanup(func() { c.setInstaller(t, newRel) })

	// 1. the earlier release installed; holders pinned by it
	oldLine := c.setInstaller(t, oldRel)
	require.Contains(t, oldLine, "(commit "+c.env["KUBE_UPGRADE_FROM"]+")", "the installed netns-pin is the earlier commit's")
	oldVersion := versionOf(oldLine)
	assert.FileExists(t, filepath.Join(c.env["KUBE_CNI_BIN_DIR"], "netns-pin-agent"), "the earlier installer copies netns-pin-agent beside the plugin")

	h := c.newHolderSet(t, "network-attachment-definition.yaml")
	draining := h.waitHolder(t)
	cl := startClient(t, h.link)
	c.mustKubectl(t, "-n", pinNamespace, "rollout", "restart", "daemonset/"+h.name)
	active := h.waitHolder(t, draining.pod.Metadata.UID)
	h.requireLinkTo(t, active)
	var evs []event
	require.True(t, host.Poll(releaseTimeout, time.Second, func() bool {
		evs = c.eventsOf(t, draining.pod, "FailedKillPod")
		return len(evs) > 0
	}), "the earlier netns-pin did not refuse the DEL of %s, whose client stays", draining.pod)
	c.requirePinned(t, draining.pod, draining.sb, h.cluster, "draining")
	for _, sb := range []sandbox{draining.sb, active.sb} {
		hd := c.recordHeader(t, sb)
		assert.Equal(t, recordHeader{Format: 2, Writer: oldVersion, State: hd.State}, hd, "record of %s written by the earlier release", sb.id)
	}
	loop := startPingLoop(c.pinPath(draining.sb), active.ip, h.link, draining.ip)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			loop.stop()
		}
	})

	// 2. upgrade: make image's image
	newLine := c.setInstaller(t, newRel)
	newVersion := versionOf(newLine)
	c.requireInstalledBinary(t)
	assert.NoFileExists(t, filepath.Join(c.env["KUBE_CNI_BIN_DIR"], "netns-pin-agent"), "the new installer removes the earlier netns-pin-agent")

	// both pins adopted: listed, the active one linked, the draining one's
	// next DEL refused by the new binary, which rewrites its record
	assert.Equal(t, map[string]string{draining.sb.id + "." + storageIf: "draining", active.sb.id + "." + storageIf: "active"}, c.listed(t, newRel.ctl, draining.sb.id+"."+storageIf, active.sb.id+"."+storageIf))
	h.requireLinkTo(t, active)
	before := failedKills(c.eventsOf(t, draining.pod, "FailedKillPod"))
	start := time.Now()
	ok := host.Poll(releaseTimeout, time.Second, func() bool {
		return failedKills(c.eventsOf(t, draining.pod, "FailedKillPod")) > before && c.recordHeader(t, draining.sb).Writer == newVersion
	})
	if !ok {
		c.dumpState(t, pinNamespace)
	}
	require.True(t, ok, "no DEL of %s refused by the new netns-pin %s (record: %+v)", draining.pod, newVersion, c.recordHeader(t, draining.sb))
	t.Logf("the new netns-pin refused the draining holder's DEL %s after the upgrade", time.Since(start).Round(time.Millisecond))
	evs = c.eventsOf(t, draining.pod, "FailedKillPod")
	assert.Contains(t, evs[0].Message, "netns-pin: cluster "+h.cluster+": holder pod "+draining.pod.String()+" is still in use by")
	c.requirePinned(t, draining.pod, draining.sb, h.cluster, "draining")
	c.requirePinned(t, active.pod, active.sb, h.cluster, "active")
	assert.Equal(t, 2, c.recordHeader(t, draining.sb).Format)

	// 3. rollback to the earlier image: it reads what the new one wrote
	// (format 2 both) and still finds the client
	rolled := c.setInstaller(t, oldRel)
	require.Equal(t, oldLine, rolled)
	assert.Equal(t, map[string]string{draining.sb.id + "." + storageIf: "draining", active.sb.id + "." + storageIf: "active"}, c.listed(t, oldRel.ctl, draining.sb.id+"."+storageIf, active.sb.id+"."+storageIf),
		"the earlier release reads the records the new one wrote")
	r := c.cliBy(oldRel.ctl, "--json", "inuse", draining.sb.id+"."+storageIf)
	require.NoError(t, r.Err, "inuse by the earlier release: %s", r)
	var reports []struct {
		References []json.RawMessage `json:"references"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &reports), "inuse --json: %s", r.Stdout)
	require.Len(t, reports, 1)
	assert.NotEmpty(t, reports[0].References, "the earlier release sees the client: %s", r.Stdout)
	h.requireLinkTo(t, active)

	// 4. forward again; the client leaves, the draining pin goes
	require.Equal(t, newLine, c.setInstaller(t, newRel))
	okPings, failed, failures := loop.stop()
	stopped = true
	t.Logf("ping loop across both pins: %d answered, %d failed", okPings, failed)
	assert.Zero(t, failed, "the client's I/O across the upgrade and rollback: %v", failures)
	assert.Positive(t, okPings)
	cl.stop(t)
	took := c.requireReleased(t, h.selector, draining.pod, draining.sb, 500*time.Millisecond, "the draining holder was not released by the new netns-pin after its client left")
	t.Logf("draining holder released %s after its client left", took.Round(time.Millisecond))
	h.requireLinkTo(t, active)
	c.requirePinned(t, active.pod, active.sb, h.cluster, "active")
}
