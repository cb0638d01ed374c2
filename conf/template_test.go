package conf

import (
	"bytes"
	"regexp"
	"testing"
	"text/template"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every template the field language accepts renders as text/template
// renders it; everything else is refused with the fields it allows.
func TestFieldTemplateRendersAsTextTemplate(t *testing.T) {
	data := struct{ Namespace, Name string }{"rook-ceph", "my-cluster"}
	for _, s := range []string{
		"{{.Namespace}}/{{.Name}}.net",
		"/var/lib/kubelet/plugins/rook-ceph.rbd.csi.ceph.com/{{.Namespace}}.net.ns",
		"{{ .Name }}-{{.Name}}",
		"plain/path",
		"a}}b",
		"",
	} {
		ft, err := parseFieldTemplate(s, "Namespace", "Name")
		require.NoError(t, err, s)
		got := ft.expand(func(f string) string {
			if f == "Namespace" {
				return data.Namespace
			}
			return data.Name
		})
		var want bytes.Buffer
		require.NoError(t, template.Must(template.New("").Option("missingkey=error").Parse(s)).Execute(&want, data))
		assert.Equal(t, want.String(), got, s)
	}
	for _, s := range []string{"{{.Nope", "{{.Cluster}}", `{{printf "%s" .Name}}`, "{{Name}}", "{{.}}", "{{/* c */}}"} {
		_, err := parseFieldTemplate(s, "Namespace", "Name")
		assert.ErrorContains(t, err, s[:3], s)
	}
	_, err := parseFieldTemplate("{{.Cluster}}", "Namespace", "Name")
	assert.ErrorContains(t, err, "want one of {{.Namespace}}, {{.Name}}")
}

// The written-out DNS-1123 checks accept exactly what Kubernetes' regular
// expressions accept.
func FuzzDNSNamesMatchKubernetesRegexps(f *testing.F) {
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	subdomain := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	for _, s := range []string{"rook-ceph", "a", "-a", "a-", "a.b", "a..b", ".a", "A", "my-cluster.v2", "", "a_b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 300 {
			return
		}
		assert.Equal(t, len(s) <= 63 && label.MatchString(s), validateLabel(s) == nil, "label %q", s)
		assert.Equal(t, len(s) <= 253 && subdomain.MatchString(s), validateSubdomain(s) == nil, "subdomain %q", s)
	})
}
