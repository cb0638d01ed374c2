package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/netns-pin/netns-pin/internal/nsinfo"
)

// runHostExec is `netns-pinctl host-exec [--] COMMAND [ARGS...]`:
// netns-pinctl COMMAND run in the host's mount namespace, what `nsenter
// --target 1 --mount -- netns-pinctl COMMAND` would do if the binary were
// on the host and the image had nsenter. The sweeper runs this way, and so
// does an operator through `kubectl exec` into its container: pins are
// host mounts, and the chain's plugins and the CNI caches are the host's.
// The host's mount namespace is PID 1's, or kthreadd's (PID 2) where PID
// 1's namespace files cannot be read (nsinfo.HostMountNS); it needs
// hostPID and CAP_SYS_ADMIN with CAP_SYS_CHROOT.
func runHostExec(g *globalFlags, args []string, stdout, stderr io.Writer) int {
	const usage = "usage: netns-pinctl host-exec [--] COMMAND [ARGS...]"
	fs := flag.NewFlagSet("host-exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 || g.json || fs.Arg(0) == "host-exec" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if refuseGlobalFlags(g, "host-exec", stderr) {
		return 2
	}
	ref, same, err := nsinfo.HostMountNS()
	if err == nil && same {
		return runCLI(fs.Args(), stdout, stderr)
	}
	code := 0
	if err == nil {
		code, err = runInHostMountNS(ref, fs.Args(), stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "netns-pinctl host-exec %s: %v\n", fs.Arg(0), err)
		return 127
	}
	return code
}

// runInHostMountNS runs this binary with args as a child in the mount
// namespace of ref (a /proc/<pid> of the host), forwards the signals that
// end it, and returns its exit code. The child is started from a thread
// that entered that namespace: setns(CLONE_NEWNS) refuses a thread that
// shares its filesystem attributes (root, cwd) with others, as every
// thread of a Go program does, so the thread first takes its own copy
// (unshare CLONE_FS). That thread is never the main thread (main.go's
// init keeps it), so this process stays in its own mount namespace, where
// `kubectl exec` into its container still finds the image's files.
func runInHostMountNS(ref string, args []string, stdout, stderr io.Writer) (int, error) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	defer signal.Stop(sigs)
	started, done := make(chan *exec.Cmd, 1), make(chan error, 1)
	go func() {
		// The thread that started the child waits for it: its parent-death
		// signal follows this thread, which stays locked and ends with the
		// goroutine, never to run other goroutines in the host's namespace.
		runtime.LockOSThread()
		cmd := exec.Command("/proc/self/exe", args...)
		cmd.Args[0] = "netns-pinctl"
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err := enterMountNS(ref)
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			done <- err
			return
		}
		started <- cmd
		done <- cmd.Wait()
	}()
	var cmd *exec.Cmd
	var pending []os.Signal
	for {
		select {
		case cmd = <-started:
			for _, sig := range pending {
				_ = cmd.Process.Signal(sig)
			}
		case sig := <-sigs:
			if cmd == nil {
				pending = append(pending, sig)
			} else {
				_ = cmd.Process.Signal(sig)
			}
		case err := <-done:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				return 0, err
			}
			return cmd.ProcessState.ExitCode(), nil
		}
	}
}

// enterMountNS moves the calling (locked) thread into ref's mount
// namespace.
func enterMountNS(ref string) error {
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
	return nil
}
