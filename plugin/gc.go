package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// cmdGC releases the pins of this network whose attachments the runtime
// no longer knows, exactly as DEL would (pins still in use stay), and lets
// the store's repair drop leftovers of earlier boots and crashes. One bad
// entry never fails the whole GC: problems are logged.
func cmdGC(args *skel.CmdArgs) error {
	r, err := parseRequest(args)
	if err != nil {
		return err
	}
	valid := map[string]bool{}
	for _, a := range r.conf.ValidAttachments {
		if name, err := netnsstore.AttachmentName(a.ContainerID, a.IfName); err == nil {
			valid[name] = true
		}
	}
	s, log, done, err := r.openStore()
	if err != nil {
		return err
	}
	defer done()
	findings, err := s.GC(r.conf.Name, valid)
	for _, f := range findings {
		level := slog.LevelInfo
		if len(f.References) > 0 {
			level = slog.LevelWarn // a stale attachment the runtime forgot, still in use
		}
		log.Log(context.Background(), level, "gc: "+string(f.Action), "attachment", f.Attachment, "cluster", f.Cluster, "reason", f.Reason, "references", f.References)
	}
	if err != nil {
		log.Error("gc: some entries could not be collected", "error", err)
	}
	return nil
}

// cmdStatus answers whether pins can be made: a pin made here must reach
// the host's mount namespace and pinDir/stateDir must be usable.
func cmdStatus(args *skel.CmdArgs) error {
	r, err := parseRequest(args)
	if err != nil {
		return err
	}
	var problems []string
	if err := requirePinsReach(r.conf.PinDir); err != nil {
		problems = append(problems, err.Error())
	}
	if _, _, done, err := r.openStore(); err != nil {
		problems = append(problems, err.Error())
	} else {
		done()
	}
	if len(problems) > 0 {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("netns-pin cannot pin: %s", strings.Join(problems, "; ")), "")
	}
	return nil
}
