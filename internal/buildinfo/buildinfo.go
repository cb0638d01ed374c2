// Package buildinfo names the version and commit of a netns-pin binary
// however it was built: the link-time stamp of make (hack/version.sh),
// else what the Go toolchain recorded in the binary: the module version
// of `go install ...@version`, the commit of a build in a git checkout.
package buildinfo

import (
	"cmp"
	"fmt"
	"runtime/debug"
)

// Unstamped is the version a binary carries until -ldflags stamps it.
const Unstamped = "dev"

// Resolve returns the stamped version and commit when there are, else
// those the binary's build information gives.
func Resolve(version, commit string) (string, string) {
	if version != "" && version != Unstamped && commit != "" {
		return version, commit // make's stamp: every exec of the plugin skips the read
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, commit
	}
	return fromBuildInfo(bi, version, commit)
}

func fromBuildInfo(bi *debug.BuildInfo, version, commit string) (string, string) {
	var revision string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	commit = cmp.Or(commit, revision)
	if version != "" && version != Unstamped {
		return version, commit
	}
	switch {
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		version = bi.Main.Version // a module build: its version names the commit when pseudo
	case revision != "":
		version = Unstamped + "-" + revision[:min(len(revision), 12)]
		if modified {
			version += "-dirty"
		}
	default:
		version = Unstamped
	}
	return version, commit
}

// String is "<name> <version>", with " (commit <commit>)" when known.
func String(name, version, commit string) string {
	if commit == "" {
		return fmt.Sprintf("%s %s", name, version)
	}
	return fmt.Sprintf("%s %s (commit %s)", name, version, commit)
}
