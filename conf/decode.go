package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// decode fills c from a plugin entry with json.Unmarshal into Config,
// whose embedded types.PluginConf holds the library's keys (cniVersion,
// name, ipam, prevResult, ...) as the reference chained plugins read
// theirs. First checkKeys holds netns-pin's own keys to what
// docs/design.md §3 asks and encoding/json does not: a key that differs
// from one of them only in case ("pindir") is an error naming the key it
// resembles, where encoding/json would take it; so is one given twice. A
// value of the wrong kind is named by its path, without a list's index
// (holders.podName), as encoding/json gives it. Unknown keys are left
// alone.
func (c *Config) decode(data []byte) error {
	k := keyCheck{}
	if err := k.check(data, reflect.TypeFor[Config](), ""); err != nil {
		return err
	}
	err := json.Unmarshal(data, c)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: want %s, got %s", te.Field, kindName(te.Type), te.Value)
	}
	if err != nil {
		return err
	}
	c.prevResult, c.prevResults = k.prevResult, k.prevResults
	return nil
}

// keyCheck walks an entry's objects along the types they decode into.
type keyCheck struct {
	prevResult  json.RawMessage // the top-level "prevResult", as given
	prevResults int             // top-level keys of any case that the library reads as prevResult
}

// check refuses, in the value data decodes into type t (at path at), a key
// of t given twice and one that differs from a key of t only in case.
// What is not an object or a list of them where t wants one is
// json.Unmarshal's to refuse.
func (k *keyCheck) check(data []byte, t reflect.Type, at string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return nil
		}
		for i, item := range items {
			if err := k.check(item, t.Elem(), fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		dec := json.NewDecoder(bytes.NewReader(data))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return nil
		}
		keys := keysOf(t)
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil // json.Unmarshal names the syntax error
			}
			key := tok.(string)
			var value json.RawMessage
			if err := dec.Decode(&value); err != nil {
				return nil
			}
			if at == "" && strings.EqualFold(key, "prevResult") {
				k.prevResults++
				if key == "prevResult" {
					k.prevResult = value
				}
			}
			field, ok := keys[key]
			if !ok {
				for name := range keys {
					if strings.EqualFold(name, key) {
						return fmt.Errorf("%s: unknown key; keys are case-sensitive: did you mean %q?", join(at, key), name)
					}
				}
				continue // not netns-pin's
			}
			if seen[key] {
				return fmt.Errorf("%s: given twice", join(at, key))
			}
			seen[key] = true
			if err := k.check(value, field, join(at, key)); err != nil {
				return err
			}
		}
	}
	return nil
}

// keysOf maps the json names of t's own fields to their types. Embedded
// structs (the library's PluginConf) are not netns-pin's keys, and
// encoding/json reads no unexported field.
func keysOf(t reflect.Type) map[string]reflect.Type {
	keys := map[string]reflect.Type{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if name, _, _ := strings.Cut(sf.Tag.Get("json"), ","); sf.IsExported() && !sf.Anonymous && name != "" && name != "-" {
			keys[name] = sf.Type
		}
	}
	return keys
}

// kindName is what a value of type t is, in the words of the errors above.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings"
		}
		return "a list"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.Kind().String()
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}
