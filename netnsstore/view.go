package netnsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/netns-pin/netns-pin/internal/regfile"
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
// unreadable, of another format or a state no release writes, naming
// another attachment than its file) is in unreadable with the reason: the
// agent then lifts nothing, since such a record may name any pod.
func ReadRecords(stateDir string) (rs []*Record, unreadable map[string]error, err error) {
	dir := filepath.Join(stateDir, recordsSubdir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil // nothing was ever pinned here
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", dir, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return readRecords(names, func(att string) (*Record, error) {
		data, err := regfile.ReadIn(stateDir, recordsSubdir+"/"+att+recordSuffix, 1<<20)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil // released between the listing and the read
		}
		if err != nil {
			return nil, err
		}
		return decodeRecord(data, att, "the node agent")
	})
}

// ReadEvents reads the events file of stateDir as readEventsAt does, for a
// reader without privilege or lock (the node agent): from offset from, at
// most a chunk, to its last whole line. Only the store folds the file.
func ReadEvents(stateDir string, from int64) (events []Event, next int64, reset bool, err error) {
	err = regfile.InDir(stateDir, func(dirfd int) (err error) {
		events, next, reset, err = readEventsAt(dirfd, from)
		return err
	})
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, 0, from > 0, nil // no stateDir yet
	case err != nil:
		return nil, from, false, err
	}
	return events, next, reset, nil
}
