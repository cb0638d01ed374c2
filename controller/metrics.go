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
	descLifted = prometheus.NewDesc("netns_pin_controller_finalizers_lifted_total",
		"Finalizers lifted by the controller, by the Event's reason (NetnsPinNodeGone, NetnsPinNodeOutOfService).", []string{"reason"}, nil)
	descAPIErrors = prometheus.NewDesc("netns_pin_controller_api_errors_total",
		"Requests to the Kubernetes API that failed, by operation (get_node, get_pod, lift, watch).", []string{"op"}, nil)
	descLeader = prometheus.NewDesc("netns_pin_controller_is_leader", "1 while this replica holds the leader Lease and acts.", nil, nil)
	descPasses = prometheus.NewDesc("netns_pin_controller_passes_total", "Passes over the holders made by this replica as leader.", nil, nil)
)

// APIOps are the values of api_errors_total's op label, each exported
// from 0.
var APIOps = []string{"get_node", "get_pod", "lift", "watch"}

// Metrics is the controller's Prometheus collector.
type Metrics struct {
	mu        sync.Mutex
	waiting   map[[2]string]int       // node, reason
	oldest    map[[2]string]time.Time // node, reason -> earliest deletionTimestamp
	lifted    map[string]uint64
	apiErrors map[string]uint64
	leader    bool
	passes    uint64
}

// NewMetrics returns an empty collector.
func NewMetrics() *Metrics {
	m := &Metrics{waiting: map[[2]string]int{}, oldest: map[[2]string]time.Time{},
		lifted: map[string]uint64{ReasonNodeGone: 0, ReasonNodeOutOfService: 0}, apiErrors: map[string]uint64{}}
	for _, op := range APIOps {
		m.apiErrors[op] = 0
	}
	return m
}

func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWaiting, descOldest, descLifted, descAPIErrors, descLeader, descPasses} {
		ch <- d
	}
}

func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	if mt, err := prometheus.NewConstMetric(d, t, v, labels...); err == nil {
		ch <- mt
	}
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, n := range m.waiting {
		emit(ch, descWaiting, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for k, since := range m.oldest {
		emit(ch, descOldest, prometheus.GaugeValue, now.Sub(since).Seconds(), k[0], k[1])
	}
	for r, n := range m.lifted {
		emit(ch, descLifted, prometheus.CounterValue, float64(n), r)
	}
	for op, n := range m.apiErrors {
		emit(ch, descAPIErrors, prometheus.CounterValue, float64(n), op)
	}
	l := 0.0
	if m.leader {
		l = 1
	}
	emit(ch, descLeader, prometheus.GaugeValue, l)
	emit(ch, descPasses, prometheus.CounterValue, float64(m.passes))
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
	m.passes++
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
	m.leader = on
	if !on {
		m.waiting, m.oldest = map[[2]string]int{}, map[[2]string]time.Time{}
	}
}

func (m *Metrics) apiError(op string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.apiErrors[op]++
}

func (m *Metrics) liftedOne(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lifted[reason]++
}
