package conf

import (
	"fmt"
	"slices"
	"strings"
)

// fieldTemplate is the template language of links and holder rules: text
// with {{.Field}} placeholders (spaces inside the braces allowed) for a
// fixed set of fields, and nothing else. It reads like a Go template, and
// every template the fields allow renders as text/template would render
// it, without linking text/template (and reflect) into the binary that
// every pod's ADD and DEL execs.
type fieldTemplate struct {
	parts []templatePart
}

// templatePart is literal text, or a field when field is not empty.
type templatePart struct {
	text, field string
}

// parseFieldTemplate parses s, accepting only the given field names.
func parseFieldTemplate(s string, fields ...string) (fieldTemplate, error) {
	var t fieldTemplate
	for rest := s; rest != ""; {
		open := strings.Index(rest, "{{")
		if open < 0 {
			t.parts = append(t.parts, templatePart{text: rest})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, templatePart{text: rest[:open]})
		}
		end := strings.Index(rest[open:], "}}")
		if end < 0 {
			return fieldTemplate{}, fmt.Errorf("unclosed {{ in %q", s)
		}
		action := strings.TrimSpace(rest[open+2 : open+end])
		name, ok := strings.CutPrefix(action, ".")
		if !ok || !slices.Contains(fields, name) {
			return fieldTemplate{}, fmt.Errorf("{{%s}} in %q: want one of {{.%s}}", action, s, strings.Join(fields, "}}, {{."))
		}
		t.parts = append(t.parts, templatePart{field: name})
		rest = rest[open+end+2:]
	}
	return t, nil
}

// expand renders the template with value(field) for each placeholder.
func (t fieldTemplate) expand(value func(field string) string) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.field != "" {
			b.WriteString(value(p.field))
		} else {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// fieldsBefore returns the fields that come before the first occurrence of
// sep in the template's literal text, and whether sep occurs there at all.
func (t fieldTemplate) fieldsBefore(sep string) (fields []string, found bool) {
	for _, p := range t.parts {
		if p.field != "" {
			fields = append(fields, p.field)
			continue
		}
		if strings.Contains(p.text, sep) {
			return fields, true
		}
	}
	return fields, false
}
