//go:build agent

package main

// netns-pin-agent: this program built with -tags agent. It is netns-pin in
// every respect, and `sweep --metrics-address HOST:PORT` also serves the
// sweeper's Prometheus metrics at /metrics (docs/operating.md, "Metrics").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/netnsstore"
)

func sweepWithMetrics(_ []string, c *conf.Config, cf commandFlags, stderr io.Writer) int {
	m := newSweepMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", cf.metrics)
	if err != nil {
		fmt.Fprintf(stderr, "netns-pin: --metrics-address %s: %v\n", cf.metrics, err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(stderr, "netns-pin: metrics server:", err)
		}
	}()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Fprintf(stderr, "netns-pin: serving metrics at http://%s/metrics\n", ln.Addr())
	return runSweep(c, cf.interval, cf.once, m, stderr)
}

var (
	descPins = prometheus.NewDesc("netns_pin_pins", "Pinned network namespaces by cluster and state (active; draining: a DEL found it in use; abandoned: draining, and its runtime gave up on the teardown).",
		[]string{"cluster", "state"}, nil)
	descOldest = prometheus.NewDesc("netns_pin_oldest_draining_seconds", "How long the cluster's oldest draining pin has been draining (0 when none is).",
		[]string{"cluster"}, nil)
	descRefusals = prometheus.NewDesc("netns_pin_refusals_total", "DELs of a runtime refused because the netns was still in use.",
		[]string{"cluster"}, nil)
	descReleases = prometheus.NewDesc("netns_pin_releases_total", "Pins released, by who released them (del: a runtime's DEL; gc: CNI GC or netns-pin gc; sweeper; operator: netns-pin release; repair: the repair of another operation).",
		[]string{"cluster", "by"}, nil)
	descAbandoned = prometheus.NewDesc("netns_pin_abandoned_teardowns_total", "Teardowns that a runtime gave up on, finished by netns-pin (the chain's DEL run before the release).",
		nil, nil)
	descErrors = prometheus.NewDesc("netns_pin_sweep_errors_total", "Sweeper rounds that failed.", nil, nil)
	descLast   = prometheus.NewDesc("netns_pin_last_sweep_timestamp_seconds", "When the sweeper last finished a round (Unix time).", nil, nil)
)

// releasers are the values of releases_total's by label, each exported
// from 0 for every known cluster, so that the first release is an
// increase.
var releasers = []string{netnsstore.ByDEL, netnsstore.ByGC, netnsstore.BySweeper, netnsstore.ByOperator, netnsstore.ByRepair}

// sweepMetrics is the agent's collector: what the last round saw of the
// records, the counts of the events file, and the sweeper's own.
type sweepMetrics struct {
	mu       sync.Mutex
	pins     map[[2]string]int    // cluster, state
	oldest   map[string]time.Time // cluster -> its oldest draining pin's DrainingSince (zero: none)
	refusals map[string]uint64    // cluster
	releases map[[2]string]uint64 // cluster, by
	finished uint64               // abandoned teardowns
	errors   uint64
	last     time.Time
	check    prometheus.Histogram
}

func newSweepMetrics() *sweepMetrics {
	return &sweepMetrics{
		pins: map[[2]string]int{}, oldest: map[string]time.Time{}, refusals: map[string]uint64{}, releases: map[[2]string]uint64{},
		check: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netns_pin_inuse_check_seconds",
			Help:    "Duration of the in-use checks that decided a release or a refusal (of every netns-pin process on the node, from the events file).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
}

func (m *sweepMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPins, descOldest, descRefusals, descReleases, descAbandoned, descErrors, descLast} {
		ch <- d
	}
	m.check.Describe(ch)
}

func (m *sweepMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, n := range m.pins {
		ch <- prometheus.MustNewConstMetric(descPins, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for cl, since := range m.oldest {
		age := 0.0
		if !since.IsZero() {
			age = now.Sub(since).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, age, cl)
	}
	for cl, n := range m.refusals {
		ch <- prometheus.MustNewConstMetric(descRefusals, prometheus.CounterValue, float64(n), cl)
	}
	for k, n := range m.releases {
		ch <- prometheus.MustNewConstMetric(descReleases, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(descAbandoned, prometheus.CounterValue, float64(m.finished))
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(m.errors))
	if !m.last.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, float64(m.last.UnixNano())/1e9)
	}
	m.check.Collect(ch)
}

// round takes in what a sweeper round saw: the records (read under the
// lock, changing nothing) and the events appended since the last round.
func (m *sweepMetrics) round(r sweepRound) {
	var snap *netnsstore.Snapshot
	failed := r.err != nil || r.eventsErr != nil
	if r.store != nil {
		var err error
		if snap, err = r.store.Inspect(); err != nil {
			failed = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if failed {
		m.errors++
	}
	if r.err == nil {
		m.last = time.Now()
	}
	if r.reset {
		// The file was replaced by someone else: its counts start again.
		m.refusals, m.releases, m.finished = map[string]uint64{}, map[[2]string]uint64{}, 0
	}
	for _, e := range r.events {
		switch e.Kind {
		case netnsstore.EventRefusal:
			m.refusals[e.Cluster] += e.Count
		case netnsstore.EventRelease:
			m.releases[[2]string{e.Cluster, e.By}] += e.Count
		case netnsstore.EventAbandoned:
			m.finished += e.Count
		}
		if e.Check > 0 {
			m.check.Observe(e.Check.Seconds())
		}
	}
	if snap == nil {
		return
	}
	m.pins, m.oldest = map[[2]string]int{}, map[string]time.Time{}
	for _, rec := range snap.Records {
		cl := rec.Cluster
		for _, st := range []string{"active", "draining", "abandoned"} {
			if _, ok := m.pins[[2]string{cl, st}]; !ok {
				m.pins[[2]string{cl, st}] = 0
			}
		}
		if _, ok := m.oldest[cl]; !ok {
			m.oldest[cl] = time.Time{}
		}
		if _, ok := m.refusals[cl]; !ok {
			m.refusals[cl] = 0
		}
		for _, by := range releasers {
			if _, ok := m.releases[[2]string{cl, by}]; !ok {
				m.releases[[2]string{cl, by}] = 0
			}
		}
		state := ""
		switch rec.State {
		case netnsstore.StateActive:
			state = "active"
		case netnsstore.StateDraining, netnsstore.StateUnpinned:
			state = "draining"
			if rec.Abandoned {
				state = "abandoned"
			}
			if o := m.oldest[cl]; !rec.DrainingSince.IsZero() && (o.IsZero() || rec.DrainingSince.Before(o)) {
				m.oldest[cl] = rec.DrainingSince
			}
		default:
			continue // intent, releasing: settled by the next operation
		}
		m.pins[[2]string{cl, state}]++
	}
}
