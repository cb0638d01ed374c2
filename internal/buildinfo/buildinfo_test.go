package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromBuildInfo(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}
	dirty := []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name                    string
		main                    string
		settings                []debug.BuildSetting
		stampedV, stampedC      string
		wantVersion, wantCommit string
	}{
		{"stamped by make", "(devel)", vcs, "v0.1.0-3-gabcdef0", "abcdef0", "v0.1.0-3-gabcdef0", "abcdef0"},
		{"stamped version, commit from git", "(devel)", vcs, "v0.1.0", "", "v0.1.0", rev},
		{"go build in a checkout", "(devel)", vcs, Unstamped, "", "dev-0123456789ab", rev},
		{"go build in a checkout with changes", "(devel)", dirty, Unstamped, "", "dev-0123456789ab-dirty", rev},
		{"go install module@version", "v0.1.0", nil, Unstamped, "", "v0.1.0", ""},
		{"go install of a pseudo-version", "v0.0.0-20261206010203-0123456789ab", nil, Unstamped, "", "v0.0.0-20261206010203-0123456789ab", ""},
		{"nothing known", "(devel)", nil, Unstamped, "", Unstamped, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/netns-pin/netns-pin", Version: tc.main}, Settings: tc.settings}
			v, c := fromBuildInfo(bi, tc.stampedV, tc.stampedC)
			assert.Equal(t, tc.wantVersion, v)
			assert.Equal(t, tc.wantCommit, c)
		})
	}
	assert.Equal(t, "netns-pin v1 (commit abc)", String("netns-pin", "v1", "abc"))
	assert.Equal(t, "netns-pin dev", String("netns-pin", "dev", ""))
}

// A plain `go build` of a binary in this git checkout names the checkout's
// commit in --version, in its version and as the commit (CI builds with GOFLAGS=-buildvcs=false: the flag
// on the command line wins).
func TestPlainBuildNamesItsCommit(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err, "the test runs in a git checkout")
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "netns-pin-controller")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/netns-pin-controller")
	build.Dir = strings.TrimSpace(string(root))
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	out, err = exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	commit := strings.TrimSpace(string(head))
	// Go 1.24 and later give a checkout's build a pseudo-version with the
	// commit's first 12 digits (v0.0.0-<time>-<commit>[+dirty])
	assert.Regexp(t, `^netns-pin-controller \S*`+commit[:12]+`\S* \(commit `+commit+`\)\n$`, string(out))
}
