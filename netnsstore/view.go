package netnsstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ReadRecords is the store as a reader without privilege sees it: the
// node agent (cmd/netns-pin-agent) reads stateDir through a read-only
// mount, takes no lock and changes nothing (docs/design.md, "The node
// agent"). That is sound because a record is only ever replaced whole (a
// temporary file, then a rename): each file read is one version of one
// record. The listing as a whole is not one moment of the store, which the
// agent's decisions allow for: a record that appears after the listing is
// seen by the next one, and the agent only ever lifts a finalizer for a
// pod that no record names.
//
// Records are returned oldest first. A record that cannot be used (torn,
// unreadable, of a newer format, naming another attachment than its file)
// is in unreadable with the reason: the agent then lifts nothing, since
// such a record may name any pod. Records of format 1 are returned as
// read, their pinDir derived from their pin's path, and not upgraded.
func ReadRecords(stateDir string) (rs []*Record, unreadable map[string]error, err error) {
	dir := filepath.Join(stateDir, recordsSubdir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil // nothing was ever pinned here
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", dir, err)
	}
	unreadable = map[string]error{}
	for _, e := range entries {
		n := e.Name()
		att, ok := strings.CutSuffix(n, recordSuffix)
		if !ok || strings.HasPrefix(n, tmpPrefix) {
			continue // a leftover of a crash between write and rename: no record
		}
		r, err := readRecordFile(filepath.Join(dir, n), att)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// Released between the listing and the read.
		case err != nil:
			unreadable[att] = err
		default:
			rs = append(rs, r)
		}
	}
	sortRecords(rs)
	return rs, unreadable, nil
}

// readRecordFile decodes one record file as readRecord does, without
// upgrading it; O_NOFOLLOW as every open of the store.
func readRecordFile(path, attachment string) (*Record, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, fmt.Errorf("read record %s: %w", attachment, err)
	}
	if len(data) > 1<<20 {
		return nil, fmt.Errorf("record %s is larger than 1 MiB", attachment)
	}
	r := &Record{}
	if err := decodeRecord(data, r); err != nil {
		return nil, fmt.Errorf("decode record %s (%d bytes): %w: %w", attachment, len(data), errTornRecord, err)
	}
	if r.Format > recordFormat {
		return nil, fmt.Errorf("record %s: %w %d, written by netns-pin %q; this reader knows formats up to %d", attachment, errNewerFormat, r.Format, r.Writer, recordFormat)
	}
	if r.Attachment != attachment {
		return nil, fmt.Errorf("record %s names attachment %q", attachment, r.Attachment)
	}
	if r.PinDir == "" {
		r.PinDir = filepath.Dir(filepath.Dir(r.PinPath)) // format 1 (see readRecord)
	}
	return r, nil
}
