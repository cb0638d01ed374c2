package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// Config is what the agent runs with.
type Config struct {
	NodeName   string
	StateDir   string   // read only
	StatusDir  string   // where status.json goes, for `netns-pin check`; "" none
	Namespaces []string // the holder namespaces: informers and RBAC are theirs only
	Interval   time.Duration
	Client     kubernetes.Interface
	Recorder   record.EventRecorder
	Metrics    *Metrics
	Log        *slog.Logger
	Tracker    *Tracker
	Version    string
}

// Agent is one node's agent.
type Agent struct {
	cfg     Config
	listers []listersv1.PodLister
	synced  []cache.InformerSynced
	kick    chan struct{}

	mu         sync.Mutex
	lastPass   time.Time
	storeErr   error
	apiErr     error
	apiChecked time.Time

	eventsRead int64
	status     Status
}

// New sets up the informers, one per holder namespace, each limited to the
// pods of this node (fieldSelector spec.nodeName): the agent reads nothing
// else of the cluster.
func New(cfg Config) *Agent {
	a := &Agent{cfg: cfg, kick: make(chan struct{}, 1)}
	a.status = Status{Node: cfg.NodeName, PID: os.Getpid(), Version: cfg.Version, Started: time.Now().UTC(), Interval: cfg.Interval}
	sel := fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.poke() },
		UpdateFunc: func(any, any) { a.poke() },
		DeleteFunc: func(any) { a.poke() },
	}
	if cfg.Client == nil {
		return a // store only: metrics, no API (docs/operating.md, "Metrics")
	}
	for _, ns := range cfg.Namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sel }))
		inf := f.Core().V1().Pods()
		_ = inf.Informer().SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			a.cfg.Metrics.count("apiError", "watch")
			a.setAPIErr(fmt.Errorf("watch pods in %s: %w", ns, err))
			cache.DefaultWatchErrorHandler(context.Background(), nil, err)
		})
		_, _ = inf.Informer().AddEventHandler(handler)
		a.listers = append(a.listers, inf.Lister())
		a.synced = append(a.synced, inf.Informer().HasSynced)
		go inf.Informer().RunWithContext(context.Background())
	}
	return a
}

func (a *Agent) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Agent) setAPIErr(err error) {
	a.mu.Lock()
	a.apiErr, a.apiChecked = err, time.Now()
	a.mu.Unlock()
}

// Run makes a pass at every change of a pod of the node and every
// interval (the store has no notifications: records are polled), until
// ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return fmt.Errorf("pods of node %s in %v: the informers did not sync", a.cfg.NodeName, a.cfg.Namespaces)
	}
	a.cfg.Log.Info("agent started", "node", a.cfg.NodeName, "namespaces", a.cfg.Namespaces, "stateDir", a.cfg.StateDir, "interval", a.cfg.Interval.String())
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		a.pass(ctx)
		select {
		case <-ctx.Done():
			a.status.Stopped = time.Now().UTC()
			a.writeStatus()
			return nil
		case <-t.C:
		case <-a.kick:
		}
	}
}

// pass is one look at pods and store, and what it calls for.
func (a *Agent) pass(ctx context.Context) {
	objs := map[string]*corev1.Pod{}
	var pods []Pod
	for _, l := range a.listers {
		list, err := l.List(everything)
		if err != nil {
			continue // a lister of an informer's cache does not fail
		}
		for _, p := range list {
			objs[string(p.UID)] = p
			pods = append(pods, Pod{
				Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
				Finalizer: slices.Contains(p.Finalizers, Finalizer), Deleting: p.DeletionTimestamp != nil,
			})
		}
	}
	v, events, reset, sweep, storeErr := a.readStore()
	a.cfg.Metrics.storeSeen(v, events, reset, sweep, storeErr != nil)
	plan := Decide(pods, v)
	if a.cfg.Client == nil {
		plan = Plan{} // no API: nothing to patch or post
	}
	for _, p := range plan.Add {
		if err := a.patch(ctx, p, true); err != nil {
			a.cfg.Metrics.count("apiError", "add")
			a.cfg.Log.Warn("add the finalizer", "pod", p.key(), "uid", p.UID, "error", err)
			continue
		}
		a.cfg.Metrics.count("added", "")
		a.cfg.Log.Info("finalizer added to a pinned holder", "pod", p.key(), "uid", p.UID)
	}
	var evs []PodEvent
	if a.cfg.Client != nil {
		evs = a.cfg.Tracker.Observe(pods, v, time.Now())
	}
	released := map[string]bool{}
	for _, e := range evs {
		if e.Reason == ReasonReleased {
			released[e.UID] = true
		}
		a.post(objs[e.UID], e.Type, e.Reason, e.Message)
	}
	for _, p := range plan.Lift {
		if err := a.patch(ctx, p, false); err != nil {
			a.cfg.Metrics.count("apiError", "lift")
			a.cfg.Log.Warn("lift the finalizer", "pod", p.key(), "uid", p.UID, "error", err)
			continue
		}
		a.cfg.Metrics.count("lifted", "")
		a.cfg.Log.Info("finalizer lifted: no record of the node names the pod", "pod", p.key(), "uid", p.UID)
		if !released[p.UID] {
			a.post(objs[p.UID], eventNormal, ReasonLifted, fmt.Sprintf("no pin of this pod on node %s (never pinned, or released while the agent was away): finalizer %s lifted", a.cfg.NodeName, Finalizer))
		}
	}
	for _, pin := range plan.Unprotected {
		a.cfg.Log.Warn("pin without a protected pod object: IPAM that acts on pod objects may reuse its address",
			"attachment", pin.Attachment, "cluster", pin.Cluster, "pod", pin.PodNamespace+"/"+pin.PodName, "uid", pin.PodUID)
	}
	if plan.Blocked != "" {
		a.cfg.Log.Warn("no finalizer is lifted", "reason", plan.Blocked)
	}
	held := 0
	var fins []StatusPod
	for _, p := range pods {
		if p.Finalizer {
			held++
			fins = append(fins, StatusPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Deleting: p.Deleting})
		}
	}
	a.cfg.Metrics.agentSeen(held, len(plan.Unprotected), plan.Blocked != "")
	a.pingAPI(ctx)
	a.mu.Lock()
	a.lastPass, a.storeErr = time.Now(), storeErr
	apiErr := a.apiErr
	a.mu.Unlock()
	a.status.Heartbeat, a.status.Finalizers, a.status.Blocked = time.Now().UTC(), fins, plan.Blocked
	a.status.APIError = ""
	if apiErr != nil {
		a.status.APIError = apiErr.Error()
	}
	a.writeStatus()
}

var everything = labels.Everything()

// readStore reads records, the new lines of the events file and the
// sweeper's status, all without the lock.
func (a *Agent) readStore() (View, []netnsstore.Event, bool, *netnsstore.SweepStatus, error) {
	var v View
	recs, bad, err := netnsstore.ReadRecords(a.cfg.StateDir)
	if err != nil {
		v.Err = err
	}
	v.Unreadable = len(bad)
	for n, e := range bad {
		a.cfg.Log.Warn("record cannot be read", "attachment", n, "error", e)
	}
	for _, r := range recs {
		v.Pins = append(v.Pins, PinOf(r))
	}
	events, next, reset, eerr := netnsstore.ReadEvents(a.cfg.StateDir, a.eventsRead)
	if eerr == nil {
		a.eventsRead = next
	}
	sweep, serr := netnsstore.ReadSweepStatus(a.cfg.StateDir)
	return v, events, reset, sweep, errors.Join(err, eerr, serr)
}

// patch adds or lifts the finalizer with a strategic merge patch: the
// finalizers list merges, so no other finalizer is ever dropped, and the
// pod's UID in the patch is a precondition (it cannot change), so a newer
// pod of the same name is never touched.
func (a *Agent) patch(ctx context.Context, p Pod, add bool) error {
	meta := map[string]any{"uid": p.UID}
	if add {
		meta["finalizers"] = []string{Finalizer}
	} else {
		meta["$deleteFromPrimitiveList/finalizers"] = []string{Finalizer}
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = a.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: "netns-pin-agent"})
	if !add && apierrors.IsNotFound(err) {
		return nil // gone already: nothing left to lift
	}
	return err
}

func (a *Agent) post(obj *corev1.Pod, typ, reason, msg string) {
	if obj == nil {
		return
	}
	a.cfg.Recorder.Event(obj, typ, reason, msg)
	a.cfg.Metrics.count("event", reason)
}

// pingAPI asks the API server for its version at most every 30 s: the
// readiness of the agent is that it can reach the API.
func (a *Agent) pingAPI(ctx context.Context) {
	if a.cfg.Client == nil {
		return
	}
	a.mu.Lock()
	due := time.Since(a.apiChecked) >= 30*time.Second
	a.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := a.cfg.Client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		a.cfg.Metrics.count("apiError", "ping")
		err = fmt.Errorf("reach the API server: %w", err)
	}
	a.setAPIErr(err)
}

// Healthy: a pass finished lately (the loop is not stuck).
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastPass.IsZero() {
		return nil // still syncing: readiness says so
	}
	if late := time.Since(a.lastPass); late > 3*a.cfg.Interval+time.Minute {
		return fmt.Errorf("no pass for %s", late.Round(time.Second))
	}
	return nil
}

// Ready: the informers synced, the API server answers and the store can
// be read.
func (a *Agent) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.lastPass.IsZero():
		return errors.New("the pod informers have not synced yet")
	case a.apiErr != nil:
		return a.apiErr
	case a.storeErr != nil:
		return fmt.Errorf("read the store: %w", a.storeErr)
	}
	return nil
}

// Status is the agent's status file, <statusDir>/status.json, for
// `netns-pin check` on the node, which sees no API: whether an agent runs,
// and which pods of the node carry the finalizer.
type Status struct {
	Node       string        `json:"node"`
	PID        int           `json:"pid"`
	Version    string        `json:"version,omitempty"`
	Started    time.Time     `json:"started"`
	Interval   time.Duration `json:"interval"`
	Heartbeat  time.Time     `json:"heartbeat"`
	APIError   string        `json:"apiError,omitempty"`
	Blocked    string        `json:"blocked,omitempty"`
	Finalizers []StatusPod   `json:"finalizers"`
	Stopped    time.Time     `json:"stopped,omitzero"`
}

// StatusPod is a pod of the node carrying the finalizer.
type StatusPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Deleting  bool   `json:"deleting,omitempty"`
}

// StatusFile is the name of the status file in the status folder.
const StatusFile = "status.json"

func (a *Agent) writeStatus() {
	if a.cfg.StatusDir == "" {
		return
	}
	data, err := json.Marshal(a.status)
	if err == nil {
		tmp := filepath.Join(a.cfg.StatusDir, ".tmp-"+StatusFile)
		if err = os.WriteFile(tmp, data, 0o644); err == nil {
			err = os.Rename(tmp, filepath.Join(a.cfg.StatusDir, StatusFile))
		}
	}
	if err != nil {
		a.cfg.Log.Warn("write the agent's status file", "error", err)
	}
}
