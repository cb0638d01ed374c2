package conf

import (
	"strings"
	"testing"
)

// Fuzz targets for everything a pod or a configuration author controls.
// They assert the parsers never panic and that what they accept keeps the
// promises the rest of the plugin relies on.

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"netns-pin"}`))
	f.Add([]byte(`{"pinDir":"/a","stateDir":"/b","links":["{{.Namespace}}/{{.Name}}.net","/x/{{.Namespace}}.net.ns"],` +
		`"holders":[{"podNamespace":"rook-ceph","podName":"csi-*","cluster":"{{.PodNamespace}}/c"}],"cniArgsNamespaces":["s"],` +
		`"inUse":{"cephPorts":"3300,6789,6800-7300","unattributed":"ignore"},"args":{"cni":{"pinCluster":"a/b"}}}`))
	f.Add([]byte(`{"links":["{{printf \"%s\" .Name}}"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		for _, p := range []string{c.PinDir, c.StateDir} {
			if !strings.HasPrefix(p, "/") {
				t.Fatalf("accepted a relative directory %q", p)
			}
		}
		links, err := c.LinkPaths(Cluster{"ns", "name"})
		if err != nil {
			return
		}
		for _, l := range links {
			if strings.HasPrefix(l, c.PinDir+"/pins/") || !strings.HasPrefix(l, "/") {
				t.Fatalf("accepted link %q (pinDir %q)", l, c.PinDir)
			}
		}
		_, _, _ = c.Holder(Pod{Namespace: "rook-ceph", Name: "csi-holder-1"})
	})
}

// PodFromArgs is the CNI library's types.LoadArgs (IgnoreUnknown set); the
// fuzz target holds what it accepts to what the arguments say: every field
// it fills is one pair of CNI_ARGS, spelt as the runtimes spell the key.
func FuzzPodFromArgsMatchesLoadArgs(f *testing.F) {
	for _, s := range []string{
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=rook-ceph;K8S_POD_NAME=csi-holder-1;K8S_POD_UID=0-1",
		"K8S_POD_NAME=a=b;;", "", "K8S_POD_NAME=", "IgnoreUnknown=0;X=1", "IgnoreUnknown=TRUE;X=1", "IgnoreUnknown=yes",
		"X=1;IgnoreUnknown=false", "CommonArgs=1", "k8s_pod_name=x", "K8S_POD_NAME=a;K8S_POD_NAME=b", ";", "=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		got, err := PodFromArgs(args)
		if err != nil {
			return
		}
		pairs := ";" + args + ";"
		for key, v := range map[string]string{"K8S_POD_NAMESPACE": got.Namespace, "K8S_POD_NAME": got.Name, "K8S_POD_UID": got.UID} {
			if v != "" && !strings.Contains(pairs, ";"+key+"="+v+";") {
				t.Fatalf("CNI_ARGS %q: %s %q is no pair of it", args, key, v)
			}
		}
	})
}

func FuzzParseCluster(f *testing.F) {
	for _, s := range []string{"rook-ceph/my-cluster", "a/b.c", "../x", "a/b/c", "A/b", "a/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCluster(s)
		if err != nil {
			return
		}
		// An accepted cluster is safe as path components.
		for _, part := range []string{c.Namespace, c.Name} {
			if part == "" || part == "." || part == ".." || strings.ContainsAny(part, "/\x00") || strings.Contains(part, "..") {
				t.Fatalf("accepted unsafe cluster %q", s)
			}
		}
	})
}

func FuzzPluginEntry(f *testing.F) {
	f.Add([]byte(`{"name":"n","plugins":[{"type":"macvlan"},{"type":"netns-pin"}]}`))
	f.Add([]byte(`{"spec":{"config":"{\"plugins\":[{\"type\":\"netns-pin\"}]}"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = PluginEntry(data)
	})
}
