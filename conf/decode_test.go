package conf

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeSeeds are entries with every key of Config, in various shapes.
var decodeSeeds = []string{
	`{"cniVersion":"1.0.0","name":"n","type":"netns-pin"}`,
	`{"pinDir":"/a","stateDir":"/b","links":["{{.Namespace}}/{{.Name}}.net"],` +
		`"holders":[{"podNamespace":"rook-ceph","podName":"csi-*","cluster":"{{.PodNamespace}}/c"},null,{}],"cniArgsNamespaces":["s"],` +
		`"inUse":{"sysfs":"/s","debugfs":"/d","proc":"/p","cephPorts":"3300,6789","unattributed":"ignore"},"cacheDirs":["/c"],` +
		`"logFile":"/l","logLevel":"debug","args":{"cni":{"pinCluster":"a/b","ips":["10.0.0.1"]},"other":1}}`,
	`{"pinDir":null,"links":null,"holders":null,"inUse":null,"args":null,"cacheDirs":[]}`,
	`{"args":{"cni":null}}`,
	`{"pinDir":"/a","pinDir":"/b","inUse":{"proc":"/x"},"inUse":{"sysfs":"/y"}}`,
	`{"pin\u0044ir":"/escaped","unknown":{"pinDir":5}}`,
	`{"pinDir":5}`,
	`{"links":["a",5]}`,
	`{"holders":[{"podName":true}]}`,
	`{"holders":{"podName":"x"}}`,
	`{"inUse":[]}`,
	`{"args":{"cni":{"pinCluster":7}}}`,
	`[]`,
	`{"pinDir":"/a"`,
	"null\n", // a CI run's fuzzing found null with a space after it refused
	" null ",
	`{"args":null }`,
}

// refusedOnPurpose tells decode's errors for what encoding/json takes: a
// key of netns-pin in the wrong case, or given twice.
func refusedOnPurpose(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "keys are case-sensitive") || strings.HasSuffix(err.Error(), ": given twice"))
}

// FuzzDecodeMatchesEncodingJSON holds decode to what json.Unmarshal into
// Config (its tags) gives, for every entry whose keys of netns-pin are
// spelt exactly and given once: the same fields, and an error for the same inputs.
func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got Config
		gotErr := got.decode(data)
		var want Config
		wantErr := json.Unmarshal(data, &want)
		if refusedOnPurpose(gotErr) {
			return // encoding/json takes such a key; decode refuses it
		}
		require.Equal(t, wantErr == nil, gotErr == nil, "encoding/json: %v; decode: %v", wantErr, gotErr)
		if wantErr == nil {
			require.Equal(t, want, got)
		}
	})
}

func TestDecodeSeedsAgreeWithEncodingJSON(t *testing.T) {
	// The fuzz target's seeds run in every `go test`; this names the
	// outcome of each, so a seed that stops exercising what it was written
	// for is noticed.
	for _, s := range decodeSeeds {
		var c Config
		err := c.decode([]byte(s))
		var want Config
		wantErr := json.Unmarshal([]byte(s), &want)
		if refusedOnPurpose(err) {
			continue
		}
		assert.Equal(t, wantErr == nil, err == nil, "%s: encoding/json %v, decode %v", s, wantErr, err)
		if err == nil {
			assert.Equal(t, want, c, s)
		}
	}
	var c Config
	require.NoError(t, c.decode([]byte(decodeSeeds[1])))
	assert.Equal(t, "a/b", c.Args.CNI.PinCluster)
	assert.Len(t, c.Holders, 3)
}

func TestDecodeRefusesAKeyGivenTwice(t *testing.T) {
	for conf, want := range map[string]string{
		`{"pinDir":"/a","pinDir":"/b"}`:                            "pinDir: given twice",
		`{"inUse":{"proc":"/x"},"inUse":{"sysfs":"/y"}}`:           "inUse: given twice",
		`{"holders":[{"podName":"a","podName":"b"}]}`:              "holders[0].podName: given twice",
		`{"args":{"cni":{"pinCluster":"a/b","pinCluster":"c/d"}}}`: "args.cni.pinCluster: given twice",
	} {
		_, err := Parse([]byte(conf))
		require.Error(t, err, conf)
		assert.Equal(t, "parse configuration: "+want, err.Error(), conf)
	}
	// Other keys are the library's and other plugins': as encoding/json
	// takes them.
	c, err := Parse([]byte(`{"name":"a","name":"b","args":{"cni":{"ips":[],"ips":[]}}}`))
	require.NoError(t, err)
	assert.Equal(t, "b", c.Name)
}

func TestDecodeRefusesKeysInTheWrongCase(t *testing.T) {
	for conf, want := range map[string]string{
		`{"pindir":"/x"}`:                       `pindir: unknown key; keys are case-sensitive: did you mean "pinDir"?`,
		`{"inUse":{"CephPorts":"1"}}`:           `inUse.CephPorts: unknown key; keys are case-sensitive: did you mean "cephPorts"?`,
		`{"holders":[{"podnamespace":"a"}]}`:    `holders[0].podnamespace: unknown key; keys are case-sensitive: did you mean "podNamespace"?`,
		`{"args":{"CNI":{"pinCluster":"a/b"}}}`: `args.CNI: unknown key; keys are case-sensitive: did you mean "cni"?`,
		`{"args":{"cni":{"PinCluster":"a/b"}}}`: `args.cni.PinCluster: unknown key; keys are case-sensitive: did you mean "pinCluster"?`,
	} {
		_, err := Parse([]byte(conf))
		require.Error(t, err, conf)
		assert.Equal(t, "parse configuration: "+want, err.Error(), conf)
	}
	// Keys that are no key of netns-pin's, in any case, stay the runtime's
	// and other plugins'.
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"n","type":"netns-pin","capabilities":{"x":true},"Foo":1,"args":{"cni":{"ips":["10.0.0.1"]}}}`))
	require.NoError(t, err)
	assert.Empty(t, c.Args.CNI.PinCluster)
}

func TestDecodeErrorsNameTheKey(t *testing.T) {
	for conf, want := range map[string]string{
		`{"pinDir":5}`:                         "pinDir: want a string, got number",
		`{"links":["a",5]}`:                    "links: want a string, got number",
		`{"holders":[{"podName":true}]}`:       "holders.podName: want a string, got bool",
		`{"holders":{"podName":"x"}}`:          "holders: ",
		`{"inUse":[]}`:                         "inUse: ",
		`{"args":{"cni":{"pinCluster":7}}}`:    "args.cni.pinCluster: want a string, got number",
		`{"inUse":{"unattributed":{"a":"b"}}}`: "inUse.unattributed: want a string, got object",
	} {
		_, err := Parse([]byte(conf))
		require.Error(t, err, conf)
		assert.Contains(t, err.Error(), "parse configuration: "+want, conf)
	}
}
