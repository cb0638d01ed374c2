package inuse

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Kind is what holds a pinned netns. Other packages read it as the string
// it prints.
type Kind string

const (
	// kindRBD is a krbd device whose client's address is one of the pin's.
	kindRBD Kind = "rbd"
	// kindCephFS is a CephFS kernel client whose address is one of the pin's.
	kindCephFS Kind = "cephfs"
	// kindCephClient is a Ceph kernel client whose netns cannot be told
	// (reported only with the "block" policy).
	kindCephClient Kind = "ceph-client"
	// kindProcess is a process in the pinned netns, or one holding a socket
	// to a Ceph port inside it.
	kindProcess Kind = "process"
	// kindSocket is a TCP socket to a Ceph port inside the pinned netns that
	// no process holds: a kernel client's socket.
	kindSocket Kind = "socket"
)

// kindsInOrder is the order of Check's references by kind.
var kindsInOrder = []Kind{kindRBD, kindCephFS, kindCephClient, kindProcess, kindSocket}

func kindOrder(k Kind) int {
	if i := slices.Index(kindsInOrder, k); i >= 0 {
		return i
	}
	return len(kindsInOrder)
}

// Reference is one thing that still uses a pinned netns. Which fields are set
// depends on Kind; the zero value of a field means "not known/not relevant".
type Reference struct {
	Kind Kind `json:"kind"`

	// Device is the krbd device ("rbd0") for kindRBD, and for kindCephClient
	// when it comes from an rbd device whose address cannot be read.
	Device        string `json:"device,omitempty"`
	Pool          string `json:"pool,omitempty"`
	PoolNamespace string `json:"poolNamespace,omitempty"`
	Image         string `json:"image,omitempty"`
	Snap          string `json:"snap,omitempty"` // empty for the image head ("-" in sysfs)

	// Ceph client identity (kindRBD, kindCephFS, kindCephClient).
	ClusterFSID string     `json:"clusterFSID,omitempty"`
	ClientID    string     `json:"clientID,omitempty"` // "client4161"
	ClientAddr  string     `json:"clientAddr,omitempty"`
	Addr        netip.Addr `json:"addr,omitzero"`
	Blocklisted bool       `json:"blocklisted,omitempty"`

	// CephFS mount seen in mountinfo (kindCephClient without debugfs).
	Source     string   `json:"source,omitempty"`
	Mountpoint string   `json:"mountpoint,omitempty"`
	Monitors   []string `json:"monitors,omitempty"`

	// Reason says why a kindCephClient reference could not be attributed,
	// or why a kindProcess one counts although it may run elsewhere.
	Reason string `json:"reason,omitempty"`

	// Process (kindProcess).
	PID  int    `json:"pid,omitempty"`
	Comm string `json:"comm,omitempty"`
	// InNetns is true when the process itself runs in the pinned netns; a
	// process outside it is a reference only because it holds sockets.
	InNetns bool `json:"inNetns,omitempty"`
	// Sockets counts the candidate sockets (TCP to a Ceph port inside the
	// pinned netns) the process holds; Local and Remote are the first.
	Sockets int `json:"sockets,omitempty"`

	// Socket endpoints (kindSocket, and kindProcess when Sockets > 0).
	Local  netip.AddrPort `json:"local,omitzero"`
	Remote netip.AddrPort `json:"remote,omitzero"`
	Inode  uint64         `json:"inode,omitempty"`
}

// String returns one line for people, for example
//
//	rbd0 replicapool/csi-vol-1 client4161 192.168.20.5
//	cephfs 5f1b....client4170 192.168.20.5
//	unattributed ceph client 5f1b....client4171: <reason>
//	process 1234 (ceph-fuse)
//	kernel socket 10.0.0.5:41234 -> 10.0.0.1:6789
func (r Reference) String() string {
	var b strings.Builder
	switch r.Kind {
	case kindRBD:
		b.WriteString(r.Device)
		r.writeImage(&b)
		writeSep(&b, r.ClientID)
		if r.Addr.IsValid() {
			writeSep(&b, r.Addr.String())
		}
	case kindCephFS:
		b.WriteString("cephfs ")
		b.WriteString(r.clientName())
		if r.Addr.IsValid() {
			writeSep(&b, r.Addr.String())
		}
		if r.Blocklisted {
			b.WriteString(" (blocklisted)")
		}
	case kindCephClient:
		b.WriteString("unattributed ")
		switch {
		case r.Device != "":
			b.WriteString("rbd device ")
			b.WriteString(r.Device)
			r.writeImage(&b)
			writeSep(&b, r.ClientID)
		case r.Mountpoint != "":
			b.WriteString("ceph mount ")
			b.WriteString(r.Source)
			b.WriteString(" on ")
			b.WriteString(r.Mountpoint)
		default:
			b.WriteString("ceph client ")
			b.WriteString(r.clientName())
		}
		if r.Reason != "" {
			b.WriteString(": ")
			b.WriteString(r.Reason)
		}
	case kindProcess:
		// "process 42 (ceph-fuse, 3 Ceph connections, e.g. a -> b)": one
		// parenthesis, so a list of references stays readable.
		b.WriteString("process ")
		b.WriteString(strconv.Itoa(r.PID))
		b.WriteString(" (")
		b.WriteString(r.Comm)
		if r.Sockets > 0 && !r.InNetns {
			b.WriteString(", outside the netns")
		}
		switch {
		case r.Sockets == 1:
			b.WriteString(", Ceph connection ")
		case r.Sockets > 1:
			b.WriteString(", ")
			b.WriteString(strconv.Itoa(r.Sockets))
			b.WriteString(" Ceph connections, e.g. ")
		}
		if r.Sockets > 0 {
			b.WriteString(r.Local.String())
			b.WriteString(" -> ")
			b.WriteString(r.Remote.String())
		}
		if r.Reason != "" {
			b.WriteString(", ")
			b.WriteString(r.Reason)
		}
		b.WriteString(")")
	case kindSocket:
		b.WriteString("kernel socket ")
		b.WriteString(r.Local.String())
		b.WriteString(" -> ")
		b.WriteString(r.Remote.String())
	default:
		b.WriteString(string(r.Kind))
	}
	return b.String()
}

func writeSep(b *strings.Builder, s string) {
	if s == "" {
		return
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(s)
}

// writeImage writes the rbd image spec pool[/namespace]/image[@snap].
func (r Reference) writeImage(b *strings.Builder) {
	if r.Pool == "" && r.Image == "" {
		return
	}
	b.WriteByte(' ')
	b.WriteString(r.Pool)
	if r.PoolNamespace != "" {
		b.WriteByte('/')
		b.WriteString(r.PoolNamespace)
	}
	b.WriteByte('/')
	b.WriteString(r.Image)
	if r.Snap != "" {
		b.WriteByte('@')
		b.WriteString(r.Snap)
	}
}

// clientName is the debugfs form "<fsid>.client<gid>".
func (r Reference) clientName() string {
	if r.ClusterFSID == "" {
		return r.ClientID
	}
	return r.ClusterFSID + "." + r.ClientID
}

// sortRefs sorts references by compareRefs. A Reference is a few hundred
// bytes: sorting indexes and moving each reference once is much cheaper than
// swapping them around.
func sortRefs(refs []Reference) []Reference {
	idx := make([]int32, len(refs))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int { return compareRefs(&refs[a], &refs[b]) })
	out := make([]Reference, len(refs))
	for i, j := range idx {
		out[i] = refs[j]
	}
	return out
}

// compareRefs orders references by kind, then by identity; numbered names
// (rbd2 < rbd10, client99 < client100) sort by number.
func compareRefs(a, b *Reference) int {
	// Evaluated lazily (cmp.Or would compute every comparison): sorting
	// thousands of references is a visible part of a check.
	if c := cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)); c != 0 {
		return c
	}
	if c := cmpNumbered(a.Device, b.Device); c != 0 {
		return c
	}
	if c := cmp.Compare(a.ClusterFSID, b.ClusterFSID); c != 0 {
		return c
	}
	if c := cmpNumbered(a.ClientID, b.ClientID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Mountpoint, b.Mountpoint); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Source, b.Source); c != 0 {
		return c
	}
	if c := cmp.Compare(a.PID, b.PID); c != 0 {
		return c
	}
	if c := a.Local.Compare(b.Local); c != 0 {
		return c
	}
	if c := a.Remote.Compare(b.Remote); c != 0 {
		return c
	}
	return cmp.Compare(a.Inode, b.Inode)
}

// cmpNumbered compares "<prefix><number>" strings numerically when the
// prefixes match: the shorter number is the smaller one (no leading zeros).
func cmpNumbered(a, b string) int {
	if len(a) != len(b) {
		return cmp.Compare(len(a), len(b))
	}
	return cmp.Compare(a, b)
}
