package netnsstore

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fullRecord sets every field of Record and Teardown, with strings that
// need escaping.
func fullRecord() *Record {
	t0 := time.Date(2026, 12, 1, 13, 4, 5, 123456789, time.UTC)
	return &Record{
		Format: recordFormat, Writer: "v1.2.3", Attachment: "c1.eth0", ContainerID: "c1", IfName: "eth0",
		Network: "ceph <public> & \"x\"", Cluster: "rook-ceph/my-cluster", PodNS: "rook-ceph", PodName: "csi-holder-\u2028x",
		PodUID: "1b9f4e0c\t\n\x01\x7f", NetnsPath: "/var/run/netns/cni-1", PinDir: "/run/netns-pin", PinPath: "/run/netns-pin/pins/c1.eth0",
		NetnsDev: 4, NetnsIno: 4026532178, IPs: []string{"10.0.0.1", "fd00::1"}, InUse: map[string]string{"proc": "/p", "debugfs": "/d", "a\u2029": "\xff"},
		Links: []string{"/run/netns-pin/rook-ceph/my-cluster.net"}, BootID: "b0", State: stateDraining,
		Created: t0, Updated: t0.Add(time.Second), References: []string{"rbd0 rbd/img client4161 10.0.0.1"},
		DrainingSince: t0.Add(2 * time.Second),
		Teardown: &Teardown{Netns: "/var/run/netns/cni-1", CNIPath: "/opt/cni/bin", CacheFile: "/var/lib/cni/results/x",
			Cache: json.RawMessage(`{ "kind": "cniCacheV1", "html": "<a&b>\u2028", "n": [1, 2.5e3] }`)},
		Abandoned: true,
	}
}

// Every field of Record and Teardown is set by fullRecord: a field added to
// either without being added to the codec fails here.
func TestFullRecordSetsEveryField(t *testing.T) {
	for _, v := range []reflect.Value{reflect.ValueOf(*fullRecord()), reflect.ValueOf(*fullRecord().Teardown)} {
		for i := range v.NumField() {
			assert.False(t, v.Field(i).IsZero(), "%s.%s is not set by fullRecord", v.Type().Name(), v.Type().Field(i).Name)
		}
	}
}

func TestEncodeRecordIsMarshalIndent(t *testing.T) {
	for name, r := range map[string]*Record{
		"full":  fullRecord(),
		"zero":  {},
		"empty": {IPs: []string{}, Links: []string{}, InUse: map[string]string{}, References: []string{}, Teardown: &Teardown{}},
	} {
		want, err := json.MarshalIndent(r, "", "  ")
		require.NoError(t, err, name)
		got, err := encodeRecord(r)
		require.NoError(t, err, name)
		assert.Equal(t, string(want), string(got), name)
		var back Record
		require.NoError(t, decodeRecord(got, &back), name)
		var viaJSON Record
		require.NoError(t, json.Unmarshal(want, &viaJSON), name)
		assert.Equal(t, viaJSON, back, name)
	}
	bad := fullRecord()
	bad.Created = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err := encodeRecord(bad)
	assert.Error(t, err, "a year of five digits")
	bad = fullRecord()
	bad.Teardown.Cache = json.RawMessage(`{"cut`)
	_, err = encodeRecord(bad)
	assert.Error(t, err, "a cache that is no JSON")
}

// FuzzEncodeRecord: for records made of the fuzzer's strings, encodeRecord
// writes what json.MarshalIndent writes, and fails where it fails.
func FuzzEncodeRecord(f *testing.F) {
	f.Add("c1.eth0", "ceph <public>", "\xff\u2028", "proc", `{"a": [1, "<x>"]}`, int64(1764594245123456789), uint64(7), true)
	f.Add("", "", "", "", "", int64(0), uint64(0), false)
	f.Add("a\"b\\c", "\x00\x1f", "é", "k", `null`, int64(-62135596800000000000/1e9), uint64(1<<63), false)
	f.Fuzz(func(t *testing.T, s1, s2, s3, key, cache string, nanos int64, n uint64, flag bool) {
		r := &Record{Format: int(n % 5), Writer: s1, Attachment: s1, ContainerID: s2, IfName: s3, Network: s2 + s3,
			Cluster: s3, PodNS: s2, PodUID: s1, NetnsPath: s3, PinDir: s1, NetnsDev: n, NetnsIno: n / 3,
			IPs: []string{s1, s2}, InUse: map[string]string{key: s3, s1: s2}, Links: []string{s3}, State: State(s2),
			Created: time.Unix(0, nanos).UTC(), Updated: time.Unix(0, nanos).In(time.FixedZone("x", int(n%86400))), Abandoned: flag}
		if flag {
			r.References, r.DrainingSince = []string{s3}, time.Unix(nanos/1e9, 0)
			r.Teardown = &Teardown{Netns: s1, CacheFile: s2, Cache: json.RawMessage(cache)}
		}
		want, wantErr := json.MarshalIndent(r, "", "  ")
		got, err := encodeRecord(r)
		require.Equal(t, wantErr == nil, err == nil, "encoding/json: %v; encodeRecord: %v", wantErr, err)
		if err == nil {
			require.Equal(t, string(want), string(got))
		}
	})
}

// FuzzDecodeRecord: decodeRecord fills what json.Unmarshal fills, and
// fails with its error.
func FuzzDecodeRecord(f *testing.F) {
	full, err := json.MarshalIndent(fullRecord(), "", "  ")
	require.NoError(f, err)
	for _, s := range []string{
		string(full),
		`{}`, `null`, ` null `, `[]`, `""`, `{"format":2`, ``,
		`{"ips":["a"],"ips":["b"],"inUse":{"a":"1"},"inUse":{"b":"2"},"teardown":{"netns":"x"},"teardown":{"cniPath":"y"}}`,
		`{"teardown":null,"links":null,"state":null,"created":null}`,
		`{"Format":3,"PINDIR":"/x","ſtate":"draining","netnsIno":"7"}`,
		`{"format":1.5}`, `{"netnsDev":-1}`, `{"created":"yesterday"}`, `{"teardown":[]}`, `{"teardown":{"cache":{"a":1}, "CACHE":2}}`,
		`{"pin\u0044ir":"/escaped","unknown":{"pinDir":5},"abandoned":true}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want Record
		gotErr := decodeRecord(data, &got)
		wantErr := json.Unmarshal(data, &want)
		require.Equal(t, wantErr == nil, gotErr == nil, "encoding/json: %v; decodeRecord: %v", wantErr, gotErr)
		if wantErr != nil {
			require.Equal(t, wantErr.Error(), gotErr.Error())
			return
		}
		require.Equal(t, want, got)
	})
}

// The seeds above run in every go test; this names what the fast path
// takes and what it leaves to encoding/json.
func TestDecodeRecordFastPath(t *testing.T) {
	full, err := json.MarshalIndent(fullRecord(), "", "  ")
	require.NoError(t, err)
	var r, want Record
	require.NoError(t, decodeRecordMembers(full, &r), "a record netns-pin wrote")
	require.NoError(t, json.Unmarshal(full, &want))
	assert.Equal(t, want, r)
	assert.Equal(t, "\ufffd", want.InUse["a\u2029"], "invalid UTF-8 came back as U+FFFD, as JSON has it")
	for _, s := range []string{`{"PinDir":"/x"}`, `{"ſtate":"draining"}`, `{"teardown":{"Cache":1}}`} {
		var r Record
		assert.ErrorIs(t, decodeRecordMembers([]byte(s), &r), errSlowPath, s)
	}
	for _, s := range []string{`[]`, `{"teardown":"x"}`, `{"format":"2"}`} {
		var r Record
		assert.Error(t, decodeRecordMembers([]byte(s), &r), "no object, or a value of the wrong type: %s", s)
	}
	var r2 Record
	require.NoError(t, decodeRecordMembers([]byte(` null `), &r2), "null is a record without members, as for encoding/json")
	assert.Equal(t, Record{}, r2)
	assert.True(t, strings.Contains(string(full), `"teardown"`))
}
