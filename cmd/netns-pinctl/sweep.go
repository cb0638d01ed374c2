package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/netns-pin/netns-pin/conf"
	"github.com/netns-pin/netns-pin/internal/pinstore"
	"github.com/netns-pin/netns-pin/netnsstore"
)

// runSweep is `netns-pinctl sweep`: the node's sweeper, a round every
// interval until SIGTERM or SIGINT. Each round finishes the teardowns that
// runtimes abandoned (netnsstore.Store.FinishAbandoned); what it does is
// logged as JSON lines (stderr or logFile), and its status is written to
// stateDir for `netns-pinctl check`. On a node where nothing was pinned yet it
// waits for the stateDir rather than create it.
func runSweep(c *conf.Config, interval time.Duration, once, all bool) int {
	log, closeLog := pinstore.NewLogger(c, "component", "sweep")
	defer closeLog()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGTERM ends the sweeper within a second whatever the round is
	// doing (waiting for the lock, an in-use check, a chain's DEL): the
	// round gets half a second to finish, then the process goes, as if
	// killed, which every step of the store survives (the next operation
	// settles what it left, docs/design.md §10).
	done := make(chan int, 1)
	go func() { done <- sweepLoop(ctx, c, interval, once, all, log) }()
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

// swept is a store the sweeper opened: its log (which names its stateDir
// when every registered store is swept) and its status.
type swept struct {
	s      *netnsstore.Store
	log    *slog.Logger
	status netnsstore.SweepStatus
}

// sweepLoop sweeps c's store, or with all every store registered on the
// node (with c's settings and the store's own pinDir and stateDir), a
// round every interval. A store whose stateDir does not exist yet is not
// swept, never created; one that cannot be opened or swept, or a
// registration that cannot be read, fails the round (logged, exit 1 with
// once).
func sweepLoop(ctx context.Context, c *conf.Config, interval time.Duration, once, all bool, log *slog.Logger) int {
	switch {
	case all: // said once the registry is made
	case once:
		log.Info("sweeper started for one round", "pinDir", c.PinDir, "stateDir", c.StateDir)
	default:
		log.Info("sweeper started", "interval", interval.String(), "pinDir", c.PinDir, "stateDir", c.StateDir)
	}
	defer log.Info("sweeper stopped")
	// The registry folder exists on every node with a sweeper: the agent
	// tells a node without stores from a wrong host root by it.
	if err := netnsstore.MakeRegistry(netnsstore.RegistryDir()); err != nil {
		log.Error("sweep: make the store registry", "error", err)
	}
	if all {
		log.Info("sweeper started for every registered store", "registry", netnsstore.RegistryDir(), "interval", interval.String(), "once", once)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	started := time.Now().UTC()
	stores := map[string]*swept{}
	defer func() {
		for _, sw := range stores {
			if !once {
				// A sweeper that is gone says so, rather than let check
				// wait for its rounds to be late.
				sw.status.Stopped = time.Now().UTC()
				if err := sw.s.WriteSweepStatus(sw.status); err != nil {
					sw.log.Warn("sweep: write the sweeper's status", "error", err)
				}
			}
			sw.s.Close()
		}
	}()
	for {
		failed := false
		regs := []netnsstore.RegisteredStore{{Registration: netnsstore.Registration{StateDir: c.StateDir, PinDir: c.PinDir}}}
		if all {
			var err error
			if regs, err = netnsstore.Registered(netnsstore.RegistryDir()); err != nil {
				log.Error("sweep: list the registered stores", "error", err)
				failed = true
			}
		}
		for _, reg := range regs {
			if reg.Err != nil {
				log.Error("sweep: a registered store cannot be read", "error", reg.Err)
				failed = true
				continue
			}
			sw := stores[reg.StateDir]
			if sw == nil {
				if _, err := os.Stat(reg.StateDir); errors.Is(err, os.ErrNotExist) {
					continue // not pinned yet, or removed with its pinDir: nothing to sweep
				}
				l, since := log, started
				if all {
					l, since = log.With("stateDir", reg.StateDir), time.Now().UTC()
				}
				sc := *c
				sc.StateDir, sc.PinDir = reg.StateDir, reg.PinDir
				s, err := openStore(&sc, log, netnsstore.BySweeper)
				if err != nil {
					l.Error("sweep: open the store", "error", err)
					failed = true
					continue
				}
				sw = &swept{s: s, log: l, status: netnsstore.SweepStatus{PID: os.Getpid(), Version: Version, Started: since, Interval: interval}}
				if once {
					sw.status.Interval = 0
				}
				stores[reg.StateDir] = sw
			}
			findings, err := sw.s.FinishAbandoned()
			sw.status.LastRound, sw.status.Finished, sw.status.Error = time.Now().UTC(), len(findings), ""
			if err != nil {
				sw.log.Error("sweep round", "error", err)
				sw.status.Error, failed = err.Error(), true
			}
			sw.log.Debug("sweep round", "abandoned", len(findings))
			if werr := sw.s.WriteSweepStatus(sw.status); werr != nil {
				sw.log.Warn("sweep: write the sweeper's status", "error", werr)
			}
			if ferr := sw.s.FoldEvents(eventsFoldOver); ferr != nil {
				sw.log.Warn("sweep: fold the events file", "error", ferr)
			}
		}
		if once {
			if failed {
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
// into one line per counter (netnsstore.Store.FoldEvents).
const eventsFoldOver = 256 << 10
