package kube

// What netns-pin's agent and controller cost the cluster: their API
// requests (the API server's audit log, hack/kube/up.sh audits their users
// only) and their resident memory.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// auditEntry is what the footprint reads of an audit event.
type auditEntry struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	ObjectRef struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// apiRequests counts the audited requests received in [from, to), by
// client ("agent on <node>", "controller on <node>") and by verb and
// resource.
func (c *cluster) apiRequests(t *testing.T, from, to time.Time) map[string]map[string]int {
	t.Helper()
	f, err := os.Open(filepath.Join(c.env["KUBE_DIR"], "logs", "audit.log"))
	require.NoError(t, err, "the API server's audit log (hack/kube/up.sh)")
	defer f.Close()
	out := map[string]map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var e auditEntry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" ||
			e.Received.Before(from) || !e.Received.Before(to) {
			continue
		}
		who := strings.TrimPrefix(e.User.Username, "system:serviceaccount:kube-system:netns-pin-")
		if node := e.User.Extra["authentication.kubernetes.io/node-name"]; len(node) > 0 {
			who += " on " + node[0]
		}
		if out[who] == nil {
			out[who] = map[string]int{}
		}
		out[who][e.Verb+" "+e.ObjectRef.Resource]++
	}
	require.NoError(t, sc.Err())
	return out
}

// logFootprint logs the requests per minute of each agent and controller
// replica in [from, to), and the resident memory of each of their
// processes now.
func (c *cluster) logFootprint(t *testing.T, what string, from, to time.Time) {
	t.Helper()
	minutes := to.Sub(from).Minutes()
	reqs := c.apiRequests(t, from, to)
	var lines []string
	for who, byKind := range reqs {
		total := 0
		var kinds []string
		for k, n := range byKind {
			total += n
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(kinds)
		lines = append(lines, fmt.Sprintf("%s: %.1f requests/min (%s)", who, float64(total)/minutes, strings.Join(kinds, ", ")))
	}
	sort.Strings(lines)
	for _, comm := range []string{"netns-pin-agent", "netns-pin-contr"} {
		out, _ := exec.Command("pgrep", "-x", comm).Output()
		for _, pid := range strings.Fields(string(out)) {
			if rss, ok := residentKB(pid); ok {
				lines = append(lines, fmt.Sprintf("%s (pid %s): resident %.1f MiB", comm, pid, float64(rss)/1024))
			}
		}
	}
	t.Logf("footprint, %s (%s):\n%s", what, to.Sub(from).Round(time.Second), strings.Join(lines, "\n"))
}

// residentKB is the VmRSS of a process, in kB.
func residentKB(pid string) (int, bool) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int
			_, err := fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb, err == nil
		}
	}
	return 0, false
}
