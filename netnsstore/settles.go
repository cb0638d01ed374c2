package netnsstore

import "slices"

// Settles tells why the next operation that takes the lock will change r
// (judge, for the commands that only look: list, inuse, check): "" when r
// is whole.
func (snap *Snapshot) Settles(r *Record) string {
	var pin PinStatus
	if i := slices.IndexFunc(snap.Pins, func(p PinStatus) bool { return p.Attachment == r.Attachment }); i >= 0 {
		pin = snap.Pins[i]
	}
	_, reason := judge(r, snap.BootID, pin.Netns, pin.Mounted, nil)
	return reason
}
