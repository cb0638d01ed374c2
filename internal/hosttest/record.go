package hosttest

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// Record is netns-pin's record of a pinned attachment as the end to end
// suites read it: a JSON view of their own rather than netnsstore.Record,
// so that a renamed field of the on-disk format fails them.
type Record struct {
	Attachment string   `json:"attachment"`
	Cluster    string   `json:"cluster"`
	PodNS      string   `json:"podNamespace"`
	PodName    string   `json:"podName"`
	PodUID     string   `json:"podUID"`
	PinPath    string   `json:"pinPath"`
	NetnsDev   uint64   `json:"netnsDev"`
	NetnsIno   uint64   `json:"netnsIno"`
	IPs        []string `json:"ips"`
	Links      []string `json:"links"`
	State      string   `json:"state"`
}

// NetnsID is the identity of the recorded netns.
func (r *Record) NetnsID() host.NSID { return host.NSID{Dev: r.NetnsDev, Ino: r.NetnsIno} }

// ReadRecord reads the record at path; nil when there is none.
func ReadRecord(t *testing.T, path string) *Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var r Record
	require.NoError(t, json.Unmarshal(b, &r), "record %s", path)
	return &r
}
