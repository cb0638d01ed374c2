package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// --uninstall-check takes no argument and a positive --timeout.
func TestUninstallCheckUsage(t *testing.T) {
	assert.Equal(t, 2, run([]string{"--uninstall-check", "now"}))
	assert.Equal(t, 2, run([]string{"--uninstall-check", "--timeout=0s"}))
	assert.Equal(t, 2, run([]string{"--uninstall-check", "--timeout=soon"}))
}

// kubeconfigFor writes a kubeconfig that points at the server.
func kubeconfigFor(t *testing.T, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server)
	require.NoError(t, os.WriteFile(p, []byte(cfg), 0o600))
	return p
}

// The check against an API server: the pods of every namespace, asked
// for a page at a time; one carries the finalizer, named with its node;
// a refused list refuses the uninstall.
func TestUninstallCheckAgainstAnAPIServer(t *testing.T) {
	var query []string
	forbidden := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/pods" {
			http.NotFound(w, r)
			return
		}
		query = append(query, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		if forbidden {
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
				Message: `pods is forbidden: User "system:serviceaccount:kube-system:x" cannot list resource "pods"`})
			return
		}
		_ = json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "rook-ceph", Name: "csi-holder-x", Finalizers: []string{"netns-pin.io/pin"}},
				Spec: corev1.PodSpec{NodeName: "n1"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.PodSpec{NodeName: "n1"}},
		}})
	}))
	defer srv.Close()
	kubeconfig := kubeconfigFor(t, srv.URL)

	var stdout, stderr bytes.Buffer
	assert.Equal(t, 1, runUninstallCheck(nil, kubeconfig, 10*time.Second, &stdout, &stderr))
	assert.Equal(t, []string{"limit=500"}, query)
	assert.Contains(t, stdout.String(), "refusing the uninstall: 1 pods carry the netns-pin.io/pin finalizer")
	assert.Contains(t, stdout.String(), "\n  rook-ceph/csi-holder-x on node n1\n")
	assert.Empty(t, stderr.String())

	forbidden = true
	stdout.Reset()
	assert.Equal(t, 1, runUninstallCheck(nil, kubeconfig, 10*time.Second, &stdout, &stderr))
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "cannot list resource \"pods\"")
	assert.Contains(t, stderr.String(), "refusing the uninstall: the pods that carry the netns-pin.io/pin finalizer could not be counted")
}
