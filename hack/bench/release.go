package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

// ---------------------------------------------------------------------
// 8. release latency: from the last client's exit to the pin released,
// for a runtime that keeps retrying DEL and for the sweeper finishing a
// teardown the runtime abandoned.

// sweepInterval is the sweeper's round period here; the DaemonSet uses
// 10 s, and its latency is that interval's share plus the same work.
const sweepInterval = 250 * time.Millisecond

// retryEvery is the retry period of the simulated runtime; kubelet's is
// 10-15 s, added the same way.
const retryEvery = 50 * time.Millisecond

func (b *bench) release(ctx context.Context) error {
	if err := os.MkdirAll(b.stateDir, 0o700); err != nil {
		return err
	}
	sweeper := exec.Command(b.cfg.plugin, "--pin-dir", b.pinDir, "--state-dir", b.stateDir, "sweep", "--interval", sweepInterval.String())
	sweeper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sweeper.Start(); err != nil {
		return err
	}
	b.env.defer_("stop the sweeper", func() error { return host.Stop(sweeper) })
	ss, _, err := b.measure(ctx, 2, 0, b.rounds(9), rotate(2, func(ctx context.Context, i int, _ string) (sample, error) {
		return b.releaseRound(ctx, i == 1)
	}))
	if err != nil {
		return err
	}
	retry, swept := &ss[0], &ss[1]
	b.rep.timed("8", fmt.Sprintf("release latency, runtime retrying DEL every %s: last client exits -> pin released", retryEvery), retry, nil,
		"", "add the runtime's retry period (kubelet: 10-15 s)")
	b.rep.timed("8", fmt.Sprintf("release latency, runtime gave up, sweeper every %s: last client exits -> teardown finished", sweepInterval), swept, nil,
		ratioOf(swept.d, retry.d), "expected about half an interval plus the work; the DaemonSet's interval is 10 s")
	return nil
}

// releaseRound pins a holder, has its DEL refused while a client runs in
// it, ends the client, and times until the record is gone: released by a
// DEL retried every retryEvery or, when the runtime abandoned the teardown,
// by the sweeper.
func (b *bench) releaseRound(ctx context.Context, abandon bool) (sample, error) {
	name := b.name("r" + host.RandHex(4))
	nsPath, err := b.env.netns(name, "10.250.3.2/24")
	if err != nil {
		return sample{}, err
	}
	a := b.attach("release", nsPath, "csi-holder-"+host.RandHex(5), b.pinEntry(nil), "10.250.3.2")
	pin := func(verb string) error {
		_, _, err := b.call(b.cfg.plugin, verb, a).run(ctx, "")
		return err
	}
	if err := pin("ADD"); err != nil {
		return sample{}, err
	}
	client, err := host.StartInNetns(nsPath, "sleep", "600")
	if err != nil {
		return sample{}, err
	}
	b.env.defer_("stop the client in "+name, func() error { return host.Stop(client) })
	if pin("DEL") == nil {
		return sample{}, errors.New("DEL succeeded while a client used the netns")
	}
	if abandon { // as CRI-O does: its netns goes, DEL is never called again
		if err := host.DelNetns(name); err != nil {
			return sample{}, err
		}
	}
	record := filepath.Join(b.stateDir, "records", a.cid+".eth0.json")
	t0 := time.Now()
	if err := host.Stop(client); err != nil {
		return sample{}, err
	}
	every := retryEvery
	if abandon {
		every = 5 * time.Millisecond // the sweeper's next round releases it
	}
	released := host.Poll(30*time.Second, every, func() bool {
		if _, err := os.Lstat(record); os.IsNotExist(err) {
			return true
		}
		return !abandon && pin("DEL") == nil
	})
	d := time.Since(t0)
	if !released {
		return sample{}, fmt.Errorf("not released 30 s after the client left (abandoned %v)", abandon)
	}
	return sample{d: d}, host.DelNetns(name)
}
