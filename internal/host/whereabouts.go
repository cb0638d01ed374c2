package host

import "strings"

// WhereaboutsReconcilerRun finds, in ip-control-loop's log lines, the end
// of a reconciler run that started among them: the line that says how it
// ended ("reconciler success" or "reconciler failure"), and whether there
// is one yet.
func WhereaboutsReconcilerRun(lines []string) (result string, ended bool) {
	started := false
	for _, l := range lines {
		switch {
		case strings.Contains(l, "starting reconciler run"):
			started = true
		case started && (strings.Contains(l, "reconciler success") || strings.Contains(l, "reconciler failure")):
			return l, true
		}
	}
	return "", false
}
