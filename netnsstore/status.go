package netnsstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// sweepStatusFile, in stateDir, is the node sweeper's account of its last
// round, for `netns-pinctl check` (is a sweeper running, and recently?).
const sweepStatusFile = "sweeper.json"

// SweepStatus is what the sweeper says of itself after each round.
type SweepStatus struct {
	PID       int           `json:"pid"`
	Version   string        `json:"version,omitempty"`
	Started   time.Time     `json:"started"`
	Interval  time.Duration `json:"interval"`
	LastRound time.Time     `json:"lastRound"`
	// Error is the last round's error ("" when it went through).
	Error string `json:"error,omitempty"`
	// Finished is how many abandoned teardowns the last round handled.
	Finished int `json:"finished"`
	// Stopped is set when the sweeper exits (SIGTERM, --once).
	Stopped time.Time `json:"stopped,omitzero"`
}

// WriteSweepStatus replaces the sweeper's status file: a temporary file,
// then a rename, without fsync (a status lost to a machine crash is
// written again by the next round).
func (s *Store) WriteSweepStatus(st SweepStatus) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := s.replaceFile(s.stateFd, sweepStatusFile, data, false); err != nil {
		return fmt.Errorf("write %s/%s: %w", s.StateDir, sweepStatusFile, err)
	}
	return nil
}

// ReadSweepStatus reads the sweeper's status file of stateDir; nil, nil
// when no sweeper ever ran a round there.
func ReadSweepStatus(stateDir string) (*SweepStatus, error) {
	data, err := regfile.ReadIn(stateDir, sweepStatusFile, 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st SweepStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", stateDir, sweepStatusFile, err)
	}
	return &st, nil
}
