package nodecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckRefusesAnUntrustedAncestor: a stateDir and a pinDir that are
// themselves root-owned 0700 and 0755 but sit below a 0777 directory, or
// are reached through a symlinked parent, are errors naming that ancestor,
// with a fix for it rather than for the directory. (Before, check looked
// at the last component only and passed both.)
func TestCheckRefusesAnUntrustedAncestor(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "the directories must be root-owned: run as root")
	root := t.TempDir()
	open := filepath.Join(root, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o777))
	real := filepath.Join(root, "real")
	require.NoError(t, os.Mkdir(real, 0o755))
	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(real, link))
	for _, tc := range []struct{ parent, why, fix string }{
		{open, open + " (on the way to ", "chown root " + open + " && chmod go-w " + open},
		{link, link + " (on the way to ", "no symlink may be on the way (" + link + " is one)"},
	} {
		state, pins := filepath.Join(tc.parent, "state"), filepath.Join(tc.parent, "pins-root")
		require.NoError(t, os.MkdirAll(state, 0o700))
		require.NoError(t, os.MkdirAll(pins, 0o755))
		c := &checker{o: Options{StateDir: state, PinDir: pins, Proc: "/proc", Now: time.Now}, r: &Report{}}
		c.dirs()
		var got []Finding
		for _, f := range c.r.Findings {
			if f.Level == Error && (f.Check == "stateDir" || f.Check == "pinDir") && strings.Contains(f.Fix, tc.fix) {
				got = append(got, f)
				assert.Contains(t, f.What, tc.why)
			}
		}
		assert.Len(t, got, 2, "stateDir and pinDir below %s: %+v", tc.parent, c.r.Findings)
	}
}
