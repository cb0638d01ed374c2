package main

import (
	"net/netip"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/inuse"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// inUseTarget describes a record's pinned netns to the in-use check.
func inUseTarget(r *netnsstore.Record) inuse.Target {
	t := inuse.Target{NetnsPath: r.PinPath, Dev: r.NetnsDev, Ino: r.NetnsIno, PodUID: r.PodUID}
	for _, s := range r.IPs {
		if ip, err := netip.ParseAddr(s); err == nil {
			t.IPs = append(t.IPs, ip)
		}
	}
	return t
}

// inUseChecker adapts the in-use check to the store's release.
func inUseChecker(c *conf.Config) netnsstore.InUseFunc {
	opts := c.InUseOptions()
	return func(r *netnsstore.Record) ([]string, error) {
		refs, err := inuse.Check(inUseTarget(r), opts)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(refs))
		for i, ref := range refs {
			out[i] = ref.String()
		}
		return out, nil
	}
}
