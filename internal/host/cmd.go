package host

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// CmdTimeout is the deadline the helpers here (and hosttest.MustRun) give
// a host command such as ip(8): long enough for a loaded CI host, short enough that
// a hung command fails the test instead of the whole go test run.
const CmdTimeout = 60 * time.Second

// RandHex returns n random hex digits, for names of namespaces, links and
// sandboxes that must not collide with those of other tests or earlier runs.
func RandHex(n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)[:n]
}

// CmdResult is what a finished command printed. Its String names the
// command, so that a failure message says what ran.
type CmdResult struct {
	Cmd            string // name and arguments, space separated
	Stdout, Stderr string
	Err            error
}

func (r CmdResult) String() string {
	return fmt.Sprintf("%s: err=%v\nstdout:\n%s\nstderr:\n%s", r.Cmd, r.Err, r.Stdout, r.Stderr)
}

// RunCmd runs a command with a deadline, the given extra environment (added
// to this process's) and, when stdin is not nil, that standard input. A
// command that runs past the deadline is killed and its error says so.
func RunCmd(timeout time.Duration, extraEnv []string, stdin []byte, name string, args ...string) CmdResult {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (timed out after %s)", err, timeout)
	}
	return CmdResult{Cmd: name + " " + strings.Join(args, " "), Stdout: out.String(), Stderr: errb.String(), Err: err}
}

// CheckExecutable says why p is not an executable file, or returns nil. The
// suites check their binaries up front so that a missing build fails with a
// hint instead of an obscure CNI error.
func CheckExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s is missing", p)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// DiscoverCNI finds the CNI plugin folder (NETNS_PIN_CNI_PATH, by default
// <repoRoot>/.cache/cni/bin) and cnitool (NETNS_PIN_CNITOOL, by default
// <repoRoot>/.cache/bin/cnitool), both made absolute, and checks that the
// given plugins and cnitool are executables there.
func DiscoverCNI(repoRoot string, plugins ...string) (cniPath, cnitool string, err error) {
	cniPath = cmp.Or(os.Getenv("NETNS_PIN_CNI_PATH"), filepath.Join(repoRoot, ".cache", "cni", "bin"))
	cnitool = cmp.Or(os.Getenv("NETNS_PIN_CNITOOL"), filepath.Join(repoRoot, ".cache", "bin", "cnitool"))
	if cniPath, err = filepath.Abs(cniPath); err != nil {
		return "", "", err
	}
	if cnitool, err = filepath.Abs(cnitool); err != nil {
		return "", "", err
	}
	hint := "run `make tools build` (or `hack/tools.sh`), or set NETNS_PIN_CNI_PATH / NETNS_PIN_CNITOOL"
	for _, p := range plugins {
		if err := CheckExecutable(filepath.Join(cniPath, p)); err != nil {
			return "", "", fmt.Errorf("NETNS_PIN_CNI_PATH=%s: %w; %s", cniPath, err, hint)
		}
	}
	if err := CheckExecutable(cnitool); err != nil {
		return "", "", fmt.Errorf("NETNS_PIN_CNITOOL: %w; %s", err, hint)
	}
	return cniPath, cnitool, nil
}

// DiscoverCtl finds netns-pinctl, the operator's commands (NETNS_PIN_CTL,
// by default <repoRoot>/bin/netns-pinctl, which make build writes), made
// absolute.
func DiscoverCtl(repoRoot string) (string, error) {
	ctl, err := filepath.Abs(cmp.Or(os.Getenv("NETNS_PIN_CTL"), filepath.Join(repoRoot, "bin", "netns-pinctl")))
	if err != nil {
		return "", err
	}
	if err := CheckExecutable(ctl); err != nil {
		return "", fmt.Errorf("NETNS_PIN_CTL: %w; run `make build` or set NETNS_PIN_CTL", err)
	}
	return ctl, nil
}

// Poll calls cond every interval until it returns true or timeout passes,
// and returns whether cond became true: a wait for a condition, never for
// a time.
func Poll(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

// ReadEnvFile reads the KEY=VALUE lines of a file written by the setup
// scripts (hack/runtime/setup.sh, hack/kube/up.sh) and requires every key
// of want to be set.
func ReadEnvFile(path string, want ...string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	for _, k := range want {
		if env[k] == "" {
			return nil, fmt.Errorf("%s: %s is not set", path, k)
		}
	}
	return env, nil
}

// Tail is the last n lines of s, for logs in failure messages.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
