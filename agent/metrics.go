package agent

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// The node's metrics (docs/operating.md, "Metrics"). Those of the store are
// read from stateDir without privilege: the records, the events file that
// refused and released DELs append to, the sweeper's status sweeper.json.
// The agent's own are netns_pin_agent_*.
var (
	descPins = prometheus.NewDesc("netns_pin_pins", "Pinned network namespaces by cluster and state (active; draining: a DEL found it in use; abandoned: draining, and its runtime gave up on the teardown).",
		[]string{"cluster", "state"}, nil)
	descOldest = prometheus.NewDesc("netns_pin_oldest_draining_seconds", "How long the cluster's oldest draining pin has been draining (0 when none is).",
		[]string{"cluster"}, nil)
	descRefusals = prometheus.NewDesc("netns_pin_refusals_total", "DELs of a runtime refused because the netns was still in use.",
		[]string{"cluster"}, nil)
	descReleases = prometheus.NewDesc("netns_pin_releases_total", "Pins released, by who released them (del: a runtime's DEL; gc: CNI GC or netns-pinctl gc; sweeper; operator: netns-pinctl release; repair: the repair of another operation).",
		[]string{"cluster", "by"}, nil)
	descAbandoned = prometheus.NewDesc("netns_pin_abandoned_teardowns_total", "Teardowns that a runtime gave up on, finished by netns-pin (the chain's DEL run before the release).",
		nil, nil)
	descSweepErrors = prometheus.NewDesc("netns_pin_sweep_errors_total", "Sweeper rounds that failed, as the sweeper's status file showed them to the agent.", nil, nil)
	descLastSweep   = prometheus.NewDesc("netns_pin_last_sweep_timestamp_seconds", "When the sweeper last finished a round (Unix time, from its status file).", nil, nil)

	descAPIErrors = prometheus.NewDesc("netns_pin_agent_api_errors_total", "Requests to the Kubernetes API that failed, by operation (add, lift, event, watch, ping) and the API's reason (Forbidden: RBAC or admission refused it).", []string{"op", "reason"}, nil)
	descSkipped   = prometheus.NewDesc("netns_pin_agent_events_lines_skipped_total", "Lines of the events file the agent skipped: a kind it does not know, or a cluster or actor that is not UTF-8.", nil, nil)
)

// releasers are the values of releases_total's by label, each exported
// from 0 for every known cluster, so that the first release is an increase.
var releasers = []string{netnsstore.ByDEL, netnsstore.ByGC, netnsstore.BySweeper, netnsstore.ByOperator, netnsstore.ByRepair}

// Metrics is the agent's Prometheus collector.
type Metrics struct {
	mu       sync.Mutex
	pins     map[[2]string]int    // cluster, state
	oldest   map[string]time.Time // cluster -> its oldest draining pin's DrainingSince
	clusters map[string]bool      // every cluster a record of any store named
	stores   map[string]*storeCounters
	check    prometheus.Histogram

	apiErrors map[[2]string]uint64 // op, reason
	skipped   uint64

	// The agent's own besides those two, each in own.
	held, unprotected, blocked, ready, registered, unreadableStores prometheus.Gauge
	added, lifted, storeFails                                       prometheus.Counter
	events                                                          *prometheus.CounterVec // reason
	own                                                             []prometheus.Collector
}

// storeCounters are the counters one store's events file and sweeper
// status carry: each store's file is folded on its own, so each is
// counted on its own and the metrics are their sums.
type storeCounters struct {
	refusals    map[string]uint64
	releases    map[[2]string]uint64
	finished    uint64
	sweepErrors uint64
	lastSweep   time.Time
	lastRound   time.Time // the status file's LastRound last counted
}

// NewMetrics returns an empty collector.
func NewMetrics() *Metrics {
	m := &Metrics{
		pins: map[[2]string]int{}, oldest: map[string]time.Time{}, clusters: map[string]bool{}, stores: map[string]*storeCounters{},
		apiErrors: map[[2]string]uint64{},
		check: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "netns_pin_inuse_check_seconds",
			Help:    "Duration of the in-use checks that decided a release or a refusal (of every netns-pin process on the node, from the events file).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "netns_pin_agent_events_total", Help: "Events posted on holder pods, by reason (repeats of a refusal included)."}, []string{"reason"}),
	}
	m.own = []prometheus.Collector{m.check, m.events}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		m.own = append(m.own, g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		m.own = append(m.own, c)
		return c
	}
	m.held = gauge("netns_pin_agent_finalizers_held", "Pods of this node that carry the finalizer netns-pin.io/pin.")
	m.added = counter("netns_pin_agent_finalizers_added_total", "Finalizers added by the agent to pinned holders whose template lacks it.")
	m.lifted = counter("netns_pin_agent_finalizers_lifted_total", "Finalizers lifted by the agent, each once no record of the node named the pod.")
	m.unprotected = gauge("netns_pin_agent_unprotected_pins", "Pins whose pod object is gone from the API, or is being deleted without the finalizer: "+
		"IPAM that acts on pod objects may hand out their address (the window the agent cannot cover).")
	m.blocked = gauge("netns_pin_agent_lifts_blocked", "1 while the agent lifts no finalizer because a record cannot be read (docs/operating.md).")
	m.ready = gauge("netns_pin_agent_ready", "1 when the agent is ready (/readyz): its pod informer synced, a pass over every registered store finished, and nothing it needs was refused.")
	m.registered = gauge("netns_pin_agent_stores_registered", "Stores registered on the node (/var/lib/netns-pin/stores) that the agent reads.")
	m.unreadableStores = gauge("netns_pin_agent_stores_unreadable", "Registered stores (or the registry itself) the agent cannot read: while above 0 no finalizer is lifted.")
	m.storeFails = counter("netns_pin_agent_store_errors_total", "Passes that could not read the store (records, events file or the sweeper's status).")
	return m
}

func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPins, descOldest, descRefusals, descReleases, descAbandoned, descSweepErrors, descLastSweep, descAPIErrors, descSkipped} {
		ch <- d
	}
	for _, c := range m.own {
		c.Describe(ch)
	}
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
	refusals, releases := map[string]uint64{}, map[[2]string]uint64{}
	for cl := range m.clusters {
		refusals[cl] = 0
		for _, by := range releasers {
			releases[[2]string{cl, by}] = 0
		}
	}
	var finished, sweepErrors uint64
	var lastSweep time.Time
	for _, sc := range m.stores {
		for cl, n := range sc.refusals {
			refusals[cl] += n
		}
		for k, n := range sc.releases {
			releases[k] += n
		}
		finished += sc.finished
		sweepErrors += sc.sweepErrors
		// The store swept longest ago: one not swept shows.
		if !sc.lastSweep.IsZero() && (lastSweep.IsZero() || sc.lastSweep.Before(lastSweep)) {
			lastSweep = sc.lastSweep
		}
	}
	for cl, n := range refusals {
		emit(ch, descRefusals, prometheus.CounterValue, float64(n), cl)
	}
	for k, n := range releases {
		emit(ch, descReleases, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	emit(ch, descAbandoned, prometheus.CounterValue, float64(finished))
	emit(ch, descSweepErrors, prometheus.CounterValue, float64(sweepErrors))
	if !lastSweep.IsZero() {
		emit(ch, descLastSweep, prometheus.GaugeValue, float64(lastSweep.UnixNano())/1e9)
	}
	for _, c := range m.own {
		c.Collect(ch)
	}
	counted := map[string]bool{} // op
	for k, n := range m.apiErrors {
		emit(ch, descAPIErrors, prometheus.CounterValue, float64(n), k[0], k[1])
		counted[k[0]] = true
	}
	for _, op := range []string{"add", "lift", "event", "watch", "ping"} {
		if !counted[op] {
			emit(ch, descAPIErrors, prometheus.CounterValue, 0, op, "")
		}
	}
	emit(ch, descSkipped, prometheus.CounterValue, float64(m.skipped))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// eventsSeen takes in what one pass read of one store (named by its
// stateDir): the events appended since the last pass (reset: the file was
// folded or replaced and is read again from its start, whose lines are
// the sums of all before), and the sweeper's status.
func (m *Metrics) eventsSeen(store string, events []netnsstore.Event, reset bool, sweep *netnsstore.SweepStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sc := m.stores[store]
	if sc == nil || reset {
		prev := sc
		sc = &storeCounters{refusals: map[string]uint64{}, releases: map[[2]string]uint64{}}
		if prev != nil {
			sc.sweepErrors, sc.lastSweep, sc.lastRound = prev.sweepErrors, prev.lastSweep, prev.lastRound
		}
		m.stores[store] = sc
	}
	for _, e := range events {
		// A line that cannot become labels is skipped, and counted.
		if !utf8.ValidString(e.Cluster) || !utf8.ValidString(e.By) {
			m.skipped++
			continue
		}
		switch e.Kind {
		case netnsstore.EventRefusal:
			sc.refusals[e.Cluster] += e.Count
		case netnsstore.EventRelease:
			sc.releases[[2]string{e.Cluster, e.By}] += e.Count
		case netnsstore.EventAbandoned:
			sc.finished += e.Count
		default:
			m.skipped++
			continue
		}
		if e.Check > 0 {
			m.check.Observe(e.Check.Seconds())
		}
	}
	if sweep != nil && !sweep.LastRound.IsZero() {
		if sweep.LastRound.After(sc.lastRound) {
			if sweep.Error != "" {
				sc.sweepErrors++
			}
			sc.lastRound = sweep.LastRound
		}
		if sweep.Error == "" {
			sc.lastSweep = sweep.LastRound
		}
	}
}

// storeSeen takes in the records one pass read of every store, and how
// many stores were registered and could not be read.
func (m *Metrics) storeSeen(v View, failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if failed {
		m.storeFails.Inc()
	}
	m.registered.Set(float64(v.Stores))
	m.unreadableStores.Set(float64(len(v.UnreadStores)))
	if v.Err != nil {
		return // keep the last counts of a registry that could not be listed
	}
	m.pins, m.oldest = map[[2]string]int{}, map[string]time.Time{}
	for _, p := range v.Pins {
		cl := p.Cluster
		if !utf8.ValidString(cl) {
			continue
		}
		m.clusters[cl] = true
		if _, ok := m.oldest[cl]; !ok { // the cluster's first pin of this pass: its series start at 0
			m.oldest[cl] = time.Time{}
			for _, st := range []string{"active", "draining", "abandoned"} {
				m.pins[[2]string{cl, st}] = 0
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
	m.held.Set(float64(held))
	m.unprotected.Set(float64(unprotected))
	m.blocked.Set(b2f(blocked))
}

// apiError counts a failed request to the API by operation and the API's
// reason for it ("Forbidden" for RBAC or admission).
func (m *Metrics) apiError(op, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.apiErrors[[2]string{op, reason}]++
}

func (m *Metrics) setReady(ready bool) { m.ready.Set(b2f(ready)) }
