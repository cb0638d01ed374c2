package conf

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"ceph-public","type":"netns-pin"}`))
	require.NoError(t, err)
	assert.Equal(t, DefaultPinDir, c.PinDir)
	assert.Equal(t, DefaultStateDir, c.StateDir)
	assert.Equal(t, []string{DefaultLink}, c.Links)
	assert.Equal(t, InUse{Sysfs: "/sys", Debugfs: "/sys/kernel/debug", Proc: "/proc", CephPorts: DefaultCephPorts, Unattributed: "block"}, c.InUse)
	assert.Equal(t, "info", c.LogLevel)
	assert.Empty(t, c.LogFile)
	links, err := c.LinkPaths(Cluster{"rook-ceph", "my-cluster"})
	require.NoError(t, err)
	assert.Equal(t, []string{DefaultPinDir + "/rook-ceph/my-cluster.net"}, links)
	opts := c.InUseOptions()
	assert.True(t, opts.CephPorts.Contains(6789))
	assert.True(t, opts.CephPorts.Contains(7000))
	assert.False(t, opts.CephPorts.Contains(22))
}

func TestParseAllFields(t *testing.T) {
	c, err := Parse([]byte(`{
		"cniVersion":"1.1.0","name":"ceph-public","type":"netns-pin",
		"pinDir":"/srv/pins/","stateDir":"/srv/state",
		"links":["{{.Namespace}}/{{.Name}}.net","/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/{{.Namespace}}.net.ns"],
		"holders":[{"podNamespace":"rook-ceph","podName":"csi-holder-*","cluster":"{{.PodNamespace}}/my-cluster"}],
		"cniArgsNamespaces":["storage"],
		"inUse":{"sysfs":"/host/sys","debugfs":"/host/debug","proc":"/host/proc","cephPorts":"6789","unattributed":"ignore"},
		"logFile":"/var/log/netns-pin.log","logLevel":"debug"}`))
	require.NoError(t, err)
	assert.Equal(t, "/srv/pins", c.PinDir, "pinDir is cleaned")
	links, err := c.LinkPaths(Cluster{"rook-ceph", "my-cluster"})
	require.NoError(t, err)
	assert.Equal(t, []string{"/srv/pins/rook-ceph/my-cluster.net", "/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/rook-ceph.net.ns"}, links)
	opts := c.InUseOptions()
	assert.Equal(t, "/host/sys", opts.Sysfs)
	assert.Equal(t, "ignore", string(opts.Unattributed))
	assert.False(t, opts.CephPorts.Contains(3300))
	cl, ok, err := c.Holder(Pod{Namespace: "rook-ceph", Name: "csi-holder-x7k2p"})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Cluster{"rook-ceph", "my-cluster"}, cl)
}

func TestParseErrorsNameFieldAndValue(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		want       []string
	}{
		{"invalid json", `{"name":`, []string{"parse configuration"}},
		{"wrong type", `{"pinDir":5}`, []string{"parse configuration", "pinDir"}},
		{"relative pinDir", `{"pinDir":"pins"}`, []string{"pinDir", `"pins"`, "absolute"}},
		{"relative stateDir", `{"stateDir":"x/y"}`, []string{"stateDir", `"x/y"`}},
		{"nested dirs", `{"pinDir":"/a","stateDir":"/a/state"}`, []string{"pinDir", "stateDir", "contain"}},
		{"relative logFile", `{"logFile":"log"}`, []string{"logFile", `"log"`}},
		{"log level", `{"logLevel":"loud"}`, []string{"logLevel", `"loud"`}},
		{"policy", `{"inUse":{"unattributed":"maybe"}}`, []string{"inUse.unattributed", `"maybe"`}},
		{"ports", `{"inUse":{"cephPorts":"6789,x"}}`, []string{"inUse.cephPorts", `"6789,x"`}},
		{"relative sysfs", `{"inUse":{"sysfs":"sys"}}`, []string{"inUse.sysfs"}},
		{"link template", `{"links":["{{.Nope"]}`, []string{"links[0]", `{{.Nope`}},
		{"link unknown field", `{"links":["{{.Cluster}}"]}`, []string{"links[0]", "Cluster"}},
		{"link escapes pinDir", `{"links":["../{{.Name}}"]}`, []string{"links[0]", "outside pinDir"}},
		{"link into pins", `{"links":["pins/{{.Name}}"]}`, []string{"links[0]", "where pins live"}},
		{"link is pinDir", `{"links":["."]}`, []string{"links[0]", "directory"}},
		{"rule namespace", `{"holders":[{"podNamespace":"Rook","podName":"x","cluster":"a/b"}]}`, []string{"holders[0]", "podNamespace", `"Rook"`}},
		{"rule glob", `{"holders":[{"podNamespace":"r","podName":"[","cluster":"a/b"}]}`, []string{"holders[0]", "podName", `"["`}},
		{"rule empty pod", `{"holders":[{"podNamespace":"r","podName":"","cluster":"a/b"}]}`, []string{"holders[0]", "podName"}},
		{"rule cluster", `{"holders":[{"podNamespace":"r","podName":"x","cluster":"a/B"}]}`, []string{"holders[0]", `"a/B"`}},
		{"rule cluster no slash", `{"holders":[{"podNamespace":"r","podName":"x","cluster":"ab"}]}`, []string{"holders[0]", "namespace/name"}},
		{"rule template", `{"holders":[{"podNamespace":"r","podName":"x","cluster":"{{.Pod}}/x"}]}`, []string{"holders[0]", "cluster"}},
		{"allowlist", `{"cniArgsNamespaces":["ok","Not_OK"]}`, []string{"cniArgsNamespaces[1]", `"Not_OK"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.conf))
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseRefusesOversizedConfig(t *testing.T) {
	big := `{"name":"x","pad":"` + strings.Repeat("a", MaxConfigSize) + `"}`
	_, err := Parse([]byte(big))
	require.ErrorContains(t, err, "limit")
}

func TestParseCluster(t *testing.T) {
	for _, ok := range []string{"rook-ceph/my-cluster", "a/b.c", "a/" + strings.Repeat("b", 253), strings.Repeat("a", 63) + "/b"} {
		_, err := ParseCluster(ok)
		assert.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "/", "a/", "/b", "a/b/c", "../x", "a/..", "A/b", "a/B", "a/b\x00", "a b/c",
		"-a/b", "a/b-", "a/.b", "a/b..c", strings.Repeat("a", 64) + "/b", "a/" + strings.Repeat("b", 254), "a_b/c"} {
		_, err := ParseCluster(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestHolderRulesAndClaims(t *testing.T) {
	c, err := Parse([]byte(`{"holders":[
		{"podNamespace":"rook-ceph","podName":"csi-holder-*","cluster":"rook-ceph/my-cluster"},
		{"podNamespace":"tenant-a","podName":"holder","cluster":"{{.PodNamespace}}/ceph"}],
		"cniArgsNamespaces":["storage"]}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		pod     Pod
		claim   string
		want    string
		holder  bool
		errWant string
		refused bool // the error wraps ErrClaimRefused
	}{
		{pod: Pod{Namespace: "rook-ceph", Name: "csi-holder-abc"}, want: "rook-ceph/my-cluster", holder: true},
		{pod: Pod{Namespace: "rook-ceph", Name: "csi-rbdplugin-abc"}},
		{pod: Pod{Namespace: "other", Name: "csi-holder-abc"}},
		{pod: Pod{Namespace: "tenant-a", Name: "holder"}, want: "tenant-a/ceph", holder: true},
		{pod: Pod{}},
		{pod: Pod{Namespace: "storage", Name: "h"}, claim: "storage/c2", want: "storage/c2", holder: true},
		// Hole: an allowed namespace claiming another namespace's cluster
		// would make its own netns that cluster's newest pin.
		{pod: Pod{Namespace: "storage", Name: "h"}, claim: "rook-ceph/c2", errWant: `a pod may claim only a cluster of its own namespace "storage"`, refused: true},
		{pod: Pod{Namespace: "default", Name: "h"}, claim: "rook-ceph/c2", errWant: "not in cniArgsNamespaces", refused: true},
		{pod: Pod{Name: "h"}, claim: "rook-ceph/c2", errWant: "not in cniArgsNamespaces", refused: true},
		{pod: Pod{Namespace: "storage", Name: "h"}, claim: "rook-ceph/../x", errWant: "pinCluster"},
		{pod: Pod{Namespace: "storage", Name: "h"}, claim: "Rook/x", errWant: "DNS-1123"},
		{pod: Pod{Namespace: "rook-ceph", Name: "csi-holder-1"}, claim: "rook-ceph/my-cluster", want: "rook-ceph/my-cluster", holder: true},
		{pod: Pod{Namespace: "rook-ceph", Name: "csi-holder-1"}, claim: "rook-ceph/other", errWant: "conflicts"},
	} {
		c.Args = nil
		if tc.claim != "" {
			c.Args = &Args{}
			c.Args.CNI.PinCluster = tc.claim
		}
		cl, ok, err := c.Holder(tc.pod)
		if tc.errWant != "" {
			assert.ErrorContains(t, err, tc.errWant, "%+v %q", tc.pod, tc.claim)
			if tc.refused {
				assert.ErrorIs(t, err, ErrClaimRefused, "%+v %q", tc.pod, tc.claim)
			}
			assert.False(t, ok)
			continue
		}
		require.NoError(t, err, "%+v %q", tc.pod, tc.claim)
		assert.Equal(t, tc.holder, ok, "%+v %q", tc.pod, tc.claim)
		if tc.holder {
			assert.Equal(t, tc.want, cl.String())
		}
	}
}

func TestClaimFromArgsCNI(t *testing.T) {
	c, err := Parse([]byte(`{"cniArgsNamespaces":["rook-ceph"],"args":{"cni":{"pinCluster":"rook-ceph/my-cluster"}}}`))
	require.NoError(t, err)
	cl, ok, err := c.Holder(Pod{Namespace: "rook-ceph", Name: "anything"})
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "rook-ceph/my-cluster", cl.String())
}

func TestPodFromArgs(t *testing.T) {
	p, err := PodFromArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=rook-ceph;K8S_POD_NAME=csi-holder-1;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=1234-5678")
	require.NoError(t, err)
	assert.Equal(t, Pod{Namespace: "rook-ceph", Name: "csi-holder-1", UID: "1234-5678"}, p)
	p, err = PodFromArgs("")
	require.NoError(t, err)
	assert.Equal(t, Pod{}, p)
	_, err = PodFromArgs("K8S_POD_NAME")
	assert.Error(t, err)
}

func TestLinkComponentTooLong(t *testing.T) {
	c, err := Parse([]byte(`{}`))
	require.NoError(t, err)
	_, err = c.LinkPaths(Cluster{"a", strings.Repeat("b", 253)})
	assert.ErrorContains(t, err, "longer than 255")
}

func TestPluginEntry(t *testing.T) {
	conflist := `{"cniVersion":"1.0.0","name":"ceph-public","plugins":[{"type":"macvlan"},{"type":"netns-pin","pinDir":"/p"}]}`
	got, err := PluginEntry([]byte(conflist))
	require.NoError(t, err)
	c, err := Parse(got)
	require.NoError(t, err)
	assert.Equal(t, "/p", c.PinDir)
	assert.Equal(t, "ceph-public", c.Name)
	assert.Equal(t, "1.0.0", c.CNIVersion)

	nad := `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","spec":{"config":` + jsonString(conflist) + `}}`
	got, err = PluginEntry([]byte(nad))
	require.NoError(t, err)
	assert.Contains(t, string(got), `"pinDir":"/p"`)

	_, err = PluginEntry([]byte(`{"plugins":[{"type":"macvlan"}]}`))
	assert.ErrorContains(t, err, "no plugin")
	_, err = PluginEntry([]byte(`nope`))
	assert.Error(t, err)
}

func jsonString(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

func TestPrevResultAsGiven(t *testing.T) {
	given := `{"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}], "unknownToTheLibrary": 1}`
	for conf, want := range map[string]string{
		`{"cniVersion":"1.0.0","prevResult":` + given + `}`:                            given,
		`{"cniVersion":"1.1.0","prevResult":` + given + `}`:                            "", // another version
		`{"prevResult":` + given + `}`:                                                 "", // no cniVersion
		`{"cniVersion":"1.0.0","prevResult":{"ips":[]}}`:                               "", // none in prevResult
		`{"cniVersion":"1.0.0","prevResult":{"cniVersion":1}}`:                         "",
		`{"cniVersion":"1.0.0","prevResult":` + given + `,"prevResult":` + given + `}`: "", // twice
		`{"cniVersion":"1.0.0","prevresult":` + given + `}`:                            "", // the library's spelling rules
		`{"cniVersion":"1.0.0"}`:                                                       "",
	} {
		c, err := Parse([]byte(conf))
		require.NoError(t, err, conf)
		assert.Equal(t, want, string(c.PrevResultAsGiven()), conf)
	}
	// Parse leaves prevResult to whoever prints it; the library's reading
	// fails on what it cannot read.
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","prevResult":{"cniVersion":"0.4.0","ips":"x"}}`))
	require.NoError(t, err)
	assert.ErrorContains(t, c.ParsePrevResult(), "parse prevResult")
}

// The in-use settings a pin keeps give back the same check, and recorded
// settings are validated like the configuration they came from.
func TestInUseSettingsRoundTrip(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"netns-pin",
		"inUse":{"sysfs":"/host/sys/","debugfs":"/host/debug","proc":"/host/proc","cephPorts":"6789","unattributed":"ignore"}}`))
	require.NoError(t, err)
	settings := c.InUseSettings()
	assert.Equal(t, "/host/sys", settings["sysfs"], "recorded as validated")
	var keys []string
	for i := range reflect.TypeFor[InUse]().NumField() {
		key, _, _ := strings.Cut(reflect.TypeFor[InUse]().Field(i).Tag.Get("json"), ",")
		keys = append(keys, key)
	}
	assert.ElementsMatch(t, keys, slices.Collect(maps.Keys(settings)), "the keys are InUse's json tags")
	opts, err := InUseOptionsOf(settings)
	require.NoError(t, err)
	assert.Equal(t, c.InUseOptions(), opts)

	for _, bad := range []map[string]string{
		{"sysfs": "sys", "debugfs": "/d", "proc": "/p", "cephPorts": "6789", "unattributed": "block"},
		{"sysfs": "/s", "debugfs": "/d", "proc": "/p", "cephPorts": "6789", "unattributed": "maybe"},
		{"sysfs": "/s", "debugfs": "/d", "proc": "/p", "cephPorts": "x", "unattributed": "block"},
		{"sysfs": "/s", "debugfs": "/d", "proc": "/p", "cephPorts": "6789", "unattributed": "block", "mystery": "1"},
		{},
	} {
		_, err := InUseOptionsOf(bad)
		assert.Error(t, err, "%v", bad)
	}
}

// A check under "block" finds all that one under "ignore" finds with the
// same roots and ports; nothing else covers another.
func TestInUseCovers(t *testing.T) {
	base := map[string]string{"sysfs": "/sys", "debugfs": "/sys/kernel/debug", "proc": "/proc", "cephPorts": DefaultCephPorts}
	with := func(policy string, kv ...string) map[string]string {
		m := map[string]string{"unattributed": policy}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	assert.True(t, InUseCovers(with("block"), with("ignore")))
	assert.False(t, InUseCovers(with("ignore"), with("block")), "ignore sees less than block")
	assert.False(t, InUseCovers(with("block"), with("block")), "equal settings need no cover: one check runs")
	assert.False(t, InUseCovers(with("block", "sysfs", "/host/sys"), with("ignore")), "other roots")
	assert.False(t, InUseCovers(with("block"), with("ignore", "cephPorts", "6789")), "other ports")
	assert.False(t, InUseCovers(with("block"), map[string]string{"unattributed": "ignore"}), "fewer settings")
}

// A rule's cluster namespace is literal (the operator names it) or the pod's
// own: a pod's name never chooses it. Templates with {{.PodName}} in the
// name part are valid although the configuration is read with no pod.
func TestHolderRuleTemplates(t *testing.T) {
	for _, tc := range []struct {
		cluster string
		pod     Pod
		want    string
	}{
		{"rook-ceph/{{.PodName}}", Pod{Namespace: "tenant", Name: "my-cluster"}, "rook-ceph/my-cluster"},
		{"rook-ceph/my-cluster", Pod{Namespace: "tenant", Name: "ook-ceph"}, "rook-ceph/my-cluster"},
		{"{{.PodNamespace}}/my-cluster", Pod{Namespace: "tenant", Name: "x"}, "tenant/my-cluster"},
		{"{{ .PodNamespace }}/{{.PodName}}", Pod{Namespace: "tenant", Name: "c1.x"}, "tenant/c1.x"},
		{"{{.PodNamespace}}/c-{{.PodName}}-{{.PodNamespace}}", Pod{Namespace: "tenant", Name: "n"}, "tenant/c-n-tenant"},
	} {
		c, err := Parse([]byte(`{"holders":[{"podNamespace":"tenant","podName":"*","cluster":"` + tc.cluster + `"}]}`))
		require.NoError(t, err, tc.cluster)
		cl, ok, err := c.Holder(tc.pod)
		require.NoError(t, err, tc.cluster)
		assert.True(t, ok, tc.cluster)
		assert.Equal(t, tc.want, cl.String(), tc.cluster)
	}
	for cluster, errWant := range map[string]string{
		// The reproduction: pod tenant/ook-ceph would pin rook-ceph/my-cluster.
		"r{{.PodName}}/my-cluster":        "a pod's name may not choose the cluster's namespace",
		"{{.PodName}}/my-cluster":         "a pod's name may not choose the cluster's namespace",
		"{{.PodNamespace}}{{.PodName}}/c": "a pod's name may not choose the cluster's namespace",
		"{{.PodName}}":                    "literal '/'",
		"{{.PodNamespace}}-x/c":           `not the pod's own namespace "tenant"`,
		"rook-ceph/{{.PodName}}-":         "DNS-1123",
		"rook-ceph/-{{.PodName}}":         "DNS-1123",
		"rook-ceph/{{.PodName}}/x":        "DNS-1123 subdomain",
		"rook-ceph/{{.Namespace}}":        "want one of",
	} {
		_, err := Parse([]byte(`{"holders":[{"podNamespace":"tenant","podName":"*","cluster":"` + cluster + `"}]}`))
		assert.ErrorContains(t, err, errWant, cluster)
	}
	// At ADD the real pod name is checked: one the template cannot carry
	// makes no holder.
	c, err := Parse([]byte(`{"holders":[{"podNamespace":"tenant","podName":"*","cluster":"rook-ceph/{{.PodName}}"}]}`))
	require.NoError(t, err)
	_, ok, err := c.Holder(Pod{Namespace: "tenant", Name: "Bad_Name"})
	assert.ErrorContains(t, err, "DNS-1123")
	assert.False(t, ok)
	// The own-namespace rule is checked at ADD as well, whatever a rule
	// compiled to.
	r := c.rules[0]
	r.nsTemplated = true
	_, err = r.clusterFor(Pod{Namespace: "tenant", Name: "x"})
	assert.ErrorIs(t, err, ErrClaimRefused)
}

// A link template that two clusters can render alike is refused: with
// "{{.Namespace}}-{{.Name}}.net", a/b-c and a-b/c share a-b-c.net. The
// documented templates pass.
func TestLinkTemplatesBelongToOneCluster(t *testing.T) {
	for _, ok := range []string{
		"{{.Namespace}}/{{.Name}}.net",
		"{{ .Namespace }}.{{.Name}}.net",
		"/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/{{.Namespace}}.net.ns",
		"/var/lib/kubelet/plugins/rook-ceph.cephfs.csi.ceph.com/{{.Namespace}}.net.ns",
		"by-cluster/{{.Namespace}}/{{.Name}}/netns",
		"{{.Namespace}}/{{.Name}}-{{.Name}}",
	} {
		_, err := Parse([]byte(`{"links":["` + ok + `"]}`))
		assert.NoError(t, err, ok)
	}
	for bad, errWant := range map[string]string{
		"{{.Namespace}}-{{.Name}}.net": "must be followed by '/' or '.'",
		"{{.Namespace}}{{.Name}}":      "must be followed by '/' or '.'",
		"{{.Name}}.net":                "first placeholder must be {{.Namespace}}",
		"{{.Name}}/{{.Namespace}}.net": "first placeholder must be {{.Namespace}}",
		"one.net":                      "first placeholder must be {{.Namespace}}",
		"{{.Namespace}}/{{.Name}}/..":  "path cleaning",
		"{{.Namespace}}//{{.Name}}":    "path cleaning",
		"x/./{{.Namespace}}/{{.Name}}": "path cleaning",
		"{{.Namespace}}/{{.Name}}/":    "path cleaning",
	} {
		_, err := Parse([]byte(`{"links":["` + bad + `"]}`))
		assert.ErrorContains(t, err, errWant, bad)
	}
	// Every accepted template gives each cluster its own path.
	c, err := Parse([]byte(`{"links":["{{.Namespace}}/{{.Name}}.net","{{.Namespace}}.{{.Name}}"]}`))
	require.NoError(t, err)
	seen := map[string]Cluster{}
	for _, cl := range []Cluster{{"a", "b-c"}, {"a-b", "c"}, {"a", "b.c"}, {"a", "bc"}, {"ab", "c"}} {
		paths, err := c.LinkPaths(cl)
		require.NoError(t, err)
		for i, p := range paths {
			key := fmt.Sprint(i, p)
			if o, dup := seen[key]; dup {
				t.Errorf("%s and %s share %s", o, cl, p)
			}
			seen[key] = cl
		}
	}
}

func TestInUseCommandNamesNonDefaultFolders(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"netns-pin"}`))
	require.NoError(t, err)
	assert.Equal(t, "netns-pinctl inuse abc.net1", c.InUseCommand("abc.net1"))
	c, err = Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"netns-pin","pinDir":"/srv/pins","inUse":{"proc":"/host/proc"}}`))
	require.NoError(t, err)
	assert.Equal(t, "netns-pinctl --pin-dir /srv/pins --proc /host/proc inuse abc.net1", c.InUseCommand("abc.net1"))
}
