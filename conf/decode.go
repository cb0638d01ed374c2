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

// decode fills c from a plugin entry: json.Unmarshal into Config, which
// embeds the CNI library's types.PluginConf, as the reference chained
// plugins (tuning, portmap) read theirs. Then one pass over the entry's
// tokens holds netns-pin's own keys (the json tags of Config and of the
// types below it: the only schema) to what docs/design.md §3 asks and
// encoding/json does not: a key that differs from one of them only in case
// ("pindir") is an error naming the key it resembles, where encoding/json
// would have taken it; so is one given twice, of which it keeps the last.
// The pass also checks each value's kind, so that an error names the
// key's whole path (holders[1].podName), and finds prevResult as given.
// Other keys are the library's, the runtime's and other plugins', read by
// encoding/json as for any plugin, and unknown keys are left alone.
func (c *Config) decode(data []byte) error {
	uerr := json.Unmarshal(data, c)
	var te *json.UnmarshalTypeError
	if uerr != nil && !errors.As(uerr, &te) {
		return uerr // not JSON: as encoding/json says it
	}
	p := keyPass{dec: json.NewDecoder(bytes.NewReader(data))}
	if err := p.value("", configType); err != nil {
		return err
	}
	c.prevResult, c.prevResults = p.prevResult, p.prevResults
	return uerr // a type error in the library's keys (name, ipam, ...)
}

var configType = reflect.TypeFor[Config]()

// keyPass walks one valid JSON value with the Go type it decodes into.
type keyPass struct {
	dec         *json.Decoder
	prevResult  json.RawMessage // the top-level "prevResult"
	prevResults int             // top-level keys of any case that the library reads as prevResult
}

// value reads the next value, of Go type t, at path at.
func (p *keyPass) value(at string, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := p.dec.Token()
	if err != nil || tok == nil {
		return err // null: the field stays as it is, as for encoding/json
	}
	switch d, _ := tok.(json.Delim); {
	case t.Kind() == reflect.String:
		if _, ok := tok.(string); !ok {
			return errAt(at, "want a string, got %s", kindOf(tok))
		}
	case t.Kind() == reflect.Slice && d == '[':
		for i := 0; p.dec.More(); i++ {
			elem := at // a list of strings names the list, as before
			if t.Elem().Kind() == reflect.Struct {
				elem = fmt.Sprintf("%s[%d]", at, i)
			}
			if err := p.value(elem, t.Elem()); err != nil {
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
	case d == '{':
		err = p.object(at, t)
	default:
		return errAt(at, "want an object, got %s", kindOf(tok))
	}
	return err
}

// object reads the members of an object of struct type t whose '{' was read.
func (p *keyPass) object(at string, t reflect.Type) error {
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
		name, typ, ok := field(t, key)
		switch {
		case !ok:
			var skip json.RawMessage // not netns-pin's
			err = p.dec.Decode(&skip)
		case name != key:
			return fmt.Errorf("%s: unknown key; keys are case-sensitive: did you mean %q?", join(at, key), name)
		case slices.Contains(seen, key):
			return fmt.Errorf("%s: given twice", join(at, key))
		default:
			seen = append(seen, key)
			err = p.value(join(at, key), typ)
		}
		if err != nil {
			return err
		}
	}
	_, err := p.dec.Token()
	return err
}

// field finds the field of struct type t that key names by its json tag,
// or one whose tag differs from key only in case. Embedded structs (the
// library's PluginConf) are not netns-pin's keys.
func field(t reflect.Type, key string) (name string, typ reflect.Type, ok bool) {
	for _, exact := range []bool{true, false} {
		for i := range t.NumField() {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if !sf.Anonymous && name != "" && name != "-" && (name == key || !exact && strings.EqualFold(name, key)) {
				return name, sf.Type, true
			}
		}
	}
	return "", nil, false
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
