package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/netns-pin/netns-pin/internal/buildinfo"
)

// versionLine is what `netns-pinctl version` prints first: the version and
// the commit.
func versionLine() string { return buildinfo.String("netns-pinctl", Version, Commit) }

// pluginName is the CNI plugin's binary, beside netns-pinctl in the image
// and in the CNI bin folder once installed, and so its type in a chain.
const pluginName = "netns-pin"

// refuseGlobalFlags: a standalone command takes --json at most; a --conf
// or path flag given to it would be silently ignored, and no flag ever is.
func refuseGlobalFlags(g *globalFlags, cmd string, stderr io.Writer) bool {
	if g.configured() {
		fmt.Fprintf(stderr, "netns-pinctl %s: reads no network configuration: --conf and the path flags do not apply\n", cmd)
		return true
	}
	return false
}

// installedFile is one binary that install put into the CNI bin folder.
type installedFile struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// installReport is install's result, one JSON line with --json.
type installReport struct {
	Version   string          `json:"version"`
	Commit    string          `json:"commit,omitempty"`
	Dir       string          `json:"dir"`
	Installed []installedFile `json:"installed"`
}

// runInstall is `netns-pinctl install --cni-bin-dir DIR`, the installer
// DaemonSet's init container: it copies the CNI plugin beside this binary
// into the node's CNI bin folder atomically (nothing else: netns-pinctl
// itself stays in the image), then runs the installed plugin once to
// prove that the node can execute it (a noexec mount, a binary of another
// architecture) and that it is this build, before the runtime calls it for
// a pod.
func runInstall(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	const usage = "usage: netns-pinctl install --cni-bin-dir DIR [--json]"
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage) }
	dir := fs.String("cni-bin-dir", "", "the CNI bin folder to install into, as this container sees it (e.g. /host/opt/cni/bin)")
	fs.BoolVar(&g.json, "json", g.json, "print the result as one JSON line")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || *dir == "" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if refuseGlobalFlags(g, "install", stderr) {
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "netns-pinctl install: find this binary:", err)
		return 1
	}
	rep, err := install(self, *dir)
	if err != nil {
		fmt.Fprintln(stderr, "netns-pinctl install:", err)
		return 1
	}
	if g.json {
		_ = json.NewEncoder(stdout).Encode(rep)
		return 0
	}
	names := make([]string, len(rep.Installed))
	for i, f := range rep.Installed {
		names[i] = f.Name
	}
	fmt.Fprintf(stdout, "installed %s into %s: %s\n", strings.TrimPrefix(versionLine(), "netns-pinctl "), rep.Dir, strings.Join(names, ", "))
	return 0
}

// install copies the plugin beside self into dir and checks the installed
// binary runs and is this build.
func install(self, dir string) (*installReport, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("--cni-bin-dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("--cni-bin-dir %s: not a directory", dir)
	}
	dst := filepath.Join(dir, pluginName)
	f, err := installFile(filepath.Join(filepath.Dir(self), pluginName), dst)
	if err != nil {
		return nil, err
	}
	// A node agent in the CNI bin folder is a leftover that nothing execs:
	// the agent runs in a pod of its own.
	if err := os.Remove(filepath.Join(dir, "netns-pin-agent")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove the old netns-pin-agent: %w", err)
	}
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", dir, err)
	}
	if err := checkInstalled(dst); err != nil {
		return nil, err
	}
	return &installReport{Version: Version, Commit: Commit, Dir: dir, Installed: []installedFile{f}}, nil
}

// installFile copies src to dst the way a running runtime never notices:
// a temporary file in dst's folder, written, mode 0755, fsync'ed, then
// renamed over dst. A runtime exec'ing the old binary at that moment runs
// the old one whole; the next exec runs the new one whole.
func installFile(src, dst string) (installedFile, error) {
	out := installedFile{Name: filepath.Base(dst), Path: dst}
	in, err := os.Open(src)
	if err != nil {
		return out, err
	}
	defer in.Close()
	if st, err := os.Stat(dst); err == nil {
		if sst, err := in.Stat(); err == nil && os.SameFile(st, sst) {
			return out, fmt.Errorf("%s: the target is this binary itself", dst)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+out.Name+".*.tmp")
	if err != nil {
		return out, fmt.Errorf("install %s: %w", dst, err)
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if out.Size, err = io.Copy(tmp, in); err != nil {
		return out, fmt.Errorf("install %s: write %s: %w", dst, tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		return out, fmt.Errorf("install %s: %w", dst, err)
	}
	if err := tmp.Sync(); err != nil {
		return out, fmt.Errorf("install %s: fsync %s: %w", dst, tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return out, fmt.Errorf("install %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return out, fmt.Errorf("install %s: %w", dst, err)
	}
	tmp = nil
	return out, nil
}

// checkInstalled runs the installed plugin without CNI_COMMAND, which
// prints its name, version and commit first on stderr, and compares them
// with this build's.
func checkInstalled(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{}
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the installed %s does not run here: %w: %s", bin, err, strings.TrimSpace(errOut.String()))
	}
	want := buildinfo.String(pluginName, Version, Commit)
	first, _, _ := strings.Cut(errOut.String(), "\n")
	if got, _, _ := strings.Cut(first, ": "); got != want {
		return fmt.Errorf("the installed %s says %q, not %q", bin, got, want)
	}
	return nil
}
