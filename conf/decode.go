package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// decode fills c from a plugin entry in two steps over the same bytes.
// json.Unmarshal fills the embedded types.PluginConf: the library's keys
// (cniVersion, name, ipam, prevResult, ...) read as the reference chained
// plugins (tuning, portmap) read theirs. Then one pass over the entry's
// tokens reads netns-pin's own keys, named by the json tags of Config and
// of the types below it (the only schema), into their fields, and holds
// them to what docs/design.md §3 asks and encoding/json does not: a key
// that differs from one of them only in case ("pindir") is an error naming
// the key it resembles, where encoding/json would have taken it; so is one
// given twice, of which it keeps the last; a value of the wrong kind names
// the key's whole path (holders[1].podName). Otherwise the fields are what
// json.Unmarshal into Config gives (FuzzDecodeMatchesEncodingJSON holds it
// to that). Not json.Unmarshal into Config itself: its first call builds
// encoding/json's field caches of every type below Config, which cost a
// pod's DEL 5% of its time (docs/performance.md). The pass also finds
// prevResult as given. Unknown keys are left alone.
func (c *Config) decode(data []byte) error {
	uerr := json.Unmarshal(data, &c.PluginConf)
	var te *json.UnmarshalTypeError
	if uerr != nil && !errors.As(uerr, &te) {
		return uerr // not JSON: as encoding/json says it
	}
	p := keyPass{dec: json.NewDecoder(bytes.NewReader(data))}
	if err := p.value("", reflect.ValueOf(c).Elem()); err != nil {
		return err
	}
	c.prevResult, c.prevResults = p.prevResult, p.prevResults
	return uerr // a type error in the library's keys (name, ipam, ...)
}

// keyPass walks one valid JSON value into the Go value it decodes into.
type keyPass struct {
	dec         *json.Decoder
	prevResult  json.RawMessage // the top-level "prevResult"
	prevResults int             // top-level keys of any case that the library reads as prevResult
}

// value reads the next value into v, at path at.
func (p *keyPass) value(at string, v reflect.Value) error {
	tok, err := p.dec.Token()
	if err != nil || tok == nil {
		return err // null: v stays as it is, as for encoding/json
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	switch t := v.Type(); {
	case t.Kind() == reflect.String:
		s, ok := tok.(string)
		if !ok {
			return errAt(at, "want a string, got %s", kindOf(tok))
		}
		v.SetString(s)
	case t.Kind() == reflect.Slice && tok == json.Delim('['):
		v.Set(reflect.MakeSlice(t, 0, 0))
		for i := 0; p.dec.More(); i++ {
			elem := at // an error in a list of strings names the list
			if t.Elem().Kind() == reflect.Struct {
				elem = fmt.Sprintf("%s[%d]", at, i)
			}
			v.Set(reflect.Append(v, reflect.Zero(t.Elem())))
			if err := p.value(elem, v.Index(i)); err != nil {
				return err
			}
		}
		_, err = p.dec.Token()
	case t.Kind() == reflect.Slice:
		want := "a list"
		if t.Elem().Kind() == reflect.String {
			want = "a list of strings"
		}
		return errAt(at, "want %s, got %s", want, kindOf(tok))
	case t.Kind() == reflect.Struct && tok == json.Delim('{'):
		err = p.object(at, v)
	default:
		return errAt(at, "want an object, got %s", kindOf(tok))
	}
	return err
}

// object reads the members of an object into struct v, whose '{' was read.
func (p *keyPass) object(at string, v reflect.Value) error {
	keys := keysOf(v.Type())
	var seen []string
	for p.dec.More() {
		tok, err := p.dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		if at == "" && strings.EqualFold(key, "prevResult") {
			p.prevResults++
			if key == "prevResult" {
				p.prevResult = nil
				if err := p.dec.Decode(&p.prevResult); err != nil {
					return err
				}
				continue
			}
		}
		k, ok := keys.find(key)
		switch {
		case !ok:
			var skip json.RawMessage // not netns-pin's
			err = p.dec.Decode(&skip)
		case k.name != key:
			return fmt.Errorf("%s: unknown key; keys are case-sensitive: did you mean %q?", join(at, key), k.name)
		case slices.Contains(seen, key):
			return fmt.Errorf("%s: given twice", join(at, key))
		default:
			seen = append(seen, key)
			err = p.value(join(at, key), v.Field(k.index))
		}
		if err != nil {
			return err
		}
	}
	_, err := p.dec.Token()
	return err
}

// structKey is a key of a struct type: the json name of one of its fields.
type structKey struct {
	name  string
	index int
}

type structKeys []structKey

// keysOf reads t's tags once for all the members of an object: a tag is
// parsed again on every Tag.Get. Embedded structs (the library's
// PluginConf) are not netns-pin's keys, and encoding/json reads no
// unexported field.
func keysOf(t reflect.Type) structKeys {
	var ks structKeys
	for i := range t.NumField() {
		sf := t.Field(i)
		if name, _, _ := strings.Cut(sf.Tag.Get("json"), ","); sf.IsExported() && !sf.Anonymous && name != "" && name != "-" {
			ks = append(ks, structKey{name, i})
		}
	}
	return ks
}

// find is the key that key names, or one that differs from it only in case.
func (ks structKeys) find(key string) (structKey, bool) {
	for _, exact := range []bool{true, false} {
		for _, k := range ks {
			if k.name == key || !exact && strings.EqualFold(k.name, key) {
				return k, true
			}
		}
	}
	return structKey{}, false
}

// kindOf names a token's JSON kind as encoding/json's errors do.
func kindOf(tok json.Token) string {
	switch tok.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "number"
	}
	if tok == json.Delim('[') {
		return "array"
	}
	return "object"
}

// errAt is an error of the value at path at ("" for the entry itself).
func errAt(at, format string, a ...any) error {
	if at == "" {
		return fmt.Errorf(format, a...)
	}
	return fmt.Errorf("%s: "+format, append([]any{at}, a...)...)
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}
