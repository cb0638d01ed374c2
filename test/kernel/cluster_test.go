package kernel

// The Ceph cluster (hack/ceph/up.sh, as test/ceph brings it up) and what the
// kernel clients need on it: an rbd pool, a user with `profile rbd`, images.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

// cluster is a running cluster as described by <dir>/env (see up.sh).
type cluster struct {
	dir, conf, client, fs, fsid string
	netns, bridge, subnet       string
	monIP, rangeStart, rangeEnd string
	ours                        bool
	upTime                      time.Duration
}

const (
	rbdPool = "rbd"
	rbdUser = "netnspin-rbd"
)

func repoRoot() string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return root
}

// startCluster reads the env file of the folder named by the variable
// dirVar, or brings a cluster up in a temporary folder with the extra
// environment env (CEPH_IPV6_PREFIX=... for an IPv6 cluster).
func startCluster(dirVar string, env ...string) (*cluster, string, error) {
	if dir := os.Getenv(dirVar); dir != "" {
		c, err := loadCluster(dir)
		if err != nil {
			return nil, "", fmt.Errorf("%s=%s: %w", dirVar, dir, err)
		}
		return c, "", nil
	}
	dir, err := os.MkdirTemp("", "netns-pin-kernel-ceph-")
	if err != nil {
		return nil, "", err
	}
	start := time.Now()
	out, err := runScriptEnv(6*time.Minute, env, filepath.Join(repoRoot(), "hack", "ceph", "up.sh"), dir)
	if err != nil {
		return nil, out, fmt.Errorf("hack/ceph/up.sh %s: %w\n%s", dir, err, out)
	}
	c, err := loadCluster(dir)
	if err != nil {
		if dout, derr := runScript(2*time.Minute, filepath.Join(repoRoot(), "hack", "ceph", "down.sh"), dir); derr != nil {
			err = errors.Join(err, fmt.Errorf("hack/ceph/down.sh: %w\n%s", derr, dout))
		}
		return nil, out, err
	}
	c.ours, c.upTime = true, time.Since(start)
	return c, out, nil
}

func (c *cluster) down() error {
	if !c.ours {
		return nil
	}
	out, err := runScript(2*time.Minute, filepath.Join(repoRoot(), "hack", "ceph", "down.sh"), c.dir)
	if err != nil {
		return fmt.Errorf("hack/ceph/down.sh %s: %w\n%s", c.dir, err, out)
	}
	return nil
}

func loadCluster(dir string) (*cluster, error) {
	kv, err := host.ReadEnvFile(filepath.Join(dir, "env"), "CEPH_CONF", "CEPH_CLIENT", "CEPH_FS", "CEPH_FSID",
		"CEPH_NETNS", "CEPH_BRIDGE", "CEPH_SUBNET", "CEPH_MON_IP", "CEPH_CLIENT_RANGE_START", "CEPH_CLIENT_RANGE_END")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, conf: kv["CEPH_CONF"], client: kv["CEPH_CLIENT"], fs: kv["CEPH_FS"], fsid: kv["CEPH_FSID"],
		netns: kv["CEPH_NETNS"], bridge: kv["CEPH_BRIDGE"], subnet: kv["CEPH_SUBNET"], monIP: kv["CEPH_MON_IP"],
		rangeStart: kv["CEPH_CLIENT_RANGE_START"], rangeEnd: kv["CEPH_CLIENT_RANGE_END"]}
	if r := c.cli(30*time.Second, "ceph", "health"); r.Err != nil {
		return nil, fmt.Errorf("ceph health: %s", r)
	}
	return c, nil
}

// addrSlice is a run of client addresses on a cluster's bridge.
type addrSlice struct {
	start netip.Addr
	size  int
}

// clientSlice is the i-th of n equal slices of the cluster's client range
// (CEPH_CLIENT_RANGE_START..END): the addresses one of n guests booted at
// once may give its clients.
func (c *cluster) clientSlice(i, n int) (addrSlice, error) {
	first, err := netip.ParseAddr(c.rangeStart)
	if err != nil {
		return addrSlice{}, fmt.Errorf("CEPH_CLIENT_RANGE_START=%q: %w", c.rangeStart, err)
	}
	last, err := netip.ParseAddr(c.rangeEnd)
	if err != nil {
		return addrSlice{}, fmt.Errorf("CEPH_CLIENT_RANGE_END=%q: %w", c.rangeEnd, err)
	}
	total := 1
	for a := first; a != last; a = a.Next() {
		if !a.IsValid() || a.Compare(last) > 0 || total > 1<<16 {
			return addrSlice{}, fmt.Errorf("client range %s-%s: not an ascending range of at most 65536 addresses", first, last)
		}
		total++
	}
	size := total / n
	start := first
	for range i * size {
		start = start.Next()
	}
	return addrSlice{start: start, size: size}, nil
}

// cli runs a Ceph CLI (ceph, rbd) as client.admin from the daemons' netns
// (the host has no address on the cluster's bridge).
func (c *cluster) cli(timeout time.Duration, name string, args ...string) host.CmdResult {
	full := append([]string{"--net=" + filepath.Join("/run/netns", c.netns), "--", name, "-c", c.conf}, args...)
	return host.RunCmd(timeout, nil, nil, "nsenter", full...)
}

// prepareRBD makes the rbd pool (idempotent), the rbd user and one fresh
// image per name; it returns the rbd user's key and the CephFS client's.
func (c *cluster) prepareRBD(images []string) (rbdKey, fsKey string, err error) {
	steps := [][]string{
		{"ceph", "osd", "pool", "create", rbdPool, "8", "8"},
		{"rbd", "pool", "init", rbdPool},
		{"ceph", "auth", "get-or-create", "client." + rbdUser, "mon", "profile rbd", "osd", "profile rbd pool=" + rbdPool},
	}
	for _, img := range images {
		steps = append(steps, []string{"rbd", "create", rbdPool + "/" + img, "--size", "64M"})
	}
	for _, s := range steps {
		if r := c.cli(60*time.Second, s[0], s[1:]...); r.Err != nil {
			return "", "", fmt.Errorf("%s", r)
		}
	}
	key := func(name string) (string, error) {
		r := c.cli(30*time.Second, "ceph", "auth", "print-key", name)
		if r.Err != nil {
			return "", fmt.Errorf("ceph auth print-key %s: %v: %s", name, r.Err, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout), nil
	}
	if rbdKey, err = key("client." + rbdUser); err != nil {
		return "", "", err
	}
	fsKey, err = key(c.client)
	return rbdKey, fsKey, err
}

// removeImages deletes the images of a run (best effort: a cut client's
// watch can hold one for a while; the cluster goes with the suite anyway).
func (c *cluster) removeImages(images []string) {
	for _, img := range images {
		_ = c.cli(30*time.Second, "rbd", "rm", "--no-progress", rbdPool+"/"+img)
	}
}

func runScript(timeout time.Duration, script string, args ...string) (string, error) {
	return runScriptEnv(timeout, nil, script, args...)
}

func runScriptEnv(timeout time.Duration, env []string, script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (timeout %s)", err, timeout)
	}
	return string(out), err
}
