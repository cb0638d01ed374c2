package inuse

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
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
	switch r.Kind {
	case kindRBD:
		return words(r.Device, r.imageSpec(), r.ClientID, addrText(r.Addr))
	case kindCephFS:
		s := words("cephfs", r.clientName(), addrText(r.Addr))
		if r.Blocklisted {
			s += " (blocklisted)"
		}
		return s
	case kindCephClient:
		var s string
		switch {
		case r.Device != "":
			s = words("unattributed rbd device", r.Device, r.imageSpec(), r.ClientID)
		case r.Mountpoint != "":
			s = fmt.Sprintf("unattributed ceph mount %s on %s", r.Source, r.Mountpoint)
		default:
			s = words("unattributed ceph client", r.clientName())
		}
		if r.Reason != "" {
			s += ": " + r.Reason
		}
		return s
	case kindProcess:
		// "process 42 (ceph-fuse, 3 Ceph connections, e.g. a -> b)": one
		// parenthesis, so a list of references stays readable.
		details := []string{r.Comm}
		if r.Sockets > 0 && !r.InNetns {
			details = append(details, "outside the netns")
		}
		switch {
		case r.Sockets == 1:
			details = append(details, fmt.Sprintf("Ceph connection %s -> %s", r.Local, r.Remote))
		case r.Sockets > 1:
			details = append(details, fmt.Sprintf("%d Ceph connections, e.g. %s -> %s", r.Sockets, r.Local, r.Remote))
		}
		if r.Reason != "" {
			details = append(details, r.Reason)
		}
		return fmt.Sprintf("process %d (%s)", r.PID, strings.Join(details, ", "))
	case kindSocket:
		return fmt.Sprintf("kernel socket %s -> %s", r.Local, r.Remote)
	}
	return string(r.Kind)
}

// words joins the parts that are not empty with spaces.
func words(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), " ")
}

func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// imageSpec is the rbd image spec pool[/namespace]/image[@snap], "" when
// neither pool nor image is known.
func (r Reference) imageSpec() string {
	if r.Pool == "" && r.Image == "" {
		return ""
	}
	spec := r.Pool
	if r.PoolNamespace != "" {
		spec += "/" + r.PoolNamespace
	}
	spec += "/" + r.Image
	if r.Snap != "" {
		spec += "@" + r.Snap
	}
	return spec
}

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
