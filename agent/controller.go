package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/netns-pin/netns-pin/internal/kubeproc"
	"github.com/netns-pin/netns-pin/netnsstore"
	"github.com/netns-pin/netns-pin/nodecheck"
)

// Config is what the agent runs with.
type Config struct {
	NodeName string
	// HostRoot is where the host's / is mounted (read only): every
	// registered store is read through it. "/" reads the agent's own.
	HostRoot  string
	StatusDir string // where status.json goes, for `netns-pinctl check`; "" none
	Interval  time.Duration
	Client    kubernetes.Interface
	Recorder  record.EventRecorder
	Metrics   *Metrics
	Log       *slog.Logger
	Version   string
}

// Agent is one node's agent.
type Agent struct {
	cfg    Config
	lister listersv1.PodLister
	synced cache.InformerSynced
	kick   chan struct{}

	mu         sync.Mutex
	lastPass   time.Time
	storeErr   error
	apiErr     error
	apiChecked time.Time
	refused    map[string]string // "verb resource" -> the API's message, while refused

	eventsRead map[string]int64 // stateDir -> offset of its events file
	status     nodecheck.AgentStatus
	tracker    Tracker
}

// ReasonAgentRefused is the Event the agent posts when the API refuses
// it something it needs (RBAC or admission): on the pod it could not
// patch, or on its Node when it cannot read pods at all.
const ReasonAgentRefused = "NetnsPinAgentRefused"

// New sets up the pod informer: the pods of this node in every namespace
// (fieldSelector spec.nodeName), since a holder may run in any namespace
// that a network's holders rules or cniArgsNamespaces admit. The agent
// reads nothing else of the cluster.
func New(cfg Config) *Agent {
	cfg.HostRoot = cmp.Or(cfg.HostRoot, "/")
	a := &Agent{cfg: cfg, kick: make(chan struct{}, 1), refused: map[string]string{}, eventsRead: map[string]int64{}}
	a.status = nodecheck.AgentStatus{Node: cfg.NodeName, PID: os.Getpid(), Version: cfg.Version, Started: time.Now().UTC(), Interval: cfg.Interval}
	if cfg.Client == nil {
		a.synced = func() bool { return true }
		return a // store only: metrics, no API (docs/operating.md, "Metrics")
	}
	sel := fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sel }))
	inf := f.Core().V1().Pods()
	_ = inf.Informer().SetWatchErrorHandler(func(r *cache.Reflector, err error) {
		verb := "list"
		if strings.Contains(err.Error(), "cannot watch") || !strings.Contains(err.Error(), "list") {
			verb = "watch"
		}
		a.apiError("watch", verb, "pods", nil, err)
		a.setAPIErr(fmt.Errorf("%s pods of node %s: %w", verb, cfg.NodeName, err))
		cache.DefaultWatchErrorHandler(context.Background(), r, err)
	})
	_, _ = inf.Informer().AddEventHandler(kubeproc.Kicker(a.kick))
	a.lister, a.synced = inf.Lister(), inf.Informer().HasSynced
	go inf.Informer().RunWithContext(context.Background())
	return a
}

func (a *Agent) setAPIErr(err error) {
	a.mu.Lock()
	a.apiErr, a.apiChecked = err, time.Now()
	a.mu.Unlock()
}

// apiError accounts for a failed request to the API: counted by
// operation and reason, and, when the API refused it (RBAC or
// admission), kept as a refusal that readiness, the status file and an
// Event name (on obj, else on the agent's Node).
func (a *Agent) apiError(op, verb, resource string, obj runtime.Object, err error) {
	reason := string(apierrors.ReasonForError(err))
	a.cfg.Metrics.apiError(op, reason)
	if !apierrors.IsForbidden(err) {
		return
	}
	key := verb + " " + resource
	a.mu.Lock()
	_, known := a.refused[key]
	a.refused[key] = err.Error()
	a.mu.Unlock()
	if known && obj == nil {
		return // said already: one Event on the Node per refusal
	}
	msg := fmt.Sprintf("netns-pin-agent of node %s may not %s %s: %v", a.cfg.NodeName, verb, resource, err)
	a.cfg.Log.Error("the API refused the agent", "verb", verb, "resource", resource, "error", err)
	if op == "event" || a.cfg.Recorder == nil {
		return // an Event cannot say that Events are refused
	}
	if obj == nil {
		obj = &corev1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName, UID: types.UID(a.cfg.NodeName)}
	}
	a.post(obj, eventWarning, ReasonAgentRefused, msg)
}

// apiOK clears a refusal once the same request went through.
func (a *Agent) apiOK(verb, resource string) {
	a.mu.Lock()
	delete(a.refused, verb+" "+resource)
	a.mu.Unlock()
}

// Run makes a pass at every change of a pod of the node and every
// interval (the store has no notifications: records are polled), until
// ctx ends. Until the informer synced it only says why it waits (status
// file, readiness, metrics).
func (a *Agent) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	defer func() {
		a.status.Stopped = time.Now().UTC()
		a.writeStatus()
	}()
	for !a.synced() {
		a.cfg.Metrics.setReady(false)
		a.mu.Lock()
		a.status.Heartbeat = time.Now().UTC()
		a.status.Refused = a.refusedLocked()
		a.status.APIError = "the pod informer has not synced"
		if a.apiErr != nil {
			a.status.APIError += ": " + a.apiErr.Error()
		}
		a.mu.Unlock()
		a.writeStatus()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	a.apiOK("list", "pods")
	a.apiOK("watch", "pods")
	a.setAPIErr(nil)
	a.cfg.Log.Info("agent started", "node", a.cfg.NodeName, "hostRoot", a.cfg.HostRoot, "registry", a.registryDir(), "interval", a.cfg.Interval.String())
	for {
		a.pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.kick:
		}
	}
}

func (a *Agent) refusedLocked() []string {
	var out []string
	for k, msg := range a.refused {
		out = append(out, k+": "+msg)
	}
	slices.Sort(out)
	return out
}

func (a *Agent) registryDir() string {
	return filepath.Join(a.cfg.HostRoot, netnsstore.RegistryDir())
}

// pass is one look at pods and stores, and what it calls for.
func (a *Agent) pass(ctx context.Context) {
	objs := map[string]runtime.Object{} // pod UID
	var pods []Pod
	if a.lister != nil {
		list, _ := a.lister.List(labels.Everything()) // a lister of an informer's cache does not fail
		for _, p := range list {
			objs[string(p.UID)] = p
			pods = append(pods, Pod{
				Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
				Finalizer: slices.Contains(p.Finalizers, Finalizer), Deleting: p.DeletionTimestamp != nil,
			})
		}
	}
	v, storeErr := a.readStores()
	a.cfg.Metrics.storeSeen(v, storeErr != nil)
	plan := Decide(pods, v)
	if a.cfg.Client == nil {
		plan = Plan{} // no API: nothing to patch or post
	}
	for _, p := range plan.Add {
		if err := a.patch(ctx, p, true); err != nil {
			a.apiError("add", "patch", "pods", objs[p.UID], err)
			a.cfg.Log.Warn("add the finalizer", "pod", p.key(), "uid", p.UID, "error", err)
			continue
		}
		a.apiOK("patch", "pods")
		a.cfg.Metrics.added.Inc()
		a.cfg.Log.Info("finalizer added to a pinned holder", "pod", p.key(), "uid", p.UID)
	}
	var evs []PodEvent
	if a.cfg.Client != nil {
		evs = a.tracker.Observe(pods, v, time.Now())
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
			a.apiError("lift", "patch", "pods", objs[p.UID], err)
			a.cfg.Log.Warn("lift the finalizer", "pod", p.key(), "uid", p.UID, "error", err)
			continue
		}
		a.apiOK("patch", "pods")
		a.cfg.Metrics.lifted.Inc()
		a.cfg.Log.Info("finalizer lifted: no record of any store of the node names the pod", "pod", p.key(), "uid", p.UID)
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
	var fins []nodecheck.AgentStatusPod
	for _, p := range pods {
		if p.Finalizer {
			fins = append(fins, nodecheck.AgentStatusPod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Deleting: p.Deleting})
		}
	}
	a.cfg.Metrics.agentSeen(len(fins), len(plan.Unprotected), plan.Blocked != "")
	a.pingAPI(ctx)
	a.mu.Lock()
	a.lastPass, a.storeErr = time.Now(), storeErr
	apiErr := a.apiErr
	a.status.Refused = a.refusedLocked()
	a.mu.Unlock()
	a.cfg.Metrics.setReady(a.Ready() == nil)
	a.status.Heartbeat, a.status.Finalizers, a.status.Blocked = time.Now().UTC(), fins, plan.Blocked
	a.status.Stores, a.status.UnreadableStores = v.Stores, v.UnreadStores
	a.status.APIError = ""
	if apiErr != nil {
		a.status.APIError = apiErr.Error()
	}
	a.writeStatus()
}

// readStores reads every store of the node's registry (through the host
// root): records, the new lines of each events file and each sweeper's
// status, all without the lock. A registry that cannot be listed (the
// wrong host root: the sweeper makes it on every node) or a registered
// store that cannot be read is in v, and blocks every lift.
func (a *Agent) readStores() (View, error) {
	var v View
	regs, err := netnsstore.Registered(a.registryDir())
	if err != nil {
		v.Err = fmt.Errorf("%w (is the host's / mounted at --host-root %s, and the sweeper installed?)", err, a.cfg.HostRoot)
		return v, v.Err
	}
	v.Stores = len(regs)
	var errs []error
	for _, reg := range regs {
		if reg.Err != nil {
			v.UnreadStores = append(v.UnreadStores, reg.Err.Error())
			errs = append(errs, reg.Err)
			continue
		}
		if err := a.readStore(&v, reg.Registration); err != nil {
			v.UnreadStores = append(v.UnreadStores, fmt.Sprintf("store %s: %v", reg.StateDir, err))
			errs = append(errs, err)
		}
	}
	slices.SortStableFunc(v.Pins, func(x, y Pin) int { return x.Updated.Compare(y.Updated) })
	return v, errors.Join(errs...)
}

// readStore adds one registered store's records to v and takes in its
// events and sweeper status. A pin is a mount on a file of pinDir's pins
// folder, and a file cannot be removed while mounted on: a stateDir that
// is gone while that folder has no file (or is gone too, as when pinDir
// was made before the store's first use, by a hostPath volume) holds no
// pin; a stateDir gone while a file is there may leave a pin without its
// record, and is an error.
func (a *Agent) readStore(v *View, reg netnsstore.Registration) error {
	stateDir := filepath.Join(a.cfg.HostRoot, reg.StateDir)
	if _, err := os.Lstat(stateDir); errors.Is(err, os.ErrNotExist) {
		pins := filepath.Join(a.cfg.HostRoot, reg.PinDir, netnsstore.PinsSubdir)
		names, perr := os.ReadDir(pins)
		switch {
		case errors.Is(perr, os.ErrNotExist) || perr == nil && len(names) == 0:
			return nil
		case perr != nil:
			return fmt.Errorf("its stateDir is gone, and the pins of its pinDir %s cannot be looked at: %w", reg.PinDir, perr)
		}
		return fmt.Errorf("its stateDir is gone while its pinDir %s has pins (%s): a pin may have lost its record", reg.PinDir, names[0].Name())
	} else if err != nil {
		return fmt.Errorf("look at its stateDir: %w", err)
	}
	recs, bad, err := netnsstore.ReadRecords(stateDir)
	if err != nil {
		return err
	}
	v.Unreadable += len(bad)
	for n, e := range bad {
		a.cfg.Log.Warn("record cannot be read", "stateDir", reg.StateDir, "attachment", n, "error", e)
	}
	for _, r := range recs {
		v.Pins = append(v.Pins, Pin{
			Attachment: r.Attachment, Cluster: r.Cluster, PodNamespace: r.PodNS, PodName: r.PodName, PodUID: r.PodUID,
			Links: r.Links, State: r.State, Abandoned: r.Abandoned, DrainingSince: r.DrainingSince, Updated: r.Updated,
			References: r.References, StateDir: reg.StateDir, PinDir: reg.PinDir,
		})
	}
	events, next, reset, eerr := netnsstore.ReadEvents(stateDir, a.eventsRead[reg.StateDir])
	if eerr == nil {
		a.eventsRead[reg.StateDir] = next
	}
	sweep, serr := netnsstore.ReadSweepStatus(stateDir)
	a.cfg.Metrics.eventsSeen(reg.StateDir, events, reset, sweep)
	if err := errors.Join(eerr, serr); err != nil {
		// Counted and said (readiness), but records were read whole:
		// no pin is unknown.
		a.cfg.Log.Warn("read the events file or the sweeper's status", "stateDir", reg.StateDir, "error", err)
	}
	return nil
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

func (a *Agent) post(obj runtime.Object, typ, reason, msg string) {
	if obj == nil || a.cfg.Recorder == nil {
		return
	}
	a.cfg.Recorder.Event(obj, typ, reason, msg)
	a.cfg.Metrics.events.WithLabelValues(reason).Inc()
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
		a.cfg.Metrics.apiError("ping", string(apierrors.ReasonForError(err)))
		err = fmt.Errorf("reach the API server: %w", err)
	}
	a.setAPIErr(err)
}

// Healthy: a pass finished lately (the loop is not stuck).
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return kubeproc.Stuck(a.lastPass, a.cfg.Interval)
}

// Ready: the informer synced, a pass over every registered store
// finished, the API server answers, nothing the agent needs was refused,
// and every registered store can be read.
func (a *Agent) Ready() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.lastPass.IsZero() && a.apiErr != nil:
		return fmt.Errorf("the pod informer has not synced: %w", a.apiErr)
	case a.lastPass.IsZero():
		return errors.New("the pod informer has not synced yet, or no pass finished")
	case len(a.refused) > 0:
		return fmt.Errorf("the API refuses the agent: %s", strings.Join(a.refusedLocked(), "; "))
	case a.apiErr != nil:
		return a.apiErr
	case a.storeErr != nil:
		return fmt.Errorf("read the stores: %w", a.storeErr)
	}
	return nil
}

func (a *Agent) writeStatus() {
	if a.cfg.StatusDir == "" {
		return
	}
	data, err := json.Marshal(a.status)
	if err == nil {
		tmp := filepath.Join(a.cfg.StatusDir, ".tmp-"+nodecheck.AgentStatusName)
		if err = os.WriteFile(tmp, data, 0o644); err == nil {
			err = os.Rename(tmp, nodecheck.AgentStatusFile(a.cfg.StatusDir))
		}
	}
	if err != nil {
		a.cfg.Log.Warn("write the agent's status file", "error", err)
	}
}
