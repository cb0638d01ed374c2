package netnsstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/netns-pin/netns-pin/internal/jsonscan"
)

// A record's JSON, written and read without reflection: encoding/json
// builds its cache of a struct type's fields on first use, in every process
// anew, and for Record that cost a holder ADD (which writes one) about
// 200 µs and a holder DEL (which reads one) about 100 µs, a tenth of what
// they cost over any other chained plugin (docs/performance.md). The format
// is encoding/json's, byte for byte: encodeRecord writes what
// json.MarshalIndent(r, "", "  ") writes, and decodeRecord fills what
// json.Unmarshal fills, with the same errors (fuzz tests hold both to it).
// Neither is a second definition of the format: the struct tags of Record
// and Teardown stay what the format is, and a field added there without
// being added here fails those tests.

// encodeRecord is json.MarshalIndent(r, "", "  ").
func encodeRecord(r *Record) ([]byte, error) {
	b := make([]byte, 0, 1024)
	b = append(b, '{')
	b = appendKey(b, "format", true)
	b = strconv.AppendInt(b, int64(r.Format), 10)
	if r.Writer != "" {
		b = appendStringField(b, "writer", r.Writer)
	}
	b = appendStringField(b, "attachment", r.Attachment)
	b = appendStringField(b, "containerID", r.ContainerID)
	b = appendStringField(b, "ifName", r.IfName)
	b = appendStringField(b, "network", r.Network)
	b = appendStringField(b, "cluster", r.Cluster)
	for _, f := range [...]struct{ key, val string }{{"podNamespace", r.PodNS}, {"podName", r.PodName}, {"podUID", r.PodUID}} {
		if f.val != "" {
			b = appendStringField(b, f.key, f.val)
		}
	}
	b = appendStringField(b, "netnsPath", r.NetnsPath)
	b = appendStringField(b, "pinDir", r.PinDir)
	b = appendStringField(b, "pinPath", r.PinPath)
	if r.NetnsDev != 0 {
		b = strconv.AppendUint(appendKey(b, "netnsDev", false), r.NetnsDev, 10)
	}
	if r.NetnsIno != 0 {
		b = strconv.AppendUint(appendKey(b, "netnsIno", false), r.NetnsIno, 10)
	}
	b = appendStrings(appendKey(b, "ips", false), r.IPs)
	if len(r.InUse) > 0 {
		b = appendKey(b, "inUse", false)
		b = append(b, '{')
		for i, k := range slices.Sorted(maps.Keys(r.InUse)) {
			b = appendKey(b, k, i == 0)
			b = appendString(b, r.InUse[k])
		}
		b = append(b, '}')
	}
	b = appendStrings(appendKey(b, "links", false), r.Links)
	b = appendStringField(b, "bootID", r.BootID)
	b = appendStringField(b, "state", string(r.State))
	var err error
	if b, err = appendTime(appendKey(b, "created", false), r.Created); err != nil {
		return nil, err
	}
	if b, err = appendTime(appendKey(b, "updated", false), r.Updated); err != nil {
		return nil, err
	}
	if len(r.References) > 0 {
		b = appendStrings(appendKey(b, "references", false), r.References)
	}
	if !r.DrainingSince.IsZero() {
		if b, err = appendTime(appendKey(b, "drainingSince", false), r.DrainingSince); err != nil {
			return nil, err
		}
	}
	if t := r.Teardown; t != nil {
		b = appendKey(b, "teardown", false)
		b = append(b, '{')
		first := true
		for _, f := range [...]struct{ key, val string }{{"netns", t.Netns}, {"cniPath", t.CNIPath}, {"cacheFile", t.CacheFile}} {
			if f.val != "" {
				b = appendKey(b, f.key, first)
				b = appendString(b, f.val)
				first = false
			}
		}
		if len(t.Cache) > 0 {
			b = appendKey(b, "cache", first)
			if b, err = appendRaw(b, t.Cache); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	}
	if r.Abandoned {
		b = append(appendKey(b, "abandoned", false), "true"...)
	}
	b = append(b, '}')
	var out bytes.Buffer
	out.Grow(len(b) + len(b)/4)
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// appendKey appends `"key":`, after a comma unless first.
func appendKey(b []byte, key string, first bool) []byte {
	if !first {
		b = append(b, ',')
	}
	return append(appendString(b, key), ':')
}

func appendStringField(b []byte, key, val string) []byte {
	return appendString(appendKey(b, key, false), val)
}

// appendStrings appends a list of strings; nil is null, as encoding/json
// writes a nil slice.
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendTime appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds, a year of four digits or an error).
func appendTime(b []byte, t time.Time) ([]byte, error) {
	v, err := t.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode time: %w", err)
	}
	return append(b, v...), nil
}

// appendRaw appends a json.RawMessage as encoding/json does: compacted,
// with <, >, &, U+2028 and U+2029 escaped in its strings.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return nil, err
	}
	var h bytes.Buffer
	json.HTMLEscape(&h, c.Bytes())
	return append(b, h.Bytes()...), nil
}

// appendString appends s as a JSON string the way encoding/json does by
// default: ", \ and control characters escaped (\b \f \n \r \t by name,
// the rest as \u00XX), <, > and & as \u003c \u003e \u0026 (HTML-safe),
// U+2028 and U+2029 as \u2028 \u2029, and each byte of invalid UTF-8 as
// \ufffd.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// errSlowPath makes decodeRecord hand the record to encoding/json.
var errSlowPath = errors.New("decode with encoding/json")

// decodeRecord is json.Unmarshal(data, r) for a zero r. The members of a
// valid record with the keys of Record, spelt as its tags spell them, are
// decoded one by one into their fields (each value with json.Unmarshal,
// which needs no struct fields for a string, a list or a time); anything
// else (invalid JSON, a value of the wrong type, a key that differs only
// in case, which encoding/json would take) goes to json.Unmarshal itself,
// on a zero record, so that its result and its errors are encoding/json's.
func decodeRecord(data []byte, r *Record) error {
	if json.Valid(data) && decodeRecordMembers(data, r) == nil {
		return nil
	}
	*r = Record{}
	return json.Unmarshal(data, r)
}

func decodeRecordMembers(data []byte, r *Record) error {
	fields := []field{
		{"format", &r.Format}, {"writer", &r.Writer}, {"attachment", &r.Attachment},
		{"containerID", &r.ContainerID}, {"ifName", &r.IfName}, {"network", &r.Network},
		{"cluster", &r.Cluster}, {"podNamespace", &r.PodNS}, {"podName", &r.PodName},
		{"podUID", &r.PodUID}, {"netnsPath", &r.NetnsPath}, {"pinDir", &r.PinDir},
		{"pinPath", &r.PinPath}, {"netnsDev", &r.NetnsDev}, {"netnsIno", &r.NetnsIno},
		{"ips", &r.IPs}, {"inUse", &r.InUse}, {"links", &r.Links}, {"bootID", &r.BootID},
		{"state", (*string)(&r.State)}, {"created", &r.Created}, {"updated", &r.Updated},
		{"references", &r.References}, {"drainingSince", &r.DrainingSince},
		{"teardown", nil}, {"abandoned", &r.Abandoned},
	}
	return decodeMembers(data, fields, func(val []byte) error {
		if jsonscan.IsNull(val) {
			r.Teardown = nil
			return nil
		}
		if r.Teardown == nil {
			r.Teardown = &Teardown{}
		}
		t := r.Teardown
		return decodeMembers(val, []field{
			{"netns", &t.Netns}, {"cniPath", &t.CNIPath}, {"cacheFile", &t.CacheFile}, {"cache", &t.Cache},
		}, nil)
	})
}

// field is a member of a JSON object and the Go value it decodes into; a
// nil value is the one member decodeMembers hands to its nested function.
type field struct {
	key string
	val any
}

// decodeMembers decodes the members of the object raw into fields, each
// value with json.Unmarshal; nested decodes the member whose value is nil.
// Anything encoding/json might read otherwise is an error, which sends the
// record to encoding/json: raw being no object (jsonscan.Members' error),
// a value of another type (json.Unmarshal's), or a key that is none of
// fields but that encoding/json, which matches keys without regard to case
// and with Unicode folding (K, the Kelvin sign, is k), might take for one:
// a key of another case, or with a byte outside ASCII (errSlowPath).
func decodeMembers(raw []byte, fields []field, nested func(val []byte) error) error {
	return jsonscan.Members(raw, func(key string, val []byte) error {
		for _, f := range fields {
			if f.key != key {
				continue
			}
			if f.val == nil {
				return nested(val)
			}
			return json.Unmarshal(val, f.val)
		}
		for i := 0; i < len(key); i++ {
			if key[i] >= utf8.RuneSelf {
				return errSlowPath
			}
		}
		for _, f := range fields {
			if strings.EqualFold(f.key, key) {
				return errSlowPath
			}
		}
		return nil // a key of no field: encoding/json ignores it too
	})
}
