package netnsstore

// Settles tells why the next operation that takes the lock will change r
// (judge, for the commands that only look: list, inuse, check): "" when r
// is whole.
func (snap *Snapshot) Settles(r *Record) string {
	var pin PinStatus
	for _, p := range snap.Pins {
		if p.Attachment == r.Attachment {
			pin = p
		}
	}
	_, reason := judge(r, snap.BootID, pin.Netns, pin.Mounted, nil)
	return reason
}
