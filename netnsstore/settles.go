package netnsstore

// Settles tells why the next operation that takes the lock will change r
// (its repair, docs/design.md §11), for the commands that only look (list,
// inuse, check) and so leave it as it is: "" when r is whole.
func (snap *Snapshot) Settles(r *Record) string {
	if r.BootID != snap.BootID {
		return "pinned in an earlier boot"
	}
	switch r.State {
	case stateIntent:
		return "ADD was interrupted"
	case stateReleasing:
		return "a release was interrupted"
	case StateUnpinned:
		return "its pin was lost while in use"
	}
	for _, p := range snap.Pins {
		if p.Attachment == r.Attachment && p.Mounted && p.Netns == r.NetnsID() {
			return ""
		}
	}
	return "its pin is no longer a mount of its netns"
}
