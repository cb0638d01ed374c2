package model

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
)

// What the model knows of the plugin. A new CNI verb, operator command or
// record state fails TestStepSetCoversThePlugin until the model learns it:
// a step in stepTable, or a state the checks understand.
var (
	// verbSteps: CNI verb (skel.CNIFuncs field) -> the step that runs it.
	verbSteps = map[string]string{"Add": "add", "Del": "del", "Check": "check", "GC": "gc", "Status": "status"}
	// commandSteps: operator command -> the step that runs it ("" for
	// commands that touch no state).
	commandSteps = map[string]string{"list": "cli-list", "inuse": "cli-inuse", "gc": "cli-gc", "release": "cli-release", "sweep": "sweep", "version": ""}
	// Record states: whole ones are the model's pinState; transient ones
	// exist only between a crash and the next repairing operation.
	wholeStates     = []string{string(pinActive), string(pinDraining), string(pinUnpinned)}
	transientStates = []string{"intent", "releasing"}
)

func TestStepSetCoversThePlugin(t *testing.T) {
	root := repoRoot(t)
	stepNames := make([]string, len(stepTable))
	for i, s := range stepTable {
		stepNames[i] = s.name
	}

	main, err := os.ReadFile(filepath.Join(root, "plugin", "main.go"))
	require.NoError(t, err)
	funcs := regexp.MustCompile(`(?s)skel\.CNIFuncs\{(.*?)\}`).FindSubmatch(main)
	require.NotNil(t, funcs, "plugin/main.go: no skel.CNIFuncs")
	for _, m := range regexp.MustCompile(`(\w+):\s*cmd\w+`).FindAllSubmatch(funcs[1], -1) {
		verb := string(m[1])
		step, ok := verbSteps[verb]
		require.True(t, ok, "CNI verb %s has no step in the model (verbSteps, stepTable)", verb)
		require.Contains(t, stepNames, step, "CNI verb %s", verb)
	}

	bin := buildPlugin(t, t.TempDir())
	// An unknown command prints the usage with the command list.
	r := host.RunCmd(time.Minute, nil, nil, bin, "help")
	_, usage, ok := strings.Cut(r.Stderr, "commands:")
	usage, _, _ = strings.Cut(usage, "flags:")
	require.True(t, ok, "netns-pin without arguments printed no command list: %s", r)
	for _, line := range strings.Split(usage, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue // not a command line, or a continuation
		}
		cmd := strings.Fields(line)[0]
		step, ok := commandSteps[cmd]
		require.True(t, ok, "command %q has no step in the model (commandSteps, stepTable)", cmd)
		if step != "" {
			require.Contains(t, stepNames, step, "command %s", cmd)
		}
	}

	files, err := filepath.Glob(filepath.Join(root, "netnsstore", "*.go"))
	require.NoError(t, err)
	stateConst := regexp.MustCompile(`\bState\s*=\s*"([a-z-]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range stateConst.FindAllSubmatch(data, -1) {
			state := string(m[1])
			require.True(t, slices.Contains(wholeStates, state) || slices.Contains(transientStates, state),
				"record state %q (%s) is unknown to the model", state, filepath.Base(f))
		}
	}
}
