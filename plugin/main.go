// Command netns-pin is a chained CNI plugin that pins the network namespace
// of a Ceph holder pod at a well-known path and refuses to release it while
// Ceph clients still use it. Run with CNI_COMMAND set it speaks CNI; run
// with a subcommand it is the operator's command line.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/buildinfo"
)

// Version and Commit are stamped at build time from git (hack/version.sh:
// -ldflags "-X main.Version=<git describe> -X main.Commit=<commit>");
// unstamped, main takes them from the build information
// (internal/buildinfo).
var (
	Version = buildinfo.Unstamped
	Commit  = ""
)

// supportedVersions: 0.3.x where the library allows it; CHECK needs 0.4.0,
// GC and STATUS 1.1.0 (skel enforces both).
var supportedVersions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

func main() {
	Version, Commit = buildinfo.Resolve(Version, Commit)
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
	}
	if err := limitStdin(); err != nil {
		_ = err.Print()
		os.Exit(1)
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		GC:     cmdGC,
		Status: cmdStatus,
	}, supportedVersions, "netns-pin "+Version+": pins Ceph holder pods' network namespaces")
}

// limitStdin refuses a configuration over conf.MaxConfigSize before skel
// reads it whole into memory, and hands skel the bytes that were read.
// Nothing to do when stdin is known to hold no more than that.
func limitStdin() *types.Error {
	if os.Getenv("CNI_COMMAND") == "VERSION" || pipeHoldsAtMost(0, conf.MaxConfigSize) {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(os.Stdin, conf.MaxConfigSize+1))
	if err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("read configuration: %v", err), "")
	}
	if len(data) > conf.MaxConfigSize {
		return types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("configuration is over the %d byte limit", conf.MaxConfigSize), "")
	}
	f, err := replayFile(data)
	if err != nil {
		return types.NewError(types.ErrIOFailure, fmt.Sprintf("hand the configuration on: %v", err), "")
	}
	os.Stdin = f
	return nil
}

// pipeHoldsAtMost reports whether fd is a pipe whose writers are gone
// (POLLHUP) and that holds at most n bytes: all there is to read, known
// without reading it. That is how a runtime's exec hands a plugin its
// configuration (Go's os/exec writes stdin whole and closes it, usually
// before the plugin's main runs), and then skel may read stdin itself:
// the bounded read and the replay below cost a non-holder pod 2-3% of
// its whole ADD (make bench). A writer still there, or anything but a
// pipe, takes the bounded read.
func pipeHoldsAtMost(fd, n int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if k, err := unix.Poll(fds, 0); err != nil || k != 1 || fds[0].Revents&unix.POLLHUP == 0 {
		return false
	}
	held, err := unix.IoctlGetInt(fd, unix.TIOCINQ) // FIONREAD
	return err == nil && held <= n
}

// replayFile is a file that reads back data, for skel, which reads
// os.Stdin: a pipe that already holds all of data, its writer closed.
// Not os.Pipe with a writing goroutine as such: its descriptors join the
// runtime's poller (epoll, eventfd) and the goroutine wakes another
// thread, which cost every pod about 10% of this process's time
// (make bench). Not a memfd either: its first write allocates shared
// memory, which is slower than a pipe's page.
func replayFile(data []byte) (*os.File, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	// Blocking descriptors: os.NewFile keeps them out of the poller.
	r, w := os.NewFile(uintptr(p[0]), "stdin"), os.NewFile(uintptr(p[1]), "stdin-writer")
	if len(data) > minPipeSize {
		// Up to conf.MaxConfigSize, the default fs.pipe-max-size; a pipe
		// that cannot grow (a user over its pipe quota) is fed as it is
		// read, by a goroutine, rather than block this write for ever.
		if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, len(data)); err != nil {
			go func() {
				_, _ = w.Write(data)
				w.Close()
			}()
			return r, nil
		}
	}
	_, err := w.Write(data)
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("write: %w", err)
	}
	return r, nil
}

// minPipeSize is what every new pipe holds on Linux: 16 pages, but 2 for
// a user over fs.pipe-user-pages-soft (fs/pipe.c, PIPE_MIN_DEF_BUFFERS).
// Configurations are smaller than that; a larger one asks for room first.
const minPipeSize = 2 << 12
