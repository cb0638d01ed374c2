package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// make chart twice gives the same package byte for byte: every entry at
// the commit's time, mode 0644, owner 0:0, named under netns-pin/, and the
// package's name is the chart's version.
func TestChartPackageReproducible(t *testing.T) {
	helm := helmBin(t)
	pack := func() (string, []byte) {
		dir := t.TempDir()
		r := host.RunCmd(2*time.Minute, []string{"CHART_DIR=" + dir, "HELM=" + helm}, nil, "../hack/chart.sh")
		require.NoError(t, r.Err, "%s", r)
		tgz, digest, ok := strings.Cut(strings.TrimSpace(r.Stdout), " ")
		require.True(t, ok, "make chart printed %q", r.Stdout)
		data, err := os.ReadFile(tgz)
		require.NoError(t, err)
		return filepath.Base(tgz) + " " + digest, data
	}
	a, dataA := pack()
	b, dataB := pack()
	assert.Equal(t, a, b, "the same commit, the same digest")
	assert.True(t, bytes.Equal(dataA, dataB), "the two packages differ")
	assert.True(t, strings.HasPrefix(a, "netns-pin-"+readChartMeta(t).Version+".tgz sha256:"), a)

	epoch, err := strconv.ParseInt(gitOut(t, "log", "-1", "--format=%ct", "HEAD"), 10, 64)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(dataA))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		assert.Equal(t, epoch, h.ModTime.Unix(), "%s: the commit's time", h.Name)
		assert.Equal(t, int64(0o644), h.Mode, h.Name)
		assert.Equal(t, 0, h.Uid, h.Name)
		assert.True(t, strings.HasPrefix(h.Name, "netns-pin/"), h.Name)
	}
	for _, want := range []string{"netns-pin/Chart.yaml", "netns-pin/values.yaml", "netns-pin/values.schema.json", "netns-pin/templates/NOTES.txt"} {
		assert.Contains(t, names, want)
	}
}
