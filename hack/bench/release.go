package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
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
	entry := b.pinEntry(nil)
	net := b.name("release")
	if err := os.MkdirAll(b.stateDir, 0o700); err != nil {
		return err
	}
	sweeper := exec.Command(b.cfg.plugin, "--pin-dir", b.pinDir, "--state-dir", b.stateDir, "sweep", "--interval", sweepInterval.String())
	sweeper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sweeper.Start(); err != nil {
		return err
	}
	b.env.defer_("stop the sweeper", func() error { _ = sweeper.Process.Kill(); _, _ = sweeper.Process.Wait(); return nil })

	// one round: pin a holder, refuse its DEL while a client runs in it,
	// end the client, and time until the record is gone.
	round := func(ctx context.Context, abandon bool, i int) (sample, error) {
		name := b.name(fmt.Sprintf("r%d", i))
		nsPath, err := b.env.netns(name, "10.250.3.2/24")
		if err != nil {
			return sample{}, err
		}
		cid := "bench" + randHex(27)
		args := podArgs(holderNS, "csi-holder-"+randHex(5), cid)
		conf := pluginConf(net, entry, prevResult("10.250.3.2"))
		pin := func(verb string) error {
			_, _, err := call{bin: b.cfg.plugin, env: cniEnv(verb, cid, nsPath, args, b.cfg.cniPath), stdin: conf}.run(ctx)
			return err
		}
		if err := pin("ADD"); err != nil {
			return sample{}, err
		}
		client := exec.Command("nsenter", "--net="+nsPath, "--", "sleep", "600")
		if err := client.Start(); err != nil {
			return sample{}, err
		}
		if err := waitNetns(client.Process.Pid, nsPath); err != nil {
			return sample{}, err
		}
		if pin("DEL") == nil {
			return sample{}, errors.New("DEL succeeded while a client used the netns")
		}
		if abandon { // as CRI-O does: its netns goes, DEL is never called again
			if err := sh("ip", "netns", "del", name); err != nil {
				return sample{}, err
			}
		}
		record := filepath.Join(b.stateDir, "records", cid+".eth0.json")
		t0 := time.Now()
		_ = client.Process.Kill()
		_ = client.Wait()
		released := func() bool { _, err := os.Lstat(record); return os.IsNotExist(err) }
		for !released() {
			if time.Since(t0) > 30*time.Second {
				return sample{}, fmt.Errorf("not released 30 s after the client left (abandoned %v)", abandon)
			}
			if abandon { // the sweeper's next round releases it
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if pin("DEL") == nil {
				break
			}
			time.Sleep(retryEvery)
		}
		d := time.Since(t0)
		if !abandon {
			if err := sh("ip", "netns", "del", name); err != nil {
				return sample{}, err
			}
		}
		return sample{d: d}, nil
	}
	ss, err := interleave(ctx, b.rounds(9), 2, func(ctx context.Context, r, i int) (sample, error) {
		return round(ctx, i == 1, 2*r+i)
	})
	if err != nil {
		return err
	}
	retry, swept := ss[0].durations(), ss[1].durations()
	row := durRow("8", fmt.Sprintf("release latency, runtime retrying DEL every %s: last client exits -> pin released", retryEvery), retry)
	row.note = "add the runtime's retry period (kubelet: 10-15 s)"
	b.rep.add(row)
	row = durRow("8", fmt.Sprintf("release latency, runtime gave up, sweeper every %s: last client exits -> teardown finished", sweepInterval), swept)
	row.ratio = fmtRatio(median(swept) / median(retry))
	row.note = "expected about half an interval plus the work; the DaemonSet's interval is 10 s"
	b.rep.add(row)
	return nil
}

// waitNetns waits until process pid runs in the netns at path.
func waitNetns(pid int, path string) error {
	want, err := os.Stat(path)
	if err != nil {
		return err
	}
	for range 1000 {
		if got, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && os.SameFile(got, want) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("process %d did not enter %s", pid, strings.TrimPrefix(path, "/run/netns/"))
}
