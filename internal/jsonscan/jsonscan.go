// Package jsonscan walks the members of a JSON object that is already
// known to be valid, without reflection. encoding/json builds its cache of
// a struct type's fields on first use, in every process anew; for the few
// types a CNI call decodes that cache cost more than the decoding, and
// every ADD and DEL is a fresh process (docs/performance.md).
package jsonscan

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// NotObjectError is Members' error for a value that is no object.
type NotObjectError struct {
	Kind string // "array", "string", "bool", "number" or "nothing"
}

func (e *NotObjectError) Error() string { return "want an object, got " + e.Kind }

// Members calls fn with each member of the JSON object raw, in order: its
// key unquoted and its value as raw JSON, and returns the first error fn
// returns. raw must be valid JSON (json.Valid); null, alone with white
// space around it as encoding/json takes it, is an object without members.
// Members scans rather than using json.Decoder's tokens, whose code every
// CNI call would load for a few keys.
func Members(raw []byte, fn func(key string, val []byte) error) error {
	i := skipSpace(raw, 0)
	switch {
	case i < len(raw) && raw[i] == '{':
	case IsNull(raw[i:skipValue(raw, i)]) && skipSpace(raw, skipValue(raw, i)) == len(raw):
		return nil
	default:
		return &NotObjectError{Kind: kindAt(raw, i)}
	}
	i = skipSpace(raw, i+1)
	for i < len(raw) && raw[i] == '"' {
		end := skipValue(raw, i)
		key, err := unquote(raw[i:end])
		if err != nil {
			return err
		}
		i = skipSpace(raw, end)
		i = skipSpace(raw, i+1) // the colon
		end = skipValue(raw, i)
		if err := fn(key, raw[i:end]); err != nil {
			return err
		}
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return nil
}

// IsNull reports whether a value Members handed over is null.
func IsNull(val []byte) bool { return string(val) == "null" }

// skipValue returns the end of the valid JSON value that starts at i.
func skipValue(raw []byte, i int) int {
	depth := 0
	for ; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the object or array around a scalar
				return i
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// unquote returns the string of a JSON string literal.
func unquote(lit []byte) (string, error) {
	if bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return "", fmt.Errorf("key %s: %w", lit, err)
	}
	return s, nil
}

// kindAt names the JSON kind of the value that starts at i.
func kindAt(raw []byte, i int) string {
	if i >= len(raw) {
		return "nothing"
	}
	switch raw[i] {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	}
	return "number"
}
