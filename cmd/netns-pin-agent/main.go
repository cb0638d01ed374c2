// netns-pin-agent is netns-pin's node agent (docs/design.md, "The node
// agent"): it keeps each holder pod's object in the API, with the
// finalizer netns-pin.io/pin, for as long as a record of its node names
// the pod; it posts Events on holders and serves the node's Prometheus
// metrics, /healthz and /readyz. It runs unprivileged, reads every store
// registered on the node through the host's / mounted read-only, and holds the only API credentials of
// netns-pin on the node. The CNI plugin never links it (client-go stays
// out of every pod's ADD and DEL).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/buildinfo"
	"github.com/netns-pin/netns-pin/internal/kubeproc"
	"github.com/netns-pin/netns-pin/netnsstore"
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
	fs := flag.NewFlagSet("netns-pin-agent", flag.ContinueOnError)
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	hostRoot := fs.String("host-root", "/host", "where the host's / is mounted (read only): the agent reads every store registered in <host-root>"+netnsstore.DefaultRegistryDir)
	statusDir := fs.String("status-dir", conf.DefaultStateDir+"-agent", "writable folder for status.json, read by `netns-pinctl check` (\"-\" none)")
	listen := fs.String("listen-address", ":9853", "serve /metrics, /healthz and /readyz here")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster, the pod's ServiceAccount)")
	interval := fs.Duration("interval", 2*time.Second, "time between reads of the stores (pod changes are seen at once)")
	storeOnly := fs.Bool("store-only", false, "no API: serve the stores' metrics only (no finalizers, no Events), where the API side runs elsewhere or not at all")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	if *version {
		fmt.Println(buildinfo.String("netns-pin-agent", Version, Commit))
		return 0
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "agent")
	switch {
	case fs.NArg() > 0:
		fmt.Fprintln(os.Stderr, "netns-pin-agent: no arguments expected:", fs.Args())
		return 2
	case *node == "" && !*storeOnly:
		fmt.Fprintln(os.Stderr, "netns-pin-agent: --node-name (or NODE_NAME) is required")
		return 2
	case *interval <= 0:
		fmt.Fprintln(os.Stderr, "netns-pin-agent: --interval must be positive")
		return 2
	case !filepath.IsAbs(*hostRoot):
		fmt.Fprintln(os.Stderr, "netns-pin-agent: --host-root must be an absolute path")
		return 2
	}
	sd := *statusDir
	if sd == "-" {
		sd = ""
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m := agent.NewMetrics()
	cfg := agent.Config{
		NodeName: *node, HostRoot: *hostRoot, StatusDir: sd, Interval: *interval,
		Metrics: m, Log: log, Version: Version,
	}
	if !*storeOnly {
		cs, err := kubeproc.Clientset(*kubeconfig, "netns-pin-agent/"+Version)
		if err != nil {
			log.Error("API client", "error", err)
			return 1
		}
		cfg.Client = cs
	}
	a := agent.New(cfg)
	if cfg.Client != nil {
		rec, shutdown := kubeproc.Recorder(ctx, cfg.Client, a.EventSink, "netns-pin-agent", *node)
		defer shutdown()
		a.UseRecorder(rec)
	}
	return kubeproc.Main(ctx, stop, "netns-pin-agent", *listen, m, a.Healthy, a.Ready, a.Run, log)
}
