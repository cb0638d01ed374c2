package netnsstore

// Settles tells why the next operation that takes the lock will change r
// (judge, for the commands that only look: list, inuse, check): "" when r
// is whole.
func (snap *Snapshot) Settles(r *Record) string {
	var pin pinFacts
	for _, p := range snap.Pins {
		if p.Attachment == r.Attachment {
			pin = pinFacts{netns: p.Netns, mounted: p.Mounted}
		}
	}
	return judge(r, snap.BootID, pin).reason
}
