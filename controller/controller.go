package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/netns-pin/netns-pin/agent"
	"github.com/netns-pin/netns-pin/internal/kubeproc"
)

// Config is what the controller runs with.
type Config struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	Metrics  *Metrics
	Log      *slog.Logger
	// Quarantine: how long a Node object must be gone (DefaultQuarantine).
	Quarantine time.Duration
	// Interval: a pass at least this often, besides one at every change
	// of a pod or node.
	Interval time.Duration
	// The leader Lease: its namespace and name, this replica's identity,
	// and client-go's leader election timings.
	LeaseNamespace, LeaseName, Identity       string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Guard: the removal guard's policy and the policies it keeps
	// (zero: off).
	Guard Guard
}

// Controller is one replica; only the one that holds the Lease acts.
type Controller struct {
	cfg    Config
	pods   listersv1.PodLister
	nodes  listersv1.NodeLister
	synced []cache.InformerSynced
	kick   chan struct{}

	mu       sync.Mutex
	ready    bool
	leading  bool
	lastPass time.Time

	missing map[string]time.Time // node name -> first seen missing (the leader's)
	guard   guardState           // the leader's
	// guardChanged: the guard's policy changed since the last pass (an
	// apply of deploy/, a helm upgrade or rollback may have written other
	// counts): the next pass reads it again.
	guardChanged atomic.Bool
}

// New sets up the informers: every pod of the cluster and every node,
// each kept in the cache with only the fields a decision reads.
func New(cfg Config) *Controller {
	c := &Controller{cfg: cfg, kick: make(chan struct{}, 1), missing: map[string]time.Time{}}
	f := informers.NewSharedInformerFactory(cfg.Client, 0)
	pods, nodes := f.Core().V1().Pods(), f.Core().V1().Nodes()
	_ = pods.Informer().SetTransform(slimPod)
	_ = nodes.Informer().SetTransform(slimNode)
	for what, inf := range map[string]cache.SharedIndexInformer{"pods": pods.Informer(), "nodes": nodes.Informer()} {
		c.countWatchErrors(what, inf)
		_, _ = inf.AddEventHandler(kubeproc.Kicker(c.kick))
		c.synced = append(c.synced, inf.HasSynced)
		go inf.RunWithContext(context.Background())
	}
	c.pods, c.nodes = pods.Lister(), nodes.Lister()
	if cfg.Guard.Policy != "" {
		c.watchGuardPolicy()
	}
	return c
}

// watchGuardPolicy has every change of the guard's policy make a pass that
// reads it again, so that a count written by someone else (the shipped
// "not counted yet" of an apply, the count of an earlier revision that a
// rollback applies) is set right at once, not at the next Interval. The
// caches do not wait for it: without it the count is still read every
// Interval.
func (c *Controller) watchGuardPolicy() {
	f := informers.NewSharedInformerFactoryWithOptions(c.cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + c.cfg.Guard.Policy // RBAC grants this one name
	}))
	inf := f.Admissionregistration().V1().ValidatingAdmissionPolicies().Informer()
	c.countWatchErrors("the removal guard's policy", inf)
	changed := func() {
		c.guardChanged.Store(true)
		select {
		case c.kick <- struct{}{}:
		default: // a pass is due already
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	go inf.RunWithContext(context.Background())
}

// countWatchErrors counts and logs each failed list or watch of what,
// then lets the informer retry as it does by default.
func (c *Controller) countWatchErrors(what string, inf cache.SharedIndexInformer) {
	_ = inf.SetWatchErrorHandler(func(r *cache.Reflector, err error) {
		c.cfg.Metrics.apiError("watch")
		c.cfg.Log.Warn("watch "+what, "error", err)
		cache.DefaultWatchErrorHandler(context.Background(), r, err)
	})
}

// slimPod keeps of a pod what the controller reads: a cluster's pods are
// many, and all of them are in the cache.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp, Finalizers: p.Finalizers},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
	}
	if isAgent(p) {
		out.Labels = map[string]string{AgentLabel: p.Labels[AgentLabel]}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				out.Status.Conditions = []corev1.PodCondition{{Type: cond.Type, Status: cond.Status}}
			}
		}
	}
	return out, nil
}

// AgentLabel and AgentName: the label by which the node agent's pods are
// known (deploy/agent-daemonset.yaml).
const (
	AgentLabel = "app.kubernetes.io/name"
	AgentName  = "netns-pin-agent"
)

func isAgent(p *corev1.Pod) bool { return p.Labels[AgentLabel] == AgentName }

// readyAgents are the nodes on which a pod of the node agent is Ready.
func readyAgents(pods []*corev1.Pod) map[string]bool {
	ready := map[string]bool{}
	for _, p := range pods {
		if !isAgent(p) || p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready[p.Spec.NodeName] = true
			}
		}
	}
	return ready
}

func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Spec: corev1.NodeSpec{Taints: n.Spec.Taints}}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: cond.Type, Status: cond.Status}}
		}
	}
	return out, nil
}

// Run waits for the caches, then takes part in the leader election until
// ctx ends: the leader makes passes; the others wait for the Lease. It
// returns an error when this replica loses the Lease while it still runs
// (its Deployment restarts it: a fresh start, as client-go recommends).
func (c *Controller) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("the pod and node informers did not sync")
	}
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
	c.cfg.Log.Info("controller started", "identity", c.cfg.Identity, "lease", c.cfg.LeaseNamespace+"/"+c.cfg.LeaseName,
		"quarantine", c.cfg.Quarantine.String(), "interval", c.cfg.Interval.String())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.LeaseNamespace, Name: c.cfg.LeaseName},
		Client:     c.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
	}
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: c.cfg.LeaseName, ReleaseOnCancel: true,
		LeaseDuration: c.cfg.LeaseDuration, RenewDeadline: c.cfg.RenewDeadline, RetryPeriod: c.cfg.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: c.lead,
			OnStoppedLeading: func() {
				c.setLeading(false)
				lost = ctx.Err() == nil
				c.cfg.Log.Info("leader no more", "identity", c.cfg.Identity)
			},
			OnNewLeader: func(id string) { c.cfg.Log.Info("leader", "identity", id) },
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	if lost {
		return fmt.Errorf("lost the Lease %s/%s", c.cfg.LeaseNamespace, c.cfg.LeaseName)
	}
	return nil
}

func (c *Controller) setLeading(on bool) {
	c.mu.Lock()
	c.leading = on
	c.mu.Unlock()
	c.cfg.Metrics.setLeader(on)
}

// lead makes passes while this replica holds the Lease. What it saw of
// nodes gone starts afresh: a new leader's quarantine is measured from
// its own first look, which only delays a lift.
func (c *Controller) lead(ctx context.Context) {
	c.missing = map[string]time.Time{}
	c.guard = guardState{}
	c.setLeading(true)
	c.cfg.Log.Info("leading", "identity", c.cfg.Identity)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		recheck := c.pass(ctx)
		wait := c.cfg.Interval
		if !recheck.IsZero() {
			wait = min(wait, max(time.Until(recheck), 0)+100*time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// pass is one look at every holder being deleted, and the lifts it calls
// for. It returns when a decision may change without an object changing.
func (c *Controller) pass(ctx context.Context) (recheck time.Time) {
	now := time.Now()
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return now.Add(c.cfg.Interval) // a lister of an informer's cache does not fail
	}
	seen := map[string]bool{}
	agents := readyAgents(pods)
	var waiting []waitingHolder
	var carrying []string     // namespace/name of every pod with the finalizer
	live := map[string]Node{} // nodes read from the API server in this pass
	for _, obj := range pods {
		p := Pod{Namespace: obj.Namespace, Name: obj.Name, UID: string(obj.UID), Node: obj.Spec.NodeName,
			Finalizer: slices.Contains(obj.Finalizers, agent.Finalizer), Deleting: obj.DeletionTimestamp != nil}
		if p.Finalizer {
			carrying = append(carrying, p.Namespace+"/"+p.Name)
		}
		if !p.Finalizer || !p.Deleting || p.Node == "" {
			continue
		}
		n := c.cachedNode(p.Node, now)
		n.AgentReady = agents[p.Node]
		seen[p.Node] = true
		d := Decide(p, n, now, c.cfg.Quarantine)
		if d.Lift {
			// The cache may be late: the node is read from the API server
			// and the decision taken again on what it says.
			ln, ok := live[p.Node]
			if !ok {
				ln = c.liveNode(ctx, p.Node, n.MissingSince)
				live[p.Node] = ln
			}
			d = Decide(p, ln, now, c.cfg.Quarantine)
		}
		if d.Lift {
			if err := c.lift(ctx, p, d); err != nil {
				c.cfg.Log.Warn("lift the finalizer", "pod", p.Namespace+"/"+p.Name, "uid", p.UID, "node", p.Node, "error", err)
				waiting = append(waiting, waitingHolder{node: p.Node, reason: WaitLiftFailed, since: obj.DeletionTimestamp.Time})
			}
			continue
		}
		if !d.RecheckAt.IsZero() && (recheck.IsZero() || d.RecheckAt.Before(recheck)) {
			recheck = d.RecheckAt
		}
		waiting = append(waiting, waitingHolder{node: p.Node, reason: d.Waiting, since: obj.DeletionTimestamp.Time})
	}
	for node := range c.missing {
		if !seen[node] {
			delete(c.missing, node) // no holder of it waits any more
		}
	}
	c.keepGuard(ctx, carrying, now)
	c.cfg.Metrics.passDone(waiting)
	c.mu.Lock()
	c.lastPass = time.Now()
	c.mu.Unlock()
	return recheck
}

// cachedNode is the node as the cache has it, and keeps when it was first
// seen missing.
func (c *Controller) cachedNode(name string, now time.Time) Node {
	obj, err := c.nodes.Get(name)
	switch {
	case apierrors.IsNotFound(err):
		since, ok := c.missing[name]
		if !ok {
			since = now
			c.missing[name] = since
			c.cfg.Log.Info("node missing: its holders wait for the quarantine", "node", name, "quarantine", c.cfg.Quarantine.String())
		}
		return Node{MissingSince: since}
	case err != nil:
		return Node{Err: err}
	}
	delete(c.missing, name)
	return NodeOf(obj)
}

// liveNode reads the node from the API server. Only NotFound says it is
// gone; any other error is a read error, which decides nothing.
func (c *Controller) liveNode(ctx context.Context, name string, missingSince time.Time) Node {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	obj, err := c.cfg.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return Node{MissingSince: missingSince}
	case err != nil:
		c.cfg.Metrics.apiError("get_node")
		c.cfg.Log.Warn("read the node: nothing is lifted", "node", name, "error", err)
		return Node{Err: fmt.Errorf("read node %s: %w", name, err)}
	}
	delete(c.missing, name)
	return NodeOf(obj)
}

// lift removes netns-pin.io/pin from the pod as the API server has it now,
// with a JSON patch that first tests the pod's UID, its resourceVersion
// and the finalizer at that index: it removes exactly that entry of that
// version of that pod, or nothing (a pod changed in between is looked at
// again at the next pass).
func (c *Controller) lift(ctx context.Context, p Pod, d Decision) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	pods := c.cfg.Client.CoreV1().Pods(p.Namespace)
	obj, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil // gone already
	case err != nil:
		c.cfg.Metrics.apiError("get_pod")
		return fmt.Errorf("read pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	i := slices.Index(obj.Finalizers, agent.Finalizer)
	if string(obj.UID) != p.UID || obj.DeletionTimestamp == nil || obj.Spec.NodeName != p.Node || i < 0 {
		return nil // another pod of that name, or nothing left to lift
	}
	path := fmt.Sprintf("/metadata/finalizers/%d", i)
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": p.UID},
		{"op": "test", "path": "/metadata/resourceVersion", "value": obj.ResourceVersion},
		{"op": "test", "path": path, "value": agent.Finalizer},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	if _, err := pods.Patch(ctx, p.Name, types.JSONPatchType, body, metav1.PatchOptions{FieldManager: "netns-pin-controller"}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		c.cfg.Metrics.apiError("lift")
		return fmt.Errorf("lift %s of pod %s/%s: %w", agent.Finalizer, p.Namespace, p.Name, err)
	}
	c.cfg.Metrics.lifted.WithLabelValues(d.Reason).Inc()
	c.cfg.Log.Info("finalizer lifted", "pod", p.Namespace+"/"+p.Name, "uid", p.UID, "node", p.Node, "reason", d.Reason, "identity", c.cfg.Identity)
	c.cfg.Recorder.Event(obj, corev1.EventTypeNormal, d.Reason, d.Message)
	return nil
}

// Healthy: the leader made a pass lately (its loop is not stuck); a
// replica that waits for the Lease is healthy.
func (c *Controller) Healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leading {
		return nil
	}
	return kubeproc.Stuck(c.lastPass, c.cfg.Interval)
}

// Ready: the informers synced (and, for the leader, a first pass finished).
func (c *Controller) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !c.ready:
		return errors.New("the pod and node informers have not synced yet")
	case c.leading && c.lastPass.IsZero():
		return errors.New("leading: the first pass has not finished")
	}
	return nil
}
