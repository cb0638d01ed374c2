package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Peak RSS needs a helper. Go starts children with clone(CLONE_VM|
// CLONE_VFORK), and execve records the hiwater RSS of the mm it leaves,
// which for a vfork child is the parent's: ru_maxrss of every child of the
// runner would be at least the runner's own RSS. rsswrap (C, a few hundred
// KiB) fork()s without CLONE_VM, execs the command, and reports the
// child's ru_maxrss from wait4 on fd 3. It is used in separate probe runs,
// never in the timed ones, so it adds nothing to the times.
const rsswrapC = `#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 2) return 127;
	fcntl(3, F_SETFD, FD_CLOEXEC);
	pid_t pid = fork();
	if (pid < 0) { perror("rsswrap: fork"); return 127; }
	if (pid == 0) {
		execv(argv[1], argv + 1);
		perror("rsswrap: execv");
		_exit(127);
	}
	int st;
	struct rusage ru;
	while (wait4(pid, &st, 0, &ru) < 0) {
		if (errno != EINTR) { perror("rsswrap: wait4"); return 127; }
	}
	dprintf(3, "%ld\n", ru.ru_maxrss);
	if (WIFEXITED(st)) return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}
`

// buildRSSWrap compiles rsswrap into dir; "" when no C compiler is there.
func buildRSSWrap(dir string) (string, error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			return "", nil
		}
	}
	src, bin := filepath.Join(dir, "rsswrap.c"), filepath.Join(dir, "rsswrap")
	if err := os.WriteFile(src, []byte(rsswrapC), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command(cc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s rsswrap.c: %v: %s", cc, err, out)
	}
	return bin, nil
}

// readRSS reads what rsswrap wrote to w, its end of the pipe r: the
// child's ru_maxrss (KiB).
func readRSS(w, r *os.File) (int64, error) {
	if err := w.Close(); err != nil { // EOF for r when rsswrap wrote nothing
		return 0, fmt.Errorf("rsswrap pipe: %w", err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	kib, perr := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if perr != nil {
		return 0, fmt.Errorf("rsswrap: no ru_maxrss reported (read: %v)", err)
	}
	return kib, nil
}

// rssFloor says how peak RSS is measured, and rsswrap's own (/bin/true's).
func (b *bench) rssFloor(ctx context.Context) string {
	if b.wrap == "" {
		return "no C compiler: peak RSS not measured"
	}
	x, _, err := call{bin: "/bin/true"}.run(ctx, b.wrap)
	if err != nil {
		logf("rsswrap /bin/true: %v", err)
		return "peak RSS is ru_maxrss under rsswrap (fork, exec, wait4), whose floor could not be measured"
	}
	return "peak RSS is ru_maxrss under rsswrap (fork, exec, wait4), whose floor (/bin/true) is " + fmtKiB(float64(x.rssKiB))
}
