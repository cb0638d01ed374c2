package conf

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Pod is the Kubernetes identity a runtime passes in CNI_ARGS.
type Pod struct {
	Namespace string
	Name      string
	UID       string
}

func (p Pod) String() string {
	if p.Namespace == "" && p.Name == "" {
		return "(no K8S_POD_NAMESPACE/K8S_POD_NAME in CNI_ARGS)"
	}
	return p.Namespace + "/" + p.Name
}

// PodFromArgs reads the pod identity from CNI_ARGS ("K=V;K=V"), the keys
// that kubelet's runtimes (containerd, CRI-O) and Multus set for a pod
// sandbox, with the CNI library's types.LoadArgs and IgnoreUnknown set.
// Missing keys give empty fields: a pod without identity is simply no
// holder.
func PodFromArgs(cniArgs string) (Pod, error) {
	a := struct {
		types.CommonArgs
		K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
		K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
		K8S_POD_UID       types.UnmarshallableString //nolint:revive // CNI_ARGS key
	}{}
	a.IgnoreUnknown = true
	if err := types.LoadArgs(cniArgs, &a); err != nil {
		return Pod{}, fmt.Errorf("parse CNI_ARGS: %w", err)
	}
	return Pod{Namespace: string(a.K8S_POD_NAMESPACE), Name: string(a.K8S_POD_NAME), UID: string(a.K8S_POD_UID)}, nil
}

// Cluster names a Ceph cluster by its Kubernetes namespace and name
// (the CephCluster resource, or the ceph-csi clusterID's owner).
type Cluster struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (c Cluster) String() string { return c.Namespace + "/" + c.Name }

// ParseCluster parses "namespace/name"; both parts must be valid
// Kubernetes names, because they become path components of the links.
func ParseCluster(s string) (Cluster, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return Cluster{}, fmt.Errorf("cluster %q: want namespace/name", s)
	}
	if err := validateLabel(ns); err != nil {
		return Cluster{}, fmt.Errorf("cluster %q: namespace: %w", s, err)
	}
	if err := validateSubdomain(name); err != nil {
		return Cluster{}, fmt.Errorf("cluster %q: name: %w", s, err)
	}
	return Cluster{Namespace: ns, Name: name}, nil
}

// validateLabel checks a DNS-1123 label, the rule for namespace names.
func validateLabel(s string) error {
	return validateDNSName(s, 63, isDNSLabel, "a DNS-1123 label: lower case letters, digits and '-', starting and ending with a letter or digit")
}

// validateSubdomain checks a DNS-1123 subdomain, the rule for object names.
func validateSubdomain(s string) error {
	isSubdomain := func(s string) bool {
		for part := range strings.SplitSeq(s, ".") {
			if !isDNSLabel(part) {
				return false
			}
		}
		return true
	}
	return validateDNSName(s, 253, isSubdomain, "a DNS-1123 subdomain: lower case letters, digits, '-' and '.', each part starting and ending with a letter or digit")
}

func validateDNSName(s string, maxLen int, valid func(string) bool, rule string) error {
	if len(s) == 0 || len(s) > maxLen {
		return fmt.Errorf("must be 1 to %d characters, got %d", maxLen, len(s))
	}
	if !valid(s) {
		return errors.New("must be " + rule)
	}
	return nil
}

// isDNSLabel matches [a-z0-9]([-a-z0-9]*[a-z0-9])? (Kubernetes'
// IsDNS1123Label without the length), written out rather than as a regular
// expression, whose compilation every plugin run would pay.
func isDNSLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// HolderRule makes pods of PodNamespace whose name matches the PodName
// glob holders of Cluster. Cluster may use {{.PodNamespace}} and
// {{.PodName}}.
type HolderRule struct {
	PodNamespace string `json:"podNamespace"`
	PodName      string `json:"podName"`
	Cluster      string `json:"cluster"`
}

type compiledRule struct {
	HolderRule
	cluster fieldTemplate
	// nsTemplated: the namespace part of cluster (before its first
	// literal '/') has a placeholder, so it must render to the pod's own
	// namespace.
	nsTemplated bool
}

// sampleName stands for a pod's name when a rule is checked as the
// configuration is read: a template renders to a valid cluster for one
// DNS-1123 name exactly when it does for "a" (every pod name starts and
// ends with a letter or digit), so no valid template is refused for want
// of a real name, and the real name is checked again at ADD.
const sampleName = "a"

func compileRule(r HolderRule) (compiledRule, error) {
	if err := validateLabel(r.PodNamespace); err != nil {
		return compiledRule{}, fmt.Errorf("podNamespace %q: %w", r.PodNamespace, err)
	}
	if r.PodName == "" {
		return compiledRule{}, errors.New(`podName "": want a name or glob such as "csi-holder-*"`)
	}
	if _, err := path.Match(r.PodName, ""); err != nil {
		return compiledRule{}, fmt.Errorf("podName %q: %w", r.PodName, err)
	}
	t, err := parseFieldTemplate(r.Cluster, "PodNamespace", "PodName")
	if err != nil {
		return compiledRule{}, fmt.Errorf("cluster %q: %w", r.Cluster, err)
	}
	cr := compiledRule{HolderRule: r, cluster: t}
	// The namespace part is what the own-namespace rule is about: literal
	// text names a namespace the operator chose (any, §4), a placeholder
	// there may only be {{.PodNamespace}}, rendering to the pod's own. A
	// pod's name never chooses a namespace: with podName "*" anyone who
	// can create a pod in podNamespace chooses it.
	nsFields, slash := t.fieldsBefore("/")
	if !slash {
		return compiledRule{}, fmt.Errorf("cluster %q: want namespace/name with a literal '/' between them", r.Cluster)
	}
	for _, f := range nsFields {
		if f != "PodNamespace" {
			return compiledRule{}, fmt.Errorf("cluster %q: {{.%s}} in the namespace part: a pod's name may not choose the cluster's namespace; write the namespace, or {{.PodNamespace}}", r.Cluster, f)
		}
		cr.nsTemplated = true
	}
	cl, err := cr.render(Pod{Namespace: r.PodNamespace, Name: sampleName})
	if err != nil {
		return compiledRule{}, fmt.Errorf("cluster %q: %w", r.Cluster, err)
	}
	if cr.nsTemplated && cl.Namespace != r.PodNamespace {
		return compiledRule{}, fmt.Errorf("cluster %q: its namespace part renders to %q, not the pod's own namespace %q; write another namespace literally",
			r.Cluster, cl.Namespace, r.PodNamespace)
	}
	return cr, nil
}

func (r compiledRule) render(p Pod) (Cluster, error) {
	return ParseCluster(r.cluster.expand(func(f string) string {
		if f == "PodNamespace" {
			return p.Namespace
		}
		return p.Name
	}))
}

// clusterFor renders the rule for pod p, which it matches, and holds the
// result to the own-namespace rule when the namespace part is templated.
func (r compiledRule) clusterFor(p Pod) (Cluster, error) {
	cl, err := r.render(p)
	if err != nil {
		return Cluster{}, err
	}
	if r.nsTemplated && cl.Namespace != p.Namespace {
		return Cluster{}, fmt.Errorf("cluster %q renders to %s: %w: a templated namespace must be the pod's own %q",
			r.Cluster, cl, ErrClaimRefused, p.Namespace)
	}
	return cl, nil
}

func (r compiledRule) matches(p Pod) bool {
	if p.Namespace != r.PodNamespace {
		return false
	}
	ok, _ := path.Match(r.PodName, p.Name) // pattern validated in compileRule
	return ok
}

// ErrClaimRefused is returned when a pod claims holdership through
// args.cni.pinCluster from a namespace that may not.
var ErrClaimRefused = errors.New("claim refused")

// Holder decides whether pod is a holder and of which cluster. A pod
// matched by no rule and making no claim is not a holder (ok false).
// A claim through args.cni.pinCluster is honoured only for pods of a
// namespace listed in cniArgsNamespaces, since any pod can set cni-args,
// and only for a cluster of the pod's own namespace.
func (c *Config) Holder(p Pod) (cl Cluster, ok bool, err error) {
	var claim string
	if c.Args != nil {
		claim = c.Args.CNI.PinCluster
	}
	for _, r := range c.rules {
		if !r.matches(p) {
			continue
		}
		cl, err := r.clusterFor(p)
		if err != nil {
			return Cluster{}, false, fmt.Errorf("holder rule for pod %s: %w", p, err)
		}
		if claim != "" && claim != cl.String() {
			return Cluster{}, false, fmt.Errorf("pod %s: args.cni.pinCluster %q conflicts with holder rule cluster %q", p, claim, cl)
		}
		return cl, true, nil
	}
	if claim == "" {
		return Cluster{}, false, nil
	}
	if p.Namespace == "" || !slices.Contains(c.CNIArgsNamespaces, p.Namespace) {
		return Cluster{}, false, fmt.Errorf("pod %s: args.cni.pinCluster %q: %w: namespace %q is not in cniArgsNamespaces %q",
			p, claim, ErrClaimRefused, p.Namespace, c.CNIArgsNamespaces)
	}
	cl, err = ParseCluster(claim)
	if err != nil {
		return Cluster{}, false, fmt.Errorf("pod %s: args.cni.pinCluster: %w", p, err)
	}
	if cl.Namespace != p.Namespace {
		// Otherwise a tenant could make its own netns the newest pin of
		// another namespace's cluster, and that cluster's new volumes
		// would be mapped inside it.
		return Cluster{}, false, fmt.Errorf("pod %s: args.cni.pinCluster %q: %w: a pod may claim only a cluster of its own namespace %q",
			p, claim, ErrClaimRefused, p.Namespace)
	}
	return cl, true, nil
}
