// Package kubeproc is the process shell of netns-pin's two Kubernetes
// binaries, the node agent and the cluster controller: their API client
// and event recorder, their endpoint (/metrics, /healthz, /readyz), their
// main loop, the informer handler that wakes a loop and the check that
// says a loop is stuck.
package kubeproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
)

// Clientset is the API client of netns-pin-agent and netns-pin-controller:
// from the kubeconfig file, else in-cluster (the pod's ServiceAccount).
func Clientset(kubeconfig, userAgent string) (*kubernetes.Clientset, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	rc.UserAgent = userAgent
	return kubernetes.NewForConfig(rc)
}

// Recorder posts Events of component (on host) through sink, wrapped by
// wrap, until ctx ends or the returned func is called.
func Recorder(ctx context.Context, cs kubernetes.Interface, wrap func(record.EventSink) record.EventSink, component, host string) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(wrap(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")}))
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: host}), broadcaster.Shutdown
}

// Main serves m's metrics, healthy as /healthz and ready as /readyz on
// listen while run runs, then calls stop, and returns the exit code of the
// binary name.
func Main(ctx context.Context, stop func(), name, listen string, m prometheus.Collector, healthy, ready func() error, run func(context.Context) error, log *slog.Logger) int {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		log.Error("listen", "address", listen, "error", err)
		return 1
	}
	served := make(chan error, 1)
	go func() { served <- serve(ctx, ln, m, healthy, ready, log) }()
	// One plain line too, for people and scripts that wait for it.
	fmt.Fprintf(os.Stderr, "%s: serving metrics at http://%s/metrics\n", name, ln.Addr())
	runErr := run(ctx)
	stop()
	what := strings.TrimPrefix(name, "netns-pin-")
	if err := errors.Join(runErr, <-served); err != nil {
		log.Error(what+" stopped", "error", err)
		return 1
	}
	log.Info(what + " stopped")
	return 0
}

// The endpoint of the agent and of the controller (/metrics, /healthz,
// /readyz) listens on the pod's address: whoever reaches the pod network
// can call it, so it is bounded: small headers, timeouts on every phase, a
// few connections and fewer requests at a time. Nothing it serves takes
// input.
const (
	maxHeaderBytes = 4 << 10
	maxConns       = 16
	maxInFlight    = 4
)

// serve serves the endpoint on ln until ctx ends.
func serve(ctx context.Context, ln net.Listener, m prometheus.Collector, healthy, ready func() error, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry: reg, MaxRequestsInFlight: maxInFlight, Timeout: 10 * time.Second, ErrorLog: slogPrinter{log},
	}))
	probe := func(check func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if err := check(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.Handle("GET /healthz", probe(healthy))
	mux.Handle("GET /readyz", probe(ready))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       10 * time.Second, // shorter than any scrape interval: a kept-alive connection is no use
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(netutil.LimitListener(ln, maxConns))
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}

// slogPrinter is promhttp's error log on the component's logger.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", "error", fmt.Sprint(v...)) }

// Kicker is an informer's handler that wakes the loop waiting on kick at
// every change, unless a wake-up is pending already.
func Kicker(kick chan struct{}) cache.ResourceEventHandlerFuncs {
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
}

// Stuck says why a loop that makes a pass every interval, the last one
// finished at last, is stuck; nil before a first pass (readiness says so).
func Stuck(last time.Time, interval time.Duration) error {
	if late := time.Since(last); !last.IsZero() && late > 3*interval+time.Minute {
		return fmt.Errorf("no pass for %s", late.Round(time.Second))
	}
	return nil
}
