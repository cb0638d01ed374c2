package controller

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/netns-pin/netns-pin/agent"
)

func checkPod(ns, name, node string, finalizers ...string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers},
		Spec: corev1.PodSpec{NodeName: node}}
}

// pagedPods makes the fake clientset answer a list of pods as the API
// server does with a limit: pods[i:i+limit], and a continue token while
// more remain. It records the options of each request.
func pagedPods(client *fake.Clientset, pods []*corev1.Pod, seen *[]metav1.ListOptions) {
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).GetListOptions()
		*seen = append(*seen, opts)
		from := 0
		if opts.Continue != "" {
			var err error
			if from, err = strconv.Atoi(opts.Continue); err != nil {
				return true, nil, err
			}
		}
		to := len(pods)
		if opts.Limit > 0 {
			to = min(to, from+int(opts.Limit))
		}
		list := &corev1.PodList{}
		for _, p := range pods[from:to] {
			list.Items = append(list.Items, *p)
		}
		if to < len(pods) {
			list.Continue = strconv.Itoa(to)
		}
		return true, list, nil
	})
}

// No pod carries the finalizer (others may carry other finalizers): the
// uninstall may go on.
func TestUninstallCheckNoneCarrying(t *testing.T) {
	client := fake.NewClientset(checkPod("a", "web", "n1"), checkPod("b", "db", "n2", "example.com/keep"))
	pods, err := PodsCarryingFinalizer(context.Background(), client, UninstallPageSize)
	require.NoError(t, err)
	assert.Nil(t, pods)

	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, UninstallCheck(context.Background(), client, &stdout, &stderr))
	assert.Equal(t, "netns-pin: no pod carries the netns-pin.io/pin finalizer: uninstall may go on\n", stdout.String())
	assert.Empty(t, stderr.String())
}

// Pods that carry the finalizer in several namespaces, over several
// pages: every one is found, sorted, with its node; the check refuses
// and says what to do.
func TestUninstallCheckRefusesNamingThePods(t *testing.T) {
	all := []*corev1.Pod{
		checkPod("rook-ceph", "csi-holder-b-2", "n2", agent.Finalizer),
		checkPod("default", "web", "n1"),
		checkPod("ceph-csi", "csi-rbdplugin-x", "n1", "example.com/keep", agent.Finalizer),
		checkPod("rook-ceph", "csi-holder-a-1", "n1", agent.Finalizer),
		checkPod("default", "db", "n2", "example.com/keep"),
		checkPod("rook-ceph", "csi-holder-a-0", "", agent.Finalizer),
	}
	client := fake.NewClientset()
	var seen []metav1.ListOptions
	pagedPods(client, all, &seen)

	pods, err := PodsCarryingFinalizer(context.Background(), client, 2)
	require.NoError(t, err)
	assert.Equal(t, []CarryingPod{
		{"ceph-csi", "csi-rbdplugin-x", "n1"},
		{"rook-ceph", "csi-holder-a-0", ""},
		{"rook-ceph", "csi-holder-a-1", "n1"},
		{"rook-ceph", "csi-holder-b-2", "n2"},
	}, pods)
	require.Len(t, seen, 3, "three pages of two")
	assert.Equal(t, []string{"", "2", "4"}, []string{seen[0].Continue, seen[1].Continue, seen[2].Continue})
	for _, o := range seen {
		assert.Equal(t, int64(2), o.Limit)
	}

	seen = nil
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 1, UninstallCheck(context.Background(), client, &stdout, &stderr))
	assert.Equal(t, "netns-pin: refusing the uninstall: 4 pods carry the netns-pin.io/pin finalizer, which only the node agent and the controller lift:\n"+
		"  ceph-csi/csi-rbdplugin-x on node n1\n"+
		"  rook-ceph/csi-holder-a-0 not scheduled on a node\n"+
		"  rook-ceph/csi-holder-a-1 on node n1\n"+
		"  rook-ceph/csi-holder-b-2 on node n2\n"+
		"netns-pin: take the finalizer out of the holder templates (or delete the holder DaemonSets), let the holders go "+
		"and wait until no pod carries it (docs/operating.md, \"Removing netns-pin\"), then uninstall again\n", stdout.String())
	assert.Empty(t, stderr.String())
	require.Len(t, seen, 1, "one page of UninstallPageSize")
	assert.Equal(t, int64(UninstallPageSize), seen[0].Limit)
}

// A list that fails refuses: the pods it did not count may carry the
// finalizer.
func TestUninstallCheckRefusesOnAPIError(t *testing.T) {
	client := fake.NewClientset(checkPod("a", "web", "n1"))
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	pods, err := PodsCarryingFinalizer(context.Background(), client, UninstallPageSize)
	require.ErrorContains(t, err, "list the pods of every namespace (page 1): connection refused")
	assert.Nil(t, pods)

	var stdout, stderr bytes.Buffer
	assert.Equal(t, 1, UninstallCheck(context.Background(), client, &stdout, &stderr))
	assert.Empty(t, stdout.String())
	assert.Equal(t, "netns-pin: list the pods of every namespace (page 1): connection refused\n"+
		"netns-pin: refusing the uninstall: the pods that carry the netns-pin.io/pin finalizer could not be counted\n", stderr.String())
}
