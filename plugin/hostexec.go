package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// runHostExec is `netns-pin host-exec [--] PROGRAM [ARGS...]`: PROGRAM,
// a path on the host, exec'd in the host's mount namespace, what
// `nsenter --target 1 --mount -- PROGRAM ARGS` does, for the installer
// image, which has no shell and no nsenter. The sweeper runs the installed
// netns-pin this way: pins are host mounts, and the chain's plugins and
// the CNI caches it uses for an abandoned teardown are the host's. The
// host's mount namespace is PID 1's, or kthreadd's (PID 2) where PID 1's
// namespace files cannot be read (nsinfo.HostMountNS); it needs hostPID
// and CAP_SYS_ADMIN with CAP_SYS_CHROOT (a privileged container).
func runHostExec(g *globalFlags, args []string, _, stderr io.Writer) int {
	const usage = "usage: netns-pin host-exec [--] PROGRAM [ARGS...]"
	fs := flag.NewFlagSet("host-exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 || g.json {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if refuseGlobalFlags(g, "host-exec", stderr) {
		return 2
	}
	argv := fs.Args()
	err := hostExec(argv)
	fmt.Fprintf(stderr, "netns-pin host-exec %s: %v\n", argv[0], err)
	return 127
}

// hostExec enters the host's mount namespace on this thread and execs
// argv there; it returns only on failure. setns(CLONE_NEWNS) refuses a
// thread that shares its filesystem attributes (root, cwd) with others,
// as every thread of a Go program does, so this thread first takes its
// own copy (unshare CLONE_FS); execve then makes this thread's
// namespaces the process's. The thread stays locked: if the exec fails it
// must not run other goroutines.
func hostExec(argv []string) error {
	ref, same, err := nsinfo.HostMountNS()
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	if !same {
		fd, err := unix.Open(ref+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the host mount namespace: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unshare CLONE_FS: %w", err)
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("enter the host mount namespace (%s/ns/mnt): %w", ref, err)
		}
	}
	return syscall.Exec(argv[0], argv, os.Environ())
}
