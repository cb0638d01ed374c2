package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/nsinfo"
	"github.com/netns-pin/netns-pin/internal/pinstore"
	"github.com/netns-pin/netns-pin/internal/refusal"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// request is one CNI invocation, parsed.
type request struct {
	args *skel.CmdArgs
	conf *conf.Config
	pod  conf.Pod
}

func parseRequest(args *skel.CmdArgs) (*request, error) {
	c, err := conf.Parse(args.StdinData)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "netns-pin: "+err.Error(), "")
	}
	pod, err := conf.PodFromArgs(args.Args)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "netns-pin: "+err.Error(), "")
	}
	return &request{args: args, conf: c, pod: pod}, nil
}

// holder decides whether the pod is a holder; a refused or malformed
// claim is an error so the operator sees it in the pod's events.
func (r *request) holder() (conf.Cluster, bool, error) {
	cl, ok, err := r.conf.Holder(r.pod)
	if err != nil {
		return cl, false, types.NewError(types.ErrInvalidNetworkConfig, "netns-pin: "+err.Error(), "")
	}
	return cl, ok, nil
}

func (r *request) attachment() (string, error) {
	name, err := netnsstore.AttachmentName(r.args.ContainerID, r.args.IfName)
	if err != nil {
		return "", types.NewError(types.ErrInvalidEnvironmentVariables, "netns-pin: "+err.Error(), "")
	}
	return name, nil
}

func (r *request) openStore() (*netnsstore.Store, *slog.Logger, func(), error) {
	pinstore.LimitMemory()
	log, closeLog := pinstore.NewLogger(r.conf, "network", r.conf.Name, "containerID", r.args.ContainerID, "ifname", r.args.IfName, "pod", r.pod.String(), "podUID", r.pod.UID)
	s, err := pinstore.Open(r.conf, log, pinstore.ActorOf(os.Getenv("CNI_COMMAND")), Version, nil)
	if err != nil {
		closeLog()
		return nil, nil, nil, types.NewError(types.ErrPluginNotAvailable, "netns-pin: "+err.Error(), "")
	}
	return s, log, func() { s.Close(); closeLog() }, nil
}

func cmdAdd(args *skel.CmdArgs) error {
	r, err := parseRequest(args)
	if err != nil {
		return err
	}
	if r.conf.RawPrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig,
			"netns-pin: prevResult is missing: netns-pin is a chained plugin and must come after the plugin that creates the interface", "")
	}
	cl, ok, err := r.holder()
	if err != nil {
		return err
	}
	// The result first: a prevResult that cannot be printed fails the ADD
	// before anything is pinned.
	printResult, err := addResult(r.conf)
	if err != nil {
		return err
	}
	if ok {
		if err := r.pin(cl); err != nil {
			return err
		}
	}
	return printResult()
}

// addResult returns what prints the result of ADD: prevResult, unchanged
// (see conf.Config.PrevResultAsGiven), or converted to the configuration's
// cniVersion by the CNI library.
func addResult(c *conf.Config) (func() error, error) {
	if raw := c.PrevResultAsGiven(); raw != nil {
		return func() error {
			if _, err := os.Stdout.Write(raw); err != nil {
				return types.NewError(types.ErrIOFailure, "netns-pin: print result: "+err.Error(), "")
			}
			return nil
		}, nil
	}
	if err := c.ParsePrevResult(); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "netns-pin: "+err.Error(), "")
	}
	res, err := c.PrevResult.GetAsVersion(c.CNIVersion)
	if err != nil {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion, "netns-pin: prevResult: "+err.Error(), "")
	}
	return res.Print, nil
}

func (r *request) pin(cl conf.Cluster) error {
	name, err := r.attachment()
	if err != nil {
		return err
	}
	if err := requirePinsReach(r.conf.PinDir); err != nil {
		return err
	}
	links, err := r.conf.LinkPaths(cl)
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "netns-pin: "+err.Error(), "")
	}
	s, _, done, err := r.openStore()
	if err != nil {
		return err
	}
	defer done()
	_, err = s.Pin(netnsstore.Record{
		ContainerID: r.args.ContainerID, IfName: r.args.IfName, Network: r.conf.Name,
		Cluster: cl.String(), PodNS: r.pod.Namespace, PodName: r.pod.Name, PodUID: r.pod.UID,
		NetnsPath: r.args.Netns, Links: links,
	})
	if err != nil {
		code := types.ErrInternal
		switch {
		case errors.Is(err, nsinfo.ErrNotNetns), errors.Is(err, os.ErrNotExist):
			code = types.ErrInvalidNetNS
		case errors.Is(err, netnsstore.ErrLockTimeout):
			code = types.ErrTryAgainLater
		case errors.Is(err, netnsstore.ErrLinkTaken):
			code = types.ErrInvalidNetworkConfig
		}
		return types.NewError(code, fmt.Sprintf("netns-pin: holder %s of cluster %s (%s): %v", r.pod, cl, name, err), "")
	}
	return nil
}

// requirePinsReach fails unless a pin made in pinDir reaches the host's
// mount namespace, where ceph-csi looks for it (see nsinfo.PinsReachHost;
// Multus thick mode needs pinDir as a Bidirectional volume).
func requirePinsReach(pinDir string) error {
	if err := nsinfo.PinsReachHost(pinDir); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "netns-pin: "+err.Error(), "")
	}
	return nil
}

// cmdDel answers with error text that runtimes cannot mistake for
// success (see safeError).
func cmdDel(args *skel.CmdArgs) error { return safeError(del(args)) }

func del(args *skel.CmdArgs) error {
	r, err := parseRequest(args)
	if err != nil {
		return err
	}
	name, err := r.attachment()
	if err != nil {
		return err
	}
	// A pod is released by its record, not by today's configuration: a
	// holder rule removed since ADD must not strand the pin. For other pods
	// this costs two lstats (the record, then a pin: delWithoutRecord). Only
	// "no such file" means no record: any other failure to look keeps
	// everything, and the runtime retries.
	pinned, err := netnsstore.HasRecord(r.conf.StateDir, name)
	if err != nil {
		return types.NewError(types.ErrTryAgainLater, "netns-pin: "+err.Error(), "")
	}
	if !pinned {
		return r.delWithoutRecord(name)
	}
	s, _, done, err := r.openStore()
	if err != nil {
		return types.NewError(types.ErrTryAgainLater, "netns-pin: "+err.Error(), "")
	}
	defer done()
	_, err = s.Release(name, teardownOf(args, r.conf))
	var inUse *netnsstore.InUseError
	switch {
	case errors.As(err, &inUse):
		return inUseCNIError(inUse, r.conf)
	case err != nil:
		// Not known to be unused (the lock, the check, a record that
		// cannot be read, another pinDir's records): the pin and the
		// chain's interfaces stay, and the runtime tries again later.
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("netns-pin: release %s: %v", name, err), "")
	}
	return nil
}

// delWithoutRecord answers a DEL for which this network's stateDir has no
// record: success, unless the attachment is pinned all the same. A pin
// file in this pinDir belongs to another stateDir (the network's stateDir
// changed since ADD) or is an orphan of this one (a record removed by
// hand): the store decides, refusing another stateDir's pinDir and
// releasing an orphan that nothing uses. For a holder by today's rules, a
// pin of the attachment under any other pinDir (both changed) refuses too.
// One lstat for every other pod.
func (r *request) delWithoutRecord(name string) error {
	own := filepath.Join(r.conf.PinDir, netnsstore.PinsSubdir, name)
	_, err := os.Lstat(own)
	if err == nil {
		s, _, done, err := r.openStore()
		if err == nil {
			_, err = s.List() // repair: an orphan nothing uses goes
			done()
		}
		if err == nil {
			if _, err = os.Lstat(own); errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			err = fmt.Errorf("it is kept (while something uses it, or while %s names no stateDir as its owner); "+
				"netns-pinctl --pin-dir %s --state-dir %s release %s checks it and releases it when unused",
				r.conf.PinDir, r.conf.PinDir, r.conf.StateDir, name)
		}
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("netns-pin: %s is pinned at %s, and stateDir %s has no record of it: %v",
			name, own, r.conf.StateDir, err), "")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("netns-pin: look for a pin of %s: %v", name, err), "")
	}
	if _, holder, err := r.holder(); err != nil || !holder {
		return nil
	}
	at, err := netnsstore.FindPin(name, r.args.Netns)
	switch {
	case err != nil:
		return types.NewError(types.ErrTryAgainLater, "netns-pin: "+err.Error(), "")
	case at != "":
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("netns-pin: %s is pinned at %s, outside this network's pinDir %s: "+
			"were pinDir and stateDir changed since it was pinned? A DEL with the configuration that pinned it releases it, "+
			"or run netns-pinctl --pin-dir %s --state-dir <its stateDir> release %s", name, at, r.conf.PinDir,
			filepath.Dir(filepath.Dir(at)), name), "")
	}
	return nil
}

// successWords are texts that runtimes take for a successful teardown
// whatever the error: containerd's go-cni Remove() ignores an error that
// contains "not found" (and "no such file or directory" when the netns path
// is empty), Multus with retryDeleteOnError drops its cache on "no such
// file or directory". A refused DEL read as success would let the runtime
// remove the netns's interfaces and IP under live Ceph clients.
//
// Compiled on first use: only a failing DEL needs it, not every pod's ADD.
var successWords = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)not\s+found|no\s+such\s+file\s+or\s+directory`)
})

// safeError rewrites the text of a CNI error so that it contains no
// successWords, whatever the names in it (process names, paths, image
// names and kernel messages come from the machine). It is the one place
// that sanitizes what DEL says.
func safeError(err error) error {
	if err == nil {
		return nil
	}
	var e *types.Error
	if !errors.As(err, &e) {
		e = types.NewError(types.ErrTryAgainLater, err.Error(), "")
	}
	return types.NewError(e.Code, safeText(e.Msg), safeText(e.Details))
}

func safeText(s string) string {
	return successWords().ReplaceAllStringFunc(s, func(w string) string {
		if strings.HasPrefix(strings.ToLower(w), "not") {
			return "missing"
		}
		return "missing file or directory"
	})
}

// inUseCNIError is what the runtime shows in the pod's events while the
// holder cannot go: one readable line with the cluster, the pod, the first
// references and the command that lists them all; details has every one.
func inUseCNIError(e *netnsstore.InUseError, c *conf.Config) error {
	refs := e.References
	msg := refusal.Message(e.Record.Cluster, e.Record.PodNS, e.Record.PodName, refs, c.InUseCommand(e.Record.Attachment))
	// One line: runtimes show msg and details joined in the pod's events.
	return types.NewError(types.ErrTryAgainLater, msg, strings.Join(refs, "; "))
}

func cmdCheck(args *skel.CmdArgs) error {
	r, err := parseRequest(args)
	if err != nil {
		return err
	}
	if r.conf.RawPrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "netns-pin: prevResult is missing", "")
	}
	_, ok, err := r.holder()
	if err != nil || !ok {
		return err
	}
	name, err := r.attachment()
	if err != nil {
		return err
	}
	s, _, done, err := r.openStore()
	if err != nil {
		return err
	}
	defer done()
	if err := s.Check(name, args.Netns); err != nil {
		return types.NewError(types.ErrInternal, "netns-pin: "+err.Error(), "")
	}
	return nil
}
