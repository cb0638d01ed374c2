package inuse

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DefaultCephPorts are the ports Ceph daemons listen on by default: 3300 is
// the monitors' msgr2 port, 6789 their legacy msgr1 port, and 6800-7300 the
// range OSDs and MDSs bind (ms_bind_port_min..ms_bind_port_max).
const DefaultCephPorts = "3300,6789,6800-7300"

// Ports is a set of TCP ports, kept as sorted, merged, inclusive ranges. The
// zero value is empty; Options treats an empty set as DefaultCephPorts.
type Ports struct {
	r []portRange
}

type portRange struct{ lo, hi uint16 }

// ParsePorts parses a comma-separated list of ports and inclusive ranges, for
// example "3300,6789,6800-7300". Blanks around entries are allowed; empty
// entries, port 0, numbers above 65535 and reversed ranges are errors that
// name the offending entry.
func ParsePorts(s string) (Ports, error) {
	if strings.TrimSpace(s) == "" {
		return Ports{}, fmt.Errorf("port list %q is empty", s)
	}
	var rs []portRange
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return Ports{}, fmt.Errorf("port list %q: entry %d is empty", s, i+1)
		}
		loS, hiS, isRange := strings.Cut(e, "-")
		if !isRange {
			hiS = loS
		}
		lo, err := parsePort(strings.TrimSpace(loS))
		hi, hiErr := parsePort(strings.TrimSpace(hiS))
		if err = cmp.Or(err, hiErr); err != nil {
			return Ports{}, fmt.Errorf("port list %q: entry %q: %w", s, e, err)
		}
		if hi < lo {
			return Ports{}, fmt.Errorf("port list %q: entry %q: range starts after it ends", s, e)
		}
		rs = append(rs, portRange{lo, hi})
	}
	slices.SortFunc(rs, func(a, b portRange) int { return int(a.lo) - int(b.lo) })
	merged := rs[:1]
	for _, r := range rs[1:] {
		last := &merged[len(merged)-1]
		if uint32(r.lo) <= uint32(last.hi)+1 {
			last.hi = max(last.hi, r.hi)
			continue
		}
		merged = append(merged, r)
	}
	return Ports{r: slices.Clip(merged)}, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, fmt.Errorf("missing port number")
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number (1-65535)", s)
	}
	if n == 0 {
		return 0, fmt.Errorf("port 0 is not a port a client connects to")
	}
	return uint16(n), nil
}

// mustParsePorts is ParsePorts for constants; it panics on error.
func mustParsePorts(s string) Ports {
	p, err := ParsePorts(s)
	if err != nil {
		panic(err)
	}
	return p
}

// Contains reports whether port is in the set.
func (p Ports) Contains(port uint16) bool {
	// A handful of ranges: a linear scan beats a binary search.
	for _, r := range p.r {
		if port < r.lo {
			return false
		}
		if port <= r.hi {
			return true
		}
	}
	return false
}

// isEmpty reports whether the set has no port.
func (p Ports) isEmpty() bool { return len(p.r) == 0 }

// String returns the canonical form, e.g. "3300,6789,6800-7300".
func (p Ports) String() string {
	entries := make([]string, len(p.r))
	for i, r := range p.r {
		entries[i] = strconv.Itoa(int(r.lo))
		if r.hi != r.lo {
			entries[i] += "-" + strconv.Itoa(int(r.hi))
		}
	}
	return strings.Join(entries, ",")
}

// Policy says what to do with Ceph clients that cannot be attributed to any
// network namespace.
type Policy string

const (
	// PolicyBlock (the default) counts unattributed clients as references of
	// every pin: a client that may live in the pinned netns keeps it pinned.
	PolicyBlock Policy = "block"
	// policyIgnore does not report unattributed clients. Use it only when the
	// node's kernel clients are known to live elsewhere (e.g. host network).
	policyIgnore Policy = "ignore"
)

// ParsePolicy accepts "block", "ignore" and "" (meaning "block").
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", PolicyBlock:
		return PolicyBlock, nil
	case policyIgnore:
		return policyIgnore, nil
	}
	return "", fmt.Errorf("unattributed policy %q: want %q or %q", s, PolicyBlock, policyIgnore)
}
