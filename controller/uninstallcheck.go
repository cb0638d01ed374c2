package controller

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/netns-pin/netns-pin/agent"
)

// The uninstall check (netns-pin-controller --uninstall-check, the
// chart's pre-delete hook): `helm uninstall` while pods carry
// netns-pin.io/pin would delete what the removal guard does not guard,
// then fail on what it does, and a pod deleted after the agent went
// would stay Terminating for good. The hook runs before helm deletes
// anything and refuses, naming the pods, while one carries it.

// UninstallPageSize is how many pods one list request of the check
// asks for: a cluster's pods may be many, and one answer of them all
// weighs on the API server.
const UninstallPageSize = 500

// CarryingPod is a pod that carries netns-pin.io/pin.
type CarryingPod struct {
	Namespace, Name string
	// Node is spec.nodeName ("": not scheduled).
	Node string
}

// PodsCarryingFinalizer lists the pods of every namespace, pageSize at a
// time, and returns those that carry netns-pin.io/pin, sorted by
// namespace and name (nil when none does).
func PodsCarryingFinalizer(ctx context.Context, client kubernetes.Interface, pageSize int64) ([]CarryingPod, error) {
	var out []CarryingPod
	opts := metav1.ListOptions{Limit: pageSize}
	for page := 1; ; page++ {
		list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list the pods of every namespace (page %d): %w", page, err)
		}
		for _, p := range list.Items {
			if slices.Contains(p.Finalizers, agent.Finalizer) {
				out = append(out, CarryingPod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName})
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	slices.SortFunc(out, func(a, b CarryingPod) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// UninstallCheck counts the pods that carry netns-pin.io/pin and says on
// stdout whether the uninstall may go on: exit code 0 when none does, 1
// naming them otherwise. A list that fails refuses too (exit 1, the error
// on stderr): pods not counted may be pods that carry it.
func UninstallCheck(ctx context.Context, client kubernetes.Interface, stdout, stderr io.Writer) int {
	pods, err := PodsCarryingFinalizer(ctx, client, UninstallPageSize)
	if err != nil {
		return UninstallNotCounted(stderr, err)
	}
	if len(pods) == 0 {
		fmt.Fprintf(stdout, "netns-pin: no pod carries the %s finalizer: uninstall may go on\n", agent.Finalizer)
		return 0
	}
	fmt.Fprint(stdout, refusal(pods))
	return 1
}

// UninstallNotCounted says on stderr why the pods could not be counted
// and that the uninstall is refused for it, and returns the exit code 1.
func UninstallNotCounted(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "netns-pin: %v\n", err)
	fmt.Fprintf(stderr, "netns-pin: refusing the uninstall: the pods that carry the %s finalizer could not be counted\n", agent.Finalizer)
	return 1
}

// refusal is what the check prints when pods carry the finalizer: them,
// one a line, and what to do.
func refusal(pods []CarryingPod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "netns-pin: refusing the uninstall: %d pods carry the %s finalizer, which only the node agent and the controller lift:\n",
		len(pods), agent.Finalizer)
	for _, p := range pods {
		where := "on node " + p.Node
		if p.Node == "" {
			where = "not scheduled on a node"
		}
		fmt.Fprintf(&b, "  %s/%s %s\n", p.Namespace, p.Name, where)
	}
	b.WriteString("netns-pin: take the finalizer out of the holder templates (or delete the holder DaemonSets), let the holders go " +
		"and wait until no pod carries it (docs/operating.md, \"Removing netns-pin\"), then uninstall again\n")
	return b.String()
}
