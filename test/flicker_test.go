package e2e

// Links never flicker (docs/design.md §8): while a holder's netns is in
// use, no release attempt takes its link away, not even for the length of
// an in-use check. ceph-csi os.Stat's netNamespaceFilePath before every
// nsenter, so a NodeStage that lands in such a gap fails. Needs root.

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/netns-pin/netns-pin/internal/host"
	"github.com/netns-pin/netns-pin/internal/hosttest"
)

// linkWatch looks at a link in a tight loop, as often as it can, as
// ceph-csi's os.Stat before each nsenter does, and counts the looks and
// the ones that found it wrong, with the first of those.
type linkWatch struct {
	looks, misses atomic.Int64
	first         atomic.Value
	stop          chan struct{}
	once          sync.Once
	wg            sync.WaitGroup
}

// watchLink starts looking: ok says what a look must find. It stops at
// end, or at the test's cleanup.
func watchLink(t *testing.T, ok func() error) *linkWatch {
	w := &linkWatch{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			if err := ok(); err != nil {
				w.misses.Add(1)
				w.first.CompareAndSwap(nil, err.Error())
			}
			w.looks.Add(1)
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *linkWatch) end() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// assertNoMiss requires that the watch ran throughout and never missed.
func (w *linkWatch) assertNoMiss(t *testing.T, what string) {
	t.Helper()
	w.end()
	t.Logf("%d looks at the link during %s", w.looks.Load(), what)
	require.Greater(t, w.looks.Load(), int64(1000), "the watcher ran throughout")
	require.Zero(t, w.misses.Load(), "the link was wrong %d times during %s (first: %v)", w.misses.Load(), what, w.first.Load())
}

// The holder is deleted while a client uses its netns and no newer holder
// exists (a node drain): its pin is draining and the cluster's link leads
// to it. DEL retries, as the kubelet sends them, and sweeper rounds settle
// that pin again and again; a watcher that stats the link throughout sees
// it every time. After the client leaves, the next DEL releases the pin and
// the link goes.
func TestLinkNeverFlickersWhileADrainingPinIsInUse(t *testing.T) {
	c := newChain(t, chainSpec{})
	ns := hosttest.NewNetns(t, "npe2e")
	a := c.newAttachment(t, ns, holderArgs(), false)
	res := a.mustAdd(t)
	ip := sandboxIP(t, res)
	link := c.defaultLink()
	cl := startClient(t, link, ns.ID, "")

	w := watchLink(t, func() error { _, err := os.Stat(link); return err })
	sw := startSweeper(t, c)
	for range 25 {
		assertKeptInUse(t, a, a.del(), ip)
	}
	waitRounds(t, c, 10)
	sw.stop(t)
	w.assertNoMiss(t, "25 refused DELs and 10 sweeper rounds")
	assertLinkTo(t, link, a)

	cl.stop(t)
	require.True(t, host.Poll(30*time.Second, 20*time.Millisecond, func() bool { return a.del() == nil }),
		"DEL succeeds once the client is gone")
	ns.Delete(t)
	assertReleased(t, a)
	assertNoLink(t, link)
}

// The same with a second holder of the cluster, older and draining too
// (two holders deleted in a row): the link leads to the newest draining
// pin, and a refused release of that pin never sends it to the other one.
func TestLinkStaysOnTheNewestDrainingPinWhileItIsInUse(t *testing.T) {
	c := newChain(t, chainSpec{})
	nsOld, nsNew := hosttest.NewNetns(t, "npe2e"), hosttest.NewNetns(t, "npe2e")
	old := c.newAttachment(t, nsOld, holderArgs(), false)
	ipOld := sandboxIP(t, old.mustAdd(t))
	link := c.defaultLink()
	clOld := startClient(t, link, nsOld.ID, "")
	newer := c.newAttachment(t, nsNew, holderArgs(), false)
	ipNew := sandboxIP(t, newer.mustAdd(t))
	clNew := startClient(t, link, nsNew.ID, "")
	assertKeptInUse(t, old, old.del(), ipOld)

	w := watchLink(t, func() error {
		id, err := host.NSIDOf(link)
		if err == nil && id != nsNew.ID {
			err = fmt.Errorf("leads to %v, not to the newest draining pin's %v", id, nsNew.ID)
		}
		return err
	})
	for range 25 {
		assertKeptInUse(t, newer, newer.del(), ipNew)
		assertKeptInUse(t, old, old.del(), ipOld)
	}
	w.assertNoMiss(t, "50 refused DELs of two draining pins")

	clNew.stop(t)
	clOld.stop(t)
	require.NoError(t, newer.del())
	require.NoError(t, old.del())
	assertNoLink(t, link)
}
