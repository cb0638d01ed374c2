package runtime

// kubeAPIStandIn is a STAND-IN FOR KUBE-APISERVER, not a Kubernetes API
// server: an HTTP server on 127.0.0.1 that answers exactly the requests
// Multus' thin plugin (v4.2.3, pkg/k8sclient) makes while it handles a pod
// sandbox, from objects the test puts in:
//
//	GET  /api/v1/namespaces/{ns}/pods/{name}                      GetPod (ADD, DEL)
//	PUT  /api/v1/namespaces/{ns}/pods/{name}/status               network-status annotation
//	GET  /apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{name}
//	POST /api/v1/namespaces/{ns}/events                           Multus' event recorder
//
// Multus' client asks for protobuf and accepts JSON; the stand-in answers
// JSON and does not decode request bodies (the status update's protobuf pod
// is acknowledged with the stored pod). Every request is recorded so tests
// can check that Multus read the pod and the NetworkAttachmentDefinition;
// any other path is answered 404 and reported by unexpected().

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
)

type kubeAPIStandIn struct {
	srv *httptest.Server

	mu         sync.Mutex
	pods       map[string]map[string]any // "ns/name" -> Pod object
	nads       map[string]map[string]any // "ns/name" -> NetworkAttachmentDefinition
	requests   []string                  // "METHOD path"
	unexpected []string
}

func startKubeAPIStandIn() (*kubeAPIStandIn, error) {
	k := &kubeAPIStandIn{pods: map[string]map[string]any{}, nads: map[string]map[string]any{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/namespaces/{ns}/pods/{name}", func(w http.ResponseWriter, r *http.Request) {
		k.serveObject(w, r, k.pods, "pods")
	})
	mux.HandleFunc("PUT /api/v1/namespaces/{ns}/pods/{name}/status", func(w http.ResponseWriter, r *http.Request) {
		k.serveObject(w, r, k.pods, "pods")
	})
	mux.HandleFunc("GET /apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{name}", func(w http.ResponseWriter, r *http.Request) {
		k.serveObject(w, r, k.nads, "network-attachment-definitions")
	})
	mux.HandleFunc("POST /api/v1/namespaces/{ns}/events", func(w http.ResponseWriter, r *http.Request) {
		k.record(r, false)
		writeJSONResponse(w, http.StatusCreated, map[string]any{
			"kind": "Event", "apiVersion": "v1",
			"metadata": map[string]any{"name": "stand-in", "namespace": r.PathValue("ns")},
		})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		k.record(r, true)
		writeJSONResponse(w, http.StatusNotFound, status(http.StatusNotFound, "NotFound", "the kube API stand-in does not serve "+r.URL.Path))
	})
	k.srv = httptest.NewServer(mux) // listens on 127.0.0.1
	return k, nil
}

func (k *kubeAPIStandIn) URL() string { return k.srv.URL }
func (k *kubeAPIStandIn) Close()      { k.srv.Close() }

func (k *kubeAPIStandIn) record(r *http.Request, unexpected bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	line := r.Method + " " + r.URL.Path
	k.requests = append(k.requests, line)
	if unexpected {
		k.unexpected = append(k.unexpected, line)
	}
}

func (k *kubeAPIStandIn) serveObject(w http.ResponseWriter, r *http.Request, store map[string]map[string]any, resource string) {
	k.record(r, false)
	ns, name := r.PathValue("ns"), r.PathValue("name")
	k.mu.Lock()
	obj, ok := store[ns+"/"+name]
	var body []byte
	if ok {
		body, _ = json.Marshal(obj)
	}
	k.mu.Unlock()
	if !ok {
		st := status(http.StatusNotFound, "NotFound", fmt.Sprintf("%s %q not found", resource, name))
		st["details"] = map[string]any{"name": name, "kind": resource}
		writeJSONResponse(w, http.StatusNotFound, st)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func status(code int, reason, msg string) map[string]any {
	return map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reason, "code": code,
	}
}

func writeJSONResponse(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// putPod stores a Pod as kubelet's API server would have it before the
// runtime starts its sandbox.
func (k *kubeAPIStandIn) putPod(ns, name, uid string, annotations map[string]string) {
	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name": name, "namespace": ns, "uid": uid, "resourceVersion": "1",
			"annotations": annotations,
		},
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "holder", "image": "localhost/netns-pin/pause:test"}},
		},
		"status": map[string]any{"phase": "Pending"},
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods[ns+"/"+name] = pod
}

func (k *kubeAPIStandIn) deletePod(ns, name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.pods, ns+"/"+name)
}

// putNAD stores a NetworkAttachmentDefinition whose spec.config is conflist.
func (k *kubeAPIStandIn) putNAD(ns, name string, conflist []byte) {
	nad := map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]any{"name": name, "namespace": ns, "uid": newUID(), "resourceVersion": "1"},
		"spec":       map[string]any{"config": string(conflist)},
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nads[ns+"/"+name] = nad
}

// nadJSON returns the stored NetworkAttachmentDefinition as JSON, the form
// conf.PluginEntry and `netns-pin --conf` read.
func (k *kubeAPIStandIn) nadJSON(ns, name string) []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, _ := json.Marshal(k.nads[ns+"/"+name])
	return b
}

// requestCount counts the recorded requests equal to line.
func (k *kubeAPIStandIn) requestCount(line string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, r := range k.requests {
		if r == line {
			n++
		}
	}
	return n
}

func (k *kubeAPIStandIn) unexpectedRequests() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.unexpected...)
}
