package model

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// The model's step for `netns-pinctl check` (docs/design.md §16): at any point
// of a run (crashes, unreadable records, lost pins, orphans, clients) it
// reads and changes nothing, takes the store's lock without failing, and
// exits 0, 1 or 2 as its findings say, in the table and in --json alike.

func init() {
	commandSteps["check"] = "cli-check"
	for _, f := range []string{"--ceph-csi-config", "--csi-pid", "--csi-container"} {
		flagSteps["check "+f] = "cli-check"
	}
	stepTable = append(stepTable, stepDef{"cli-check", 1, cliCheck})
}

type checkFinding struct {
	Check, Level, What, Where string
}

func cliCheck(d *driver) bool {
	// No csi node plugin of this host's (another suite's) is looked at:
	// a container ID no process's cgroup has.
	args := []string{"check", "--csi-container", "0000deadbeef0000"}
	before := d.snapshot()
	table := d.e.cli(d.e.pinDir, "", args...)
	js := d.e.cli(d.e.pinDir, "", append(args, "--json")...)
	after := d.snapshot()
	d.logf("netns-pinctl check -> %s", table)
	d.count("I4")
	if after != before {
		d.violation("I4", "netns-pinctl check changed the store:%s", before.diff(after))
		d.crashedAll() // only when the violation is ignored: let repair decide
	}
	d.count("I5")
	var rep struct {
		Result   string
		Findings []checkFinding
	}
	if err := json.Unmarshal([]byte(js.stdout), &rep); err != nil {
		d.violation("I5", "netns-pinctl check --json printed no report (%v): %s", err, js)
		return true
	}
	want := 0
	for _, f := range rep.Findings {
		switch {
		case f.Level == "error":
			want = 1
		case f.Level == "unknown" && want == 0:
			want = 2
		}
		if f.Check == "store" && f.Level == "unknown" {
			d.violation("I5", "netns-pinctl check could not read the store: %s", f.What)
		}
		if !strings.Contains(ageless(table.stdout), ageless(f.What)) {
			d.violation("I5", "netns-pinctl check's table lacks the finding %q:\n%s", f.What, table.stdout)
		}
	}
	if table.killed || js.killed || !slices.Contains([]int{0, 1, 2}, table.rc) || table.rc != want || js.rc != want {
		d.violation("I5", "netns-pinctl check exited %d (--json %d), its findings say %d: %s", table.rc, js.rc, want, js.stdout)
	}
	return true
}

// anAge is an age as check prints it (human.Age: 7s, 3m, 2h5m, 4d). The
// table and the --json report are two runs, which may fall on either side
// of a second: "draining for 0s" in one is "draining for 1s" in the other.
var anAge = regexp.MustCompile(`\b\d+(s|m|h\d+m|d)\b`)

func ageless(s string) string { return anAge.ReplaceAllString(s, "<age>") }
