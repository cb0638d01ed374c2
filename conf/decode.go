package conf

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/netns-pin/netns-pin/internal/jsonscan"
)

// decode fills c from a plugin entry. The CNI library's part
// (types.PluginConf) is decoded by the library, as in every chained
// plugin; netns-pin's own keys are picked from the entry's members one by
// one, into strings and lists of strings. Not json.Unmarshal into Config:
// encoding/json builds its cache of a struct type's fields on first use,
// in every process anew, and for this configuration's types that cache
// cost each pod's ADD and DEL about 50 µs, most of what a pod that is no
// holder paid over any other chained plugin (docs/performance.md).
//
// Keys are those of docs/design.md §3, matched exactly. A key that
// differs from one of them only in case ("pindir") is an error naming the
// key it resembles, rather than a setting that is silently ignored; other
// keys are left to the runtime and other plugins, as before. So is a key
// given twice, which encoding/json took without a word.
func (c *Config) decode(data []byte) error {
	if err := json.Unmarshal(data, &c.PluginConf); err != nil {
		return err
	}
	return decodeObject(data, "", []member{
		{"pinDir", str(&c.PinDir)},
		{"stateDir", str(&c.StateDir)},
		{"links", strs(&c.Links)},
		{"holders", c.decodeHolders},
		{"cniArgsNamespaces", strs(&c.CNIArgsNamespaces)},
		{"inUse", func(raw []byte, at string) error {
			return decodeObject(raw, at, []member{
				{"sysfs", str(&c.InUse.Sysfs)},
				{"debugfs", str(&c.InUse.Debugfs)},
				{"proc", str(&c.InUse.Proc)},
				{"cephPorts", str(&c.InUse.CephPorts)},
				{"unattributed", str(&c.InUse.Unattributed)},
			})
		}},
		{"cacheDirs", strs(&c.CacheDirs)},
		{"logFile", str(&c.LogFile)},
		{"logLevel", str(&c.LogLevel)},
		{"args", c.decodeArgs},
	})
}

func (c *Config) decodeHolders(raw []byte, at string) error {
	var items []json.RawMessage
	if err := unmarshalAt(raw, at, &items); err != nil || items == nil { // null: no rules
		c.Holders = nil
		return err
	}
	c.Holders = make([]HolderRule, len(items))
	for i, item := range items {
		r := &c.Holders[i]
		if err := decodeObject(item, fmt.Sprintf("%s[%d]", at, i), []member{
			{"podNamespace", str(&r.PodNamespace)},
			{"podName", str(&r.PodName)},
			{"cluster", str(&r.Cluster)},
		}); err != nil {
			return err
		}
	}
	return nil
}

// decodeArgs reads args.cni.pinCluster; args and args.cni are shared with
// the runtime and other plugins, whose keys are theirs.
func (c *Config) decodeArgs(raw []byte, at string) error {
	if jsonscan.IsNull(raw) {
		c.Args = nil
		return nil
	}
	a := &Args{}
	err := decodeObject(raw, at, []member{{"cni", func(raw []byte, at string) error {
		return decodeObject(raw, at, []member{{"pinCluster", str(&a.CNI.PinCluster)}})
	}}})
	c.Args = a
	return err
}

// member is one key of a JSON object and what decodes its value; at is
// the key's path in the configuration, for errors.
type member struct {
	key    string
	decode func(raw []byte, at string) error
}

// decodeObject decodes the members of the JSON object raw (at is its
// path, "" for the entry itself) that ms name; null is an absent object.
// A key of ms given twice is an error: encoding/json would take the last
// value, or merge two objects, and neither is what the author meant.
// raw is valid JSON: decode checked the whole entry first.
func decodeObject(raw []byte, at string, ms []member) error {
	var seen uint64 // members decoded, by index in ms
	return eachMember(raw, at, func(key string, val []byte) error {
		i, ok := findMember(ms, key)
		switch {
		case !ok:
			return nil
		case ms[i].key != key:
			return fmt.Errorf("%s: unknown key; keys are case-sensitive: did you mean %q?", join(at, key), ms[i].key)
		case seen&(1<<i) != 0:
			return fmt.Errorf("%s: given twice", join(at, key))
		}
		seen |= 1 << i
		return ms[i].decode(val, join(at, key))
	})
}

// eachMember calls fn with each member of the object raw (see
// jsonscan.Members), its own errors prefixed with at.
func eachMember(raw []byte, at string, fn func(key string, val []byte) error) error {
	var ownErr error
	err := jsonscan.Members(raw, func(key string, val []byte) error {
		if err := fn(key, val); err != nil {
			ownErr = err
			return err
		}
		return nil
	})
	if err != nil && err != ownErr {
		return errAt(at, err)
	}
	return err
}

// findMember finds key's member, or one whose key differs only in case.
func findMember(ms []member, key string) (int, bool) {
	for i, m := range ms {
		if m.key == key {
			return i, true
		}
	}
	for i, m := range ms {
		if strings.EqualFold(m.key, key) {
			return i, true
		}
	}
	return 0, false
}

func errAt(at string, err error) error {
	if at == "" {
		return err
	}
	return fmt.Errorf("%s: %w", at, err)
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

// str and strs decode a string and a list of strings; null leaves the
// field as it is, as encoding/json does.
func str(p *string) func([]byte, string) error {
	return func(raw []byte, at string) error { return unmarshalAt(raw, at, p) }
}

func strs(p *[]string) func([]byte, string) error {
	return func(raw []byte, at string) error { return unmarshalAt(raw, at, p) }
}

func unmarshalAt(raw []byte, at string, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			want := "a list"
			switch te.Type.String() {
			case "string":
				want = "a string"
			case "[]string":
				want = "a list of strings"
			}
			return fmt.Errorf("%s: want %s, got %s", at, want, te.Value)
		}
		return errAt(at, err)
	}
	return nil
}
