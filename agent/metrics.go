package agent

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// The node's metrics (docs/operating.md, "Metrics"). Those of the store
// keep the names and meaning they had when the privileged sweeper served
// them: everything they say is read from stateDir without privilege (the
// records, the events file that refused and released DELs append to, the
// sweeper's status file sweeper.json). The agent's own are netns_pin_agent_*.
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
	descSweepErrors = prometheus.NewDesc("netns_pin_sweep_errors_total", "Sweeper rounds that failed, as the sweeper's status file showed them to the agent.", nil, nil)
	descLastSweep   = prometheus.NewDesc("netns_pin_last_sweep_timestamp_seconds", "When the sweeper last finished a round (Unix time, from its status file).", nil, nil)

	descHeld        = prometheus.NewDesc("netns_pin_agent_finalizers_held", "Pods of this node that carry the finalizer netns-pin.io/pin.", nil, nil)
	descAdded       = prometheus.NewDesc("netns_pin_agent_finalizers_added_total", "Finalizers added by the agent to pinned holders whose template lacks it.", nil, nil)
	descLifted      = prometheus.NewDesc("netns_pin_agent_finalizers_lifted_total", "Finalizers lifted by the agent, each once no record of the node named the pod.", nil, nil)
	descUnprotected = prometheus.NewDesc("netns_pin_agent_unprotected_pins", "Pins whose pod object is gone from the API, or is being deleted without the finalizer: "+
		"IPAM that acts on pod objects may hand out their address (the window the agent cannot cover).", nil, nil)
	descAPIErrors = prometheus.NewDesc("netns_pin_agent_api_errors_total", "Requests to the Kubernetes API that failed, by operation (add, lift, event, watch, ping).", []string{"op"}, nil)
	descEvents    = prometheus.NewDesc("netns_pin_agent_events_total", "Events posted on holder pods, by reason (repeats of a refusal included).", []string{"reason"}, nil)
	descBlocked   = prometheus.NewDesc("netns_pin_agent_lifts_blocked", "1 while the agent lifts no finalizer because a record cannot be read (docs/operating.md).", nil, nil)
	descSkipped   = prometheus.NewDesc("netns_pin_agent_events_lines_skipped_total", "Lines of the events file the agent skipped: a kind it does not know, or a cluster or actor that is not UTF-8.", nil, nil)
	descStoreErrs = prometheus.NewDesc("netns_pin_agent_store_errors_total", "Passes that could not read the store (records, events file or the sweeper's status).", nil, nil)
)

// releasers are the values of releases_total's by label, each exported
// from 0 for every known cluster, so that the first release is an increase.
var releasers = []string{netnsstore.ByDEL, netnsstore.ByGC, netnsstore.BySweeper, netnsstore.ByOperator, netnsstore.ByRepair}

// Metrics is the agent's Prometheus collector.
type Metrics struct {
	mu       sync.Mutex
	pins     map[[2]string]int    // cluster, state
	oldest   map[string]time.Time // cluster -> its oldest draining pin's DrainingSince
	refusals map[string]uint64
	releases map[[2]string]uint64
	finished uint64
	check    prometheus.Histogram

	sweepErrors uint64
	lastSweep   time.Time
	lastRound   time.Time // the status file's LastRound last counted

	held, unprotected   int
	added, lifted       uint64
	apiErrors           map[string]uint64
	events              map[string]uint64
	blocked             bool
	skipped, storeFails uint64
}

// NewMetrics returns an empty collector.
func NewMetrics() *Metrics {
	m := &Metrics{
		pins: map[[2]string]int{}, oldest: map[string]time.Time{}, refusals: map[string]uint64{}, releases: map[[2]string]uint64{},
		apiErrors: map[string]uint64{}, events: map[string]uint64{},
		check: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netns_pin_inuse_check_seconds",
			Help:    "Duration of the in-use checks that decided a release or a refusal (of every netns-pin process on the node, from the events file).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	for _, op := range []string{"add", "lift", "event", "watch", "ping"} {
		m.apiErrors[op] = 0
	}
	return m
}

func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPins, descOldest, descRefusals, descReleases, descAbandoned, descSweepErrors, descLastSweep,
		descHeld, descAdded, descLifted, descUnprotected, descAPIErrors, descEvents, descBlocked, descSkipped, descStoreErrs} {
		ch <- d
	}
	m.check.Describe(ch)
}

// emit sends a metric; a value the client refuses (a label that is not
// UTF-8 slipped through) is dropped, never a panic of the scrape.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	if mt, err := prometheus.NewConstMetric(d, t, v, labels...); err == nil {
		ch <- mt
	}
}

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, n := range m.pins {
		emit(ch, descPins, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for cl, since := range m.oldest {
		age := 0.0
		if !since.IsZero() {
			age = now.Sub(since).Seconds()
		}
		emit(ch, descOldest, prometheus.GaugeValue, age, cl)
	}
	for cl, n := range m.refusals {
		emit(ch, descRefusals, prometheus.CounterValue, float64(n), cl)
	}
	for k, n := range m.releases {
		emit(ch, descReleases, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	emit(ch, descAbandoned, prometheus.CounterValue, float64(m.finished))
	emit(ch, descSweepErrors, prometheus.CounterValue, float64(m.sweepErrors))
	if !m.lastSweep.IsZero() {
		emit(ch, descLastSweep, prometheus.GaugeValue, float64(m.lastSweep.UnixNano())/1e9)
	}
	m.check.Collect(ch)
	emit(ch, descHeld, prometheus.GaugeValue, float64(m.held))
	emit(ch, descAdded, prometheus.CounterValue, float64(m.added))
	emit(ch, descLifted, prometheus.CounterValue, float64(m.lifted))
	emit(ch, descUnprotected, prometheus.GaugeValue, float64(m.unprotected))
	for op, n := range m.apiErrors {
		emit(ch, descAPIErrors, prometheus.CounterValue, float64(n), op)
	}
	for r, n := range m.events {
		emit(ch, descEvents, prometheus.CounterValue, float64(n), r)
	}
	b := 0.0
	if m.blocked {
		b = 1
	}
	emit(ch, descBlocked, prometheus.GaugeValue, b)
	emit(ch, descSkipped, prometheus.CounterValue, float64(m.skipped))
	emit(ch, descStoreErrs, prometheus.CounterValue, float64(m.storeFails))
}

// validEvent tells whether a line of the events file can become labels.
func validEvent(e netnsstore.Event) bool {
	switch e.Kind {
	case netnsstore.EventRefusal, netnsstore.EventRelease, netnsstore.EventAbandoned:
	default:
		return false
	}
	return utf8.ValidString(e.Cluster) && utf8.ValidString(e.By)
}

// storeSeen takes in what one pass read of the store: the records, the
// events appended since the last pass (reset: the file was folded or
// replaced and is read again from its start, whose lines are the sums of
// all before), and the sweeper's status.
func (m *Metrics) storeSeen(v View, events []netnsstore.Event, reset bool, sweep *netnsstore.SweepStatus, failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if failed {
		m.storeFails++
	}
	if reset {
		m.refusals, m.releases, m.finished = map[string]uint64{}, map[[2]string]uint64{}, 0
	}
	for _, e := range events {
		if !validEvent(e) {
			m.skipped++
			continue
		}
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
	if sweep != nil && !sweep.LastRound.IsZero() {
		if sweep.LastRound.After(m.lastRound) {
			if sweep.Error != "" {
				m.sweepErrors++
			}
			m.lastRound = sweep.LastRound
		}
		if sweep.Error == "" {
			m.lastSweep = sweep.LastRound
		}
	}
	if v.Err != nil {
		return // keep the last counts of a store that could not be listed
	}
	m.pins, m.oldest = map[[2]string]int{}, map[string]time.Time{}
	for _, p := range v.Pins {
		cl := p.Cluster
		if !utf8.ValidString(cl) {
			continue
		}
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
		switch p.State {
		case netnsstore.StateActive:
			state = "active"
		case netnsstore.StateDraining, netnsstore.StateUnpinned:
			state = "draining"
			if p.Abandoned {
				state = "abandoned"
			}
			if o := m.oldest[cl]; !p.DrainingSince.IsZero() && (o.IsZero() || p.DrainingSince.Before(o)) {
				m.oldest[cl] = p.DrainingSince
			}
		default:
			continue // intent, releasing: settled by the next operation
		}
		m.pins[[2]string{cl, state}]++
	}
}

// agentSeen takes in one pass's finalizer figures.
func (m *Metrics) agentSeen(held, unprotected int, blocked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held, m.unprotected, m.blocked = held, unprotected, blocked
}

func (m *Metrics) count(what string, label string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch what {
	case "added":
		m.added++
	case "lifted":
		m.lifted++
	case "apiError":
		m.apiErrors[label]++
	case "event":
		m.events[label]++
	}
}
