// netns-pin-agent is netns-pin's node agent (docs/design.md, "The node
// agent"): it keeps each holder pod's object in the API, with the
// finalizer netns-pin.io/pin, for as long as a record of its node names
// the pod; it posts Events on holders and serves the node's Prometheus
// metrics, /healthz and /readyz. It runs unprivileged, reads stateDir
// through a read-only mount and holds the only API credentials of
// netns-pin on the node. The CNI plugin never links it (client-go stays
// out of every pod's ADD and DEL).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/conf"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() { os.Exit(run(os.Args[1:])) }

func run(argv []string) int {
	fs := flag.NewFlagSet("netns-pin-agent", flag.ContinueOnError)
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	confPath := fs.String("conf", "", "the network's conflist or NAD config JSON: its stateDir and pinDir, and its holder namespaces (holders[].podNamespace, cniArgsNamespaces) when --holder-namespaces is not given")
	paths := map[string]string{}
	for _, ps := range conf.PathSettings[:2] { // pin-dir, state-dir
		fs.Func(ps.Flag, ps.Key+" (default "+ps.Default+")", func(v string) error { paths[ps.Key] = v; return nil })
	}
	statusDir := fs.String("status-dir", "", "writable folder for status.json, read by `netns-pin check` (default: <stateDir>-agent; \"-\" none)")
	nsList := fs.String("holder-namespaces", "", "comma-separated namespaces of holder pods (the agent watches and patches pods there only)")
	listen := fs.String("listen-address", ":9853", "serve /metrics, /healthz and /readyz here")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster, the pod's ServiceAccount)")
	interval := fs.Duration("interval", 2*time.Second, "time between reads of the store (pod changes are seen at once)")
	storeOnly := fs.Bool("store-only", false, "no API: serve the store's metrics only (no finalizers, no Events), where the API side runs elsewhere or not at all")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if *version {
		fmt.Println("netns-pin-agent", Version)
		return 0
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "agent")
	c, err := conf.LoadFile(*confPath, paths)
	if err != nil {
		log.Error("configuration", "error", err)
		return 2
	}
	namespaces := holderNamespaces(*nsList, c)
	switch {
	case fs.NArg() > 0:
		fmt.Fprintln(os.Stderr, "netns-pin-agent: no arguments expected:", fs.Args())
		return 2
	case *node == "" && !*storeOnly:
		fmt.Fprintln(os.Stderr, "netns-pin-agent: --node-name (or NODE_NAME) is required")
		return 2
	case len(namespaces) == 0 && !*storeOnly:
		fmt.Fprintln(os.Stderr, "netns-pin-agent: no holder namespace: give --holder-namespaces, or --conf with holders or cniArgsNamespaces")
		return 2
	case *interval <= 0:
		fmt.Fprintln(os.Stderr, "netns-pin-agent: --interval must be positive")
		return 2
	}
	sd := *statusDir
	switch sd {
	case "":
		sd = strings.TrimSuffix(c.StateDir, "/") + "-agent"
	case "-":
		sd = ""
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m := agent.NewMetrics()
	var client kubernetes.Interface
	var recorder record.EventRecorder
	if !*storeOnly {
		rc, err := restConfig(*kubeconfig)
		if err != nil {
			log.Error("API client", "error", err)
			return 1
		}
		rc.UserAgent = "netns-pin-agent/" + Version
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			log.Error("API client", "error", err)
			return 1
		}
		client = cs
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "netns-pin-agent", Host: *node})
	}

	flags := c.Flags()
	a := agent.New(agent.Config{
		NodeName: *node, StateDir: c.StateDir, StatusDir: sd, Namespaces: namespaces, Interval: *interval,
		Client: client, Recorder: recorder, Metrics: m, Log: log, Version: Version,
		Tracker: &agent.Tracker{InUseCommand: func(att string) string { return "netns-pin" + flags + " inuse " + att }},
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen", "address", *listen, "error", err)
		return 1
	}
	served := make(chan error, 1)
	go func() { served <- agent.Serve(ctx, ln, a, m, log) }()
	// One plain line too, for people and scripts that wait for it.
	fmt.Fprintf(os.Stderr, "netns-pin-agent: serving metrics at http://%s/metrics\n", ln.Addr())
	runErr := a.Run(ctx)
	stop()
	if err := errors.Join(runErr, <-served); err != nil {
		log.Error("agent stopped", "error", err)
		return 1
	}
	log.Info("agent stopped")
	return 0
}

func holderNamespaces(list string, c *conf.Config) []string {
	var out []string
	add := func(ns string) {
		if ns = strings.TrimSpace(ns); ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	if list != "" {
		for _, ns := range strings.Split(list, ",") {
			add(ns)
		}
		return out
	}
	for _, h := range c.Holders {
		add(h.PodNamespace)
	}
	for _, ns := range c.CNIArgsNamespaces {
		add(ns)
	}
	return out
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
