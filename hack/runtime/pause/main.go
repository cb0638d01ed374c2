// Command pause is the pod sandbox ("infra") process of the runtime end to
// end suite (test/runtime): the pause image's only binary. It holds the pod's
// namespaces, reaps the zombies it inherits as PID 1, and exits on SIGTERM or
// SIGINT, like Kubernetes' pause. It is built static (CGO_ENABLED=0) and
// packed into an OCI image by hack/runtime/ociimage, because no registry is
// reachable from the test machines.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (netns-pin test image)")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", s)
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
