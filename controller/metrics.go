package controller

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// The controller's metrics (docs/operating.md, "Nodes that go away"). The
// waiting holders are those of the last pass of the leader; a replica that
// is not the leader exports none.
var (
	descWaiting = prometheus.NewDesc("netns_pin_controller_holders_waiting",
		"Holder pods being deleted that still carry the finalizer netns-pin.io/pin, by node and why (released_pending: the node is Ready, its agent lifts it after the release; "+
			"node_unreachable: the node is NotReady or Unknown; node_gone_quarantine: the Node object is gone, for less than the quarantine; node_unreadable: the node could not be read).",
		[]string{"node", "reason"}, nil)
	descOldest = prometheus.NewDesc("netns_pin_controller_oldest_waiting_seconds",
		"How long the oldest holder of the node waiting for its finalizer has been Terminating (since its deletionTimestamp), by node and reason.",
		[]string{"node", "reason"}, nil)
)

// Metrics is the controller's Prometheus collector.
type Metrics struct {
	mu      sync.Mutex
	waiting map[[2]string]int       // node, reason
	oldest  map[[2]string]time.Time // node, reason -> earliest deletionTimestamp

	lifted    *prometheus.CounterVec // reason
	apiErrors *prometheus.CounterVec // op
	leader    prometheus.Gauge
	passes    prometheus.Counter
}

// NewMetrics returns an empty collector.
func NewMetrics() *Metrics {
	m := &Metrics{waiting: map[[2]string]int{}, oldest: map[[2]string]time.Time{},
		lifted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "netns_pin_controller_finalizers_lifted_total",
			Help: "Finalizers lifted by the controller, by the Event's reason (NetnsPinNodeGone, NetnsPinNodeOutOfService)."}, []string{"reason"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "netns_pin_controller_api_errors_total",
			Help: "Requests to the Kubernetes API that failed, by operation (get_node, get_pod, lift, watch)."}, []string{"op"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "netns_pin_controller_is_leader", Help: "1 while this replica holds the leader Lease and acts."}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{Name: "netns_pin_controller_passes_total", Help: "Passes over the holders made by this replica as leader."}),
	}
	m.lifted.WithLabelValues(ReasonNodeGone)
	m.lifted.WithLabelValues(ReasonNodeOutOfService)
	for _, op := range []string{"get_node", "get_pod", "lift", "watch"} {
		m.apiErrors.WithLabelValues(op)
	}
	return m
}

func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descWaiting
	ch <- descOldest
	for _, c := range []prometheus.Collector{m.lifted, m.apiErrors, m.leader, m.passes} {
		c.Describe(ch)
	}
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	// Nodes whose name is not UTF-8 were left out by passDone.
	for k, n := range m.waiting {
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for k, since := range m.oldest {
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, now.Sub(since).Seconds(), k[0], k[1])
	}
	for _, c := range []prometheus.Collector{m.lifted, m.apiErrors, m.leader, m.passes} {
		c.Collect(ch)
	}
}

// waitingHolder is one holder that keeps its finalizer after a pass.
type waitingHolder struct {
	node, reason string
	since        time.Time // its deletionTimestamp
}

// passDone takes in the holders waiting after one pass.
func (m *Metrics) passDone(ws []waitingHolder) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.passes.Inc()
	m.waiting, m.oldest = map[[2]string]int{}, map[[2]string]time.Time{}
	for _, w := range ws {
		if !utf8.ValidString(w.node) {
			continue
		}
		k := [2]string{w.node, w.reason}
		m.waiting[k]++
		if o, ok := m.oldest[k]; !ok || w.since.Before(o) {
			m.oldest[k] = w.since
		}
	}
}

func (m *Metrics) setLeader(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leader.Set(0)
	if on {
		m.leader.Set(1)
	} else {
		m.waiting, m.oldest = map[[2]string]int{}, map[[2]string]time.Time{}
	}
}

func (m *Metrics) apiError(op string) { m.apiErrors.WithLabelValues(op).Inc() }
