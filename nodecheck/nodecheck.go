// Package nodecheck answers "is this node set up right for netns-pin?"
// (`netns-pinctl check`, docs/design.md §16): pinDir's mount and ownership,
// every cluster's links against the link rule, pins against records, the
// in-use check's roots, ceph-csi's netNamespaceFilePath entries, what the
// csi node plugin containers see through their own mount namespaces, and
// whether the node sweeper runs. Each finding says what is wrong, where,
// and how to fix it.
//
// It reads; it changes nothing. The store is read under its lock through
// netnsstore.Store.Inspect, and the mount tests are the ones ADD and
// STATUS make (nsinfo.PinsReachHost, netnsstore.PinDirShared), so a check
// that passes means the plugin sees the same.
package nodecheck

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/netns-pin/netns-pin/netnsstore"
)

// Level is how bad a finding is.
type Level string

const (
	OK      Level = "ok"      // holds
	Info    Level = "info"    // how this node is, and what that means
	Warning Level = "warning" // works, but needs a look
	Error   Level = "error"   // wrong: a volume or a release will fail
	Unknown Level = "unknown" // could not look
)

// Finding is one result of the check.
type Finding struct {
	Check string `json:"check"` // pinDir, stateDir, store, record, pin, link, inUse, cephCSI, csiPlugin, sweeper
	Level Level  `json:"level"`
	What  string `json:"what"`
	Where string `json:"where,omitempty"`
	Fix   string `json:"fix,omitempty"`
}

// Report is every finding, in the order checked.
type Report struct {
	Result   string    `json:"result"` // ok, problems, incomplete
	Findings []Finding `json:"findings"`
}

// Exit codes of `netns-pinctl check`.
const (
	ExitOK       = 0 // everything holds
	ExitProblems = 1 // something is wrong
	ExitUnknown  = 2 // something could not be looked at (and nothing is known wrong)
)

// ExitCode is 1 when a finding is an error, else 2 when something could
// not be looked at, else 0.
func (r *Report) ExitCode() int {
	code := ExitOK
	for _, f := range r.Findings {
		switch f.Level {
		case Error:
			return ExitProblems
		case Unknown:
			code = ExitUnknown
		}
	}
	return code
}

// add records f with every control character of its texts escaped
// (printable), so that the table and the JSON say the same.
func (r *Report) add(f Finding) {
	f.Where, f.What, f.Fix = printable(f.Where), printable(f.What), printable(f.Fix)
	r.Findings = append(r.Findings, f)
}

func (r *Report) finish() {
	r.Result = map[int]string{ExitOK: "ok", ExitProblems: "problems", ExitUnknown: "incomplete"}[r.ExitCode()]
}

// Options says what to check.
type Options struct {
	PinDir, StateDir     string
	Sysfs, Debugfs, Proc string // the in-use check's roots
	Unattributed         string // the in-use policy (block, ignore)
	// CephCSIConfig is ceph-csi's config.json (or its ConfigMap as JSON);
	// "" skips that part.
	CephCSIConfig string
	// CSIPIDs names the csi node plugin processes; CSIContainers names
	// their containers by ID (every process whose cgroup path has it is
	// one). A process chooses its own command name, not these. Neither:
	// the propagation into the plugin is not checked.
	CSIPIDs       []int
	CSIContainers []string
	// Open opens the store (read under its lock, never changed).
	Open func() (*netnsstore.Store, error)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Run checks the node.
func Run(o Options) *Report {
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Proc = cmp.Or(o.Proc, "/proc")
	c := &checker{o: o, r: &Report{}}
	c.run()
	c.r.finish()
	return c.r
}

// WriteTable prints the report for people: one aligned line per finding,
// its fix below it, then the verdict.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEVEL\tCHECK\tWHERE\tFINDING")
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Level, f.Check, cmp.Or(f.Where, "-"), f.What)
		if f.Fix != "" {
			// Under the finding: empty cells keep the columns of the
			// block aligned.
			fmt.Fprintf(tw, "\t\t\t-> %s\n", f.Fix)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	n := map[Level]int{}
	for _, f := range r.Findings {
		n[f.Level]++
	}
	verdict := "this node is set up right"
	switch r.ExitCode() {
	case ExitProblems:
		verdict = "this node is NOT set up right"
	case ExitUnknown:
		verdict = "could not check everything"
	}
	_, err := fmt.Fprintf(w, "\n%s: %d error(s), %d warning(s), %d not checked\n", verdict, n[Error], n[Warning], n[Unknown])
	return err
}

// WriteJSON prints the report for machines.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func quoteList(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// printable is s with every byte that is no printable character written as
// a Go escape: a finding quotes what it read from a file, and this keeps
// any other text (an error naming such a path) from sending terminal
// escapes, tabs or newlines to the operator's terminal.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch q := strconv.QuoteRune(r); {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
