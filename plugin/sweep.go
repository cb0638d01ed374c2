package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// runSweep is `netns-pin sweep`: the node's sweeper, a round every
// interval until SIGTERM or SIGINT. Each round finishes the teardowns that
// runtimes abandoned (netnsstore.Store.FinishAbandoned); what it does is
// logged as JSON lines (stderr or logFile), and its status is written to
// stateDir for `netns-pin check`. On a node where nothing was pinned yet it
// waits for the stateDir rather than create it. obs, when not nil, sees
// every round (the metrics of netns-pin-agent).
func runSweep(c *conf.Config, interval time.Duration, once bool, obs sweepObserver, stderr io.Writer) int {
	log, closeLog := newLogger(c, "component", "sweep")
	defer closeLog()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGTERM ends the sweeper within a second whatever the round is
	// doing (waiting for the lock, an in-use check, a chain's DEL): the
	// round gets half a second to finish, then the process goes, as if
	// killed, which every step of the store survives (the next operation
	// settles what it left, docs/design.md §10).
	done := make(chan int, 1)
	go func() { done <- sweepLoop(ctx, c, interval, once, obs, log) }()
	select {
	case code := <-done:
		return code
	case <-ctx.Done():
	}
	select {
	case code := <-done:
		return code
	case <-time.After(500 * time.Millisecond):
		log.Warn("sweeper stopped in the middle of a round: the next operation settles what it left")
		return 0
	}
}

func sweepLoop(ctx context.Context, c *conf.Config, interval time.Duration, once bool, obs sweepObserver, log *slog.Logger) int {
	if once {
		log.Info("sweeper started for one round", "pinDir", c.PinDir, "stateDir", c.StateDir)
	} else {
		log.Info("sweeper started", "interval", interval.String(), "pinDir", c.PinDir, "stateDir", c.StateDir)
	}
	defer log.Info("sweeper stopped")
	t := time.NewTicker(interval)
	defer t.Stop()
	status := netnsstore.SweepStatus{PID: os.Getpid(), Version: Version, Started: time.Now().UTC(), Interval: interval}
	if once {
		status.Interval = 0
	}
	var s *netnsstore.Store
	var eventsRead int64 // offset in the events file
	defer func() {
		if s != nil {
			if !once {
				// A sweeper that is gone says so, rather than let check
				// wait for its rounds to be late.
				status.Stopped = time.Now().UTC()
				if err := s.WriteSweepStatus(status); err != nil {
					log.Warn("sweep: write the sweeper's status", "error", err)
				}
			}
			s.Close()
		}
	}()
	for {
		var err error
		if s == nil {
			if s, err = openSweptStore(c, log); err != nil {
				log.Error("sweep: open the store", "error", err)
			}
		}
		if s != nil {
			var findings []netnsstore.Finding
			findings, err = s.FinishAbandoned()
			if err != nil {
				log.Error("sweep round", "error", err)
			}
			log.Debug("sweep round", "abandoned", len(findings))
			status.LastRound, status.Finished, status.Error = time.Now().UTC(), len(findings), ""
			if err != nil {
				status.Error = err.Error()
			}
			if werr := s.WriteSweepStatus(status); werr != nil {
				log.Warn("sweep: write the sweeper's status", "error", werr)
			}
			// What other processes counted since the last round; past a
			// size the file is folded, metrics or not, so that it stays
			// small while a holder's DEL is refused for weeks.
			r := sweepRound{store: s, err: err}
			var next int64
			r.events, next, r.reset, r.eventsErr = s.Events(eventsRead, eventsFoldOver)
			if r.eventsErr != nil {
				log.Warn("sweep: read the events file", "error", r.eventsErr)
			} else {
				eventsRead = next
			}
			if obs != nil {
				obs.round(r)
			}
		} else if obs != nil && err != nil {
			obs.round(sweepRound{err: err})
		}
		if once {
			if err != nil {
				return 1
			}
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-t.C:
		}
	}
}

// eventsFoldOver is the size past which the sweeper folds the events file
// into one line per counter (netnsstore.Store.Events).
const eventsFoldOver = 256 << 10

// sweepRound is what one round of the sweeper saw.
type sweepRound struct {
	store     *netnsstore.Store // nil when it could not be opened
	err       error             // the round's
	events    []netnsstore.Event
	reset     bool // the events file was replaced: its counts start again
	eventsErr error
}

// sweepObserver sees each round of the sweeper (the agent's metrics).
type sweepObserver interface {
	round(r sweepRound)
}

// openSweptStore opens the store once its stateDir exists (nil, nil
// before).
func openSweptStore(c *conf.Config, log *slog.Logger) (*netnsstore.Store, error) {
	if _, err := os.Stat(c.StateDir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return openStore(c, log, netnsstore.BySweeper)
}
