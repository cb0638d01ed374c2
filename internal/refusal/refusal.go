// Package refusal words a refused release the one way both its readers
// see it: the runtime's FailedKillPod event (the CNI error of a refused
// DEL, plugin/cni.go) and the node agent's ReleaseRefused event on the
// holder pod (agent/), so that `kubectl describe pod` says the same thing
// twice rather than two things.
package refusal

import (
	"fmt"
	"strings"
)

// shown is how many references the line names before "and N more".
const shown = 2

// Message is one readable line: the cluster, the pod, the first references
// and how many more, and the command that lists them all.
func Message(cluster, podNS, podName string, refs []string, command string) string {
	head := strings.Join(refs[:min(shown, len(refs))], ", ")
	if len(refs) > shown {
		head += fmt.Sprintf(" and %d more", len(refs)-shown)
	}
	return fmt.Sprintf("netns-pin: cluster %s: holder pod %s/%s is still in use by %s; its netns stays pinned until they are gone (see: %s)",
		cluster, podNS, podName, head, command)
}
