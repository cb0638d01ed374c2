package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
)

// The agent's HTTP endpoint (/metrics, /healthz, /readyz) listens on the
// pod's address: whoever reaches the pod network can call it, so it is
// bounded: small headers, timeouts on every phase, a few connections and
// fewer requests at a time. Nothing it serves takes input.
const (
	maxHeaderBytes = 4 << 10
	maxConns       = 16
	maxInFlight    = 4
)

// Serve serves the agent's endpoint on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, a *Agent, m *Metrics, log *slog.Logger) error {
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
	mux.Handle("GET /healthz", probe(a.Healthy))
	mux.Handle("GET /readyz", probe(a.Ready))
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

// slogPrinter is promhttp's error log on the agent's logger.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", "error", fmt.Sprint(v...)) }
