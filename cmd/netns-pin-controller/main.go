// netns-pin-controller is netns-pin's cluster controller (docs/design.md,
// "The cluster controller: nodes that go away"): it lifts the finalizer
// netns-pin.io/pin of holder pods being deleted whose node is gone (no
// Node object for the quarantine, 40 s) or tainted
// node.kubernetes.io/out-of-service and not Ready, with an Event saying
// why; a node only NotReady or Unknown keeps every finalizer. Replicas
// elect a leader through a Lease; only the leader acts. It serves its
// metrics, /healthz and /readyz. The CNI plugin never links it.
//
// With --uninstall-check it only counts the pods that carry
// netns-pin.io/pin and exits, 0 when none does, 1 naming them: the
// chart's pre-delete hook, which refuses `helm uninstall` before anything
// is deleted (docs/operating.md, "Removing netns-pin").
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/record"

	"github.com/netns-pin/netns-pin/controller"
	"github.com/netns-pin/netns-pin/internal/buildinfo"
	"github.com/netns-pin/netns-pin/internal/kubeproc"
)

// Version and Commit are stamped at build time (hack/version.sh);
// unstamped, run takes them from the build information.
var (
	Version = buildinfo.Unstamped
	Commit  = ""
)

func main() { os.Exit(run(os.Args[1:])) }

func run(argv []string) int {
	Version, Commit = buildinfo.Resolve(Version, Commit)
	fs := flag.NewFlagSet("netns-pin-controller", flag.ContinueOnError)
	host, _ := os.Hostname()
	identity := fs.String("identity", cmp.Or(os.Getenv("POD_NAME"), host), "this replica's identity in the leader Lease (default $POD_NAME, from the downward API, else the host name)")
	leaseNS := fs.String("lease-namespace", cmp.Or(os.Getenv("POD_NAMESPACE"), "kube-system"), "namespace of the leader Lease (default $POD_NAMESPACE, else kube-system)")
	leaseName := fs.String("lease-name", "netns-pin-controller", "name of the leader Lease")
	leaseDuration := fs.Duration("lease-duration", 15*time.Second, "how long a Lease not renewed keeps others from leading")
	renewDeadline := fs.Duration("renew-deadline", 10*time.Second, "how long the leader tries to renew before it stops leading")
	retryPeriod := fs.Duration("retry-period", 2*time.Second, "time between tries to take or renew the Lease")
	quarantine := fs.Duration("quarantine", controller.DefaultQuarantine, "how long a Node object must be gone before its holders are let go (the pod GC's quarantine of orphaned pods)")
	interval := fs.Duration("interval", 30*time.Second, "a pass at least this often (pod and node changes are seen at once)")
	guardPolicy := fs.String("removal-guard-policy", controller.GuardPolicyName, "the removal guard's admission policy, whose variables "+controller.GuardCountVar+" and "+controller.GuardPodsVar+" get the pods carrying netns-pin.io/pin (\"\": no removal guard)")
	guardPolicies := fs.String("removal-guard-policies", strings.Join(controller.GuardPolicies, ","), "the admission policies (each with a binding of the same name) kept with the finalizer "+controller.GuardFinalizer+" while pods carry netns-pin.io/pin")
	listen := fs.String("listen-address", ":9854", "serve /metrics, /healthz and /readyz here")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster, the pod's ServiceAccount)")
	version := fs.Bool("version", false, "print the version and exit")
	uninstallCheck := fs.Bool("uninstall-check", false, "only say whether netns-pin may be removed, and exit: 0 when no pod carries netns-pin.io/pin, 1 naming those that do or when they cannot be counted (the chart's pre-delete hook)")
	timeout := fs.Duration("timeout", 60*time.Second, "with --uninstall-check: how long the count may take")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if *version {
		fmt.Println(buildinfo.String("netns-pin-controller", Version, Commit))
		return 0
	}
	if *uninstallCheck {
		return runUninstallCheck(fs.Args(), *kubeconfig, *timeout, os.Stdout, os.Stderr)
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintln(os.Stderr, "netns-pin-controller: no arguments expected:", fs.Args())
		return 2
	case *identity == "":
		fmt.Fprintln(os.Stderr, "netns-pin-controller: --identity (or POD_NAME) is required")
		return 2
	case *quarantine < 0 || *interval <= 0:
		fmt.Fprintln(os.Stderr, "netns-pin-controller: --quarantine must not be negative and --interval must be positive")
		return 2
	case *retryPeriod <= 0 || *renewDeadline <= *retryPeriod || *leaseDuration <= *renewDeadline:
		fmt.Fprintln(os.Stderr, "netns-pin-controller: want --lease-duration > --renew-deadline > --retry-period > 0")
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "controller")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	cs, err := kubeproc.Clientset(*kubeconfig, "netns-pin-controller/"+Version)
	if err != nil {
		log.Error("API client", "error", err)
		return 1
	}
	recorder, shutdown := kubeproc.Recorder(ctx, cs, func(s record.EventSink) record.EventSink { return s }, "netns-pin-controller", *identity)
	defer shutdown()
	m := controller.NewMetrics()
	c := controller.New(controller.Config{
		Client: cs, Recorder: recorder, Metrics: m, Log: log, Quarantine: *quarantine, Interval: *interval,
		LeaseNamespace: *leaseNS, LeaseName: *leaseName, Identity: *identity,
		LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
		Guard: controller.Guard{Policy: *guardPolicy, Policies: splitList(*guardPolicies)},
	})
	return kubeproc.Main(ctx, stop, "netns-pin-controller", *listen, m, c.Healthy, c.Ready, c.Run, log)
}

// runUninstallCheck is --uninstall-check: one count of the pods that
// carry the finalizer, with no Lease, no metrics and no informer (a Job
// run once before helm deletes anything).
func runUninstallCheck(args []string, kubeconfig string, timeout time.Duration, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0:
		fmt.Fprintln(stderr, "netns-pin-controller: --uninstall-check: no arguments expected:", args)
		return 2
	case timeout <= 0:
		fmt.Fprintln(stderr, "netns-pin-controller: --timeout must be positive")
		return 2
	}
	cs, err := kubeproc.Clientset(kubeconfig, "netns-pin-controller/"+Version)
	if err != nil {
		return controller.UninstallNotCounted(stderr, fmt.Errorf("API client: %w", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return controller.UninstallCheck(ctx, cs, stdout, stderr)
}

// splitList is a comma-separated list without its empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
