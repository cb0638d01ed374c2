package controller

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

// The controller's HTTP endpoint (/metrics, /healthz, /readyz) is bounded
// as the agent's is: it listens on the pod's address and takes no input.
const (
	maxHeaderBytes = 4 << 10
	maxConns       = 16
	maxInFlight    = 4
)

// Serve serves the controller's endpoint on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, c *Controller, m *Metrics, log *slog.Logger) error {
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
	mux.Handle("GET /healthz", probe(c.Healthy))
	mux.Handle("GET /readyz", probe(c.Ready))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       10 * time.Second,
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

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", "error", fmt.Sprint(v...)) }
