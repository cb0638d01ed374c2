package hosttest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// MustRun runs a command (host.CmdTimeout) and fails the test when it fails; it
// returns the command's standard output.
func MustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	r := host.RunCmd(host.CmdTimeout, nil, nil, name, args...)
	require.NoError(t, r.Err, "%s", r)
	return r.Stdout
}
