package pinstore

import (
	"net/netip"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/inuse"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// inUseChecker adapts the in-use check with opts to the store: a record's
// netns, and netnsPath, a file that is that netns ("" when none reaches
// it).
func inUseChecker(opts inuse.Options) func(*netnsstore.Record, string) ([]netnsstore.Use, error) {
	return func(r *netnsstore.Record, netnsPath string) ([]netnsstore.Use, error) {
		t := inuse.Target{NetnsPath: netnsPath, Dev: r.NetnsDev, Ino: r.NetnsIno, PodUID: r.PodUID}
		for _, s := range r.IPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				t.IPs = append(t.IPs, ip)
			}
		}
		refs, err := inuse.Check(t, opts)
		if err != nil {
			return nil, err
		}
		out := make([]netnsstore.Use, len(refs))
		for i, ref := range refs {
			out[i] = netnsstore.Use{What: ref.String(), Detail: ref}
			if ref.InNetns { // a process inside the netns: it can reach it
				out[i].PID = ref.PID
			}
		}
		return out, nil
	}
}

// recordedInUse returns the in-use check of settings a record was pinned
// with, nil when c's own finds all it would.
func recordedInUse(c *conf.Config) func(settings map[string]string) (func(*netnsstore.Record, string) ([]netnsstore.Use, error), error) {
	own := c.InUseSettings()
	return func(settings map[string]string) (func(*netnsstore.Record, string) ([]netnsstore.Use, error), error) {
		if conf.InUseCovers(own, settings) {
			return nil, nil
		}
		opts, err := conf.InUseOptionsOf(settings)
		if err != nil {
			return nil, err
		}
		return inUseChecker(opts), nil
	}
}
