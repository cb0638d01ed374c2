// Command netns-pinctl is the operator's command line of netns-pin on a
// node: what is pinned and what uses it, gc, release, check, the sweeper
// that finishes the teardowns runtimes abandon, and the installer that
// puts the CNI plugin (netns-pin) into the node's CNI bin folder. It ships
// in the same image as the plugin and is never exec'd by a runtime.
package main

import (
	"os"
	"runtime"

	"github.com/netns-pin/netns-pin/internal/buildinfo"
)

// Version and Commit are stamped at build time from git, as the plugin's
// (hack/version.sh); unstamped, main takes them from the build
// information.
var (
	Version = buildinfo.Unstamped
	Commit  = ""
)

// The main goroutine keeps the main thread to itself, so no goroutine that
// enters another namespace on its thread runs there: the main thread's
// namespaces are what /proc/<pid>/ns shows for the process, and `kubectl
// exec` into the sweep container joins host-exec's mount namespace by that
// path, which must stay the container's (runInHostMountNS).
func init() { runtime.LockOSThread() }

func main() {
	Version, Commit = buildinfo.Resolve(Version, Commit)
	os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
}
