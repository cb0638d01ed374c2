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

// What the model knows of the plugin and netns-pinctl. A new CNI verb,
// operator command or record state fails TestStepSetCoversThePlugin until
// the model learns it: a step in stepTable, or a state the checks
// understand.
var (
	// verbSteps: CNI verb (skel.CNIFuncs field) -> the step that runs it.
	verbSteps = map[string]string{"Add": "add", "Del": "del", "Check": "check", "GC": "gc", "Status": "status"}
	// commandSteps: operator command -> the step that runs it ("" for
	// commands that touch no state).
	commandSteps = map[string]string{"list": "cli-list", "inuse": "cli-inuse", "gc": "cli-gc", "release": "cli-release", "sweep": "sweep", "version": "",
		"install": "", "host-exec": "", "uninstall": "cli-uninstall"}
	// flagSteps: a command's flag -> the step that runs the command with
	// it ("" for a flag that only repeats what another step runs: sweep's
	// loop is rounds of --once).
	flagSteps = map[string]string{"gc --dry-run": "cli-gc-dry-run", "release --force": "cli-release-force",
		"sweep --interval": "", "sweep --once": "sweep", "install --cni-bin-dir": "",
		"uninstall --cni-bin-dir": "cli-uninstall", "uninstall --dry-run": "cli-uninstall"}
	// Record states: the model's pinState.
	wholeStates = []string{string(pinActive), string(pinDraining), string(pinUnpinned)}
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
	verbs := regexp.MustCompile(`(\w+):\s*cmd\w+`).FindAllSubmatch(funcs[1], -1)
	require.Len(t, verbs, len(verbSteps), "the CNI verbs of plugin/main.go and verbSteps")
	for _, m := range verbs {
		verb := string(m[1])
		step, ok := verbSteps[verb]
		require.True(t, ok, "CNI verb %s has no step in the model (verbSteps, stepTable)", verb)
		require.Contains(t, stepNames, step, "CNI verb %s", verb)
	}

	ctl := filepath.Join(filepath.Dir(buildPlugin(t, t.TempDir())), "netns-pinctl")
	// An unknown command prints the usage with the command list.
	r := host.RunCmd(time.Minute, nil, nil, ctl, "help")
	_, usage, ok := strings.Cut(r.Stderr, "commands:")
	usage, _, _ = strings.Cut(usage, "flags:")
	require.True(t, ok, "netns-pinctl help printed no command list: %s", r)
	flag := regexp.MustCompile(`--[a-z-]+`)
	seen := map[string]bool{}
	for _, line := range strings.Split(usage, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue // not a command line, or a continuation
		}
		fields := strings.Fields(line)
		cmd := fields[0]
		steps := []string{cmd}
		// the synopsis, up to the two spaces before the description
		synopsis, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		for _, f := range flag.FindAllString(synopsis, -1) {
			steps = append(steps, cmd+" "+f)
		}
		for _, key := range steps {
			seen[key] = true
			step, ok := commandSteps[key]
			if key != cmd {
				step, ok = flagSteps[key]
			}
			require.True(t, ok, "%q has no step in the model (commandSteps, flagSteps, stepTable)", key)
			if step != "" {
				require.Contains(t, stepNames, step, key)
			}
		}
	}
	// Every command and flag the model knows was found: a changed usage
	// text cannot make this test pass without looking.
	for key := range commandSteps {
		require.True(t, seen[key], "command %q is not in the usage any more:%s", key, usage)
	}
	for key := range flagSteps {
		require.True(t, seen[key], "%q is not in the usage any more:%s", key, usage)
	}

	files, err := filepath.Glob(filepath.Join(root, "netnsstore", "*.go"))
	require.NoError(t, err)
	stateConst := regexp.MustCompile(`\b[sS]tate[A-Z][A-Za-z]*\s*=\s*"([a-z-]+)"`) // StateActive, ...
	states := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range stateConst.FindAllSubmatch(data, -1) {
			state := string(m[1])
			require.True(t, slices.Contains(wholeStates, state),
				"record state %q (%s) is unknown to the model", state, filepath.Base(f))
			states++
		}
	}
	require.Equal(t, len(wholeStates), states, "record states found in netnsstore")
}
