package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sample is one measured run: wall time from fork to reap (what a runtime
// waits for) and, under rsswrap, the child's peak RSS (ru_maxrss, KiB).
type sample struct {
	d   time.Duration
	rss float64
}

// result is what one command of a comparison measured: t[f] the times (ns)
// of its figure f (ADD, DEL, or ADD+DEL), rss the peak RSS of its probe runs.
type result struct {
	t   [][]float64
	rss []float64
}

// probeRuns is how many rounds run under rsswrap before the timed ones:
// the peak RSS, and a warm-up.
const probeRuns = 3

// interleave runs probeRuns and then rounds rounds of n commands, one
// after the other in an order that rotates every round (A B C, B C A, ...)
// so that load from elsewhere on the machine hits every command alike.
// one runs command i (under rsswrap wrap unless it is "") and returns a
// sample of each of its figures.
func (b *bench) interleave(ctx context.Context, n, rounds, figures int, one func(ctx context.Context, i int, wrap string) ([]sample, error)) ([]result, error) {
	res := make([]result, n)
	for i := range res {
		res[i].t = make([][]float64, figures)
	}
	for r := range probeRuns + rounds {
		wrap := ""
		if r < probeRuns {
			wrap = b.wrap
		}
		for k := range n {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			i := (k + r) % n
			ss, err := one(ctx, i, wrap)
			if err != nil {
				return nil, fmt.Errorf("round %d: %w", r, err)
			}
			for f, s := range ss {
				if wrap != "" {
					res[i].rss = append(res[i].rss, s.rss)
				} else {
					res[i].t[f] = append(res[i].t[f], float64(s.d))
				}
			}
		}
	}
	return res, nil
}

// rounds scales a round count, never below 3.
func (b *bench) rounds(n int) int { return max(3, int(math.Round(float64(n)*b.cfg.scale))) }

// baseEnv is the runner's environment without CNI variables, which a
// runtime sets per call.
var baseEnv = slices.DeleteFunc(os.Environ(), func(kv string) bool {
	return strings.HasPrefix(kv, "CNI_") || strings.HasPrefix(kv, "NETCONFPATH=")
})

// exec runs bin as a runtime runs a plugin (env added to baseEnv, stdin),
// under rsswrap wrap unless it is "", and returns its sample and stdout.
// A hung run fails after 30 s.
func (b *bench) exec(ctx context.Context, wrap, bin string, args, env []string, stdin []byte) (sample, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	argv, rssFile := append([]string{bin}, args...), filepath.Join(b.cfg.work, "rss")
	if wrap != "" {
		argv = append([]string{wrap, rssFile}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Stdin = append(slices.Clip(baseEnv), env...), bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	s := sample{d: time.Since(t0)}
	if err == nil && wrap != "" {
		var data []byte
		if data, err = os.ReadFile(rssFile); err == nil {
			s.rss, err = strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
		}
	}
	if err != nil {
		return s, nil, fmt.Errorf("%s: %w\nstdout: %s\nstderr: %s", strings.Join(argv, " "), err,
			bytes.TrimSpace(stdout.Bytes()), bytes.TrimSpace(stderr.Bytes()))
	}
	return s, stdout.Bytes(), nil
}

// Peak RSS needs a helper. Go starts children with clone(CLONE_VM|
// CLONE_VFORK), and execve records the hiwater RSS of the mm it leaves,
// which for a vfork child is the parent's: ru_maxrss of every child of the
// runner would be at least the runner's own RSS. rsswrap (C, a few hundred
// KiB) fork()s without CLONE_VM, execs the command and writes the child's
// ru_maxrss from wait4 to the file argv[1]. Only probe runs use it.
const rsswrapC = `#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc < 3) return 127;
	pid_t pid = fork();
	if (pid == 0) {
		execv(argv[2], argv + 2);
		perror("rsswrap: execv");
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (pid < 0 || wait4(pid, &st, 0, &ru) < 0) { perror("rsswrap"); return 127; }
	FILE *f = fopen(argv[1], "w");
	if (!f || fprintf(f, "%ld\n", ru.ru_maxrss) < 0 || fclose(f)) { perror(argv[1]); return 127; }
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
`

// buildRSSWrap compiles rsswrap into dir with cc.
func buildRSSWrap(dir string) (string, error) {
	src, bin := filepath.Join(dir, "rsswrap.c"), filepath.Join(dir, "rsswrap")
	if err := os.WriteFile(src, []byte(rsswrapC), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command("cc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc rsswrap.c: %v: %s", err, out)
	}
	return bin, nil
}

// median of v (not modified); NaN when empty.
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s) == 0 {
		return math.NaN()
	}
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

func ms(ns float64) string     { return fmt.Sprintf("%.2f ms", ns/1e6) }
func mib(kib float64) string   { return fmt.Sprintf("%.1f MiB", kib/1024) }
func ratio(r float64) string   { return fmt.Sprintf("%.2fx", r) }
func plusMs(ns float64) string { return fmt.Sprintf("%+.2f ms", ns/1e6) }

// sameJSON reports whether two JSON documents are equal as values.
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
