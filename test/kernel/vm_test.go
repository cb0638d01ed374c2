package kernel

// The guest: hack/vm/build.sh's kernel and initramfs, plus a second cpio
// archive with the programs the guest runs, checked static; a tap on the
// cluster's bridge; qemu under TCG with a bounded run.

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/netns-pin/netns-pin/internal/host"
)

// buildGuest runs hack/vm/build.sh for kernel k (cached) and returns its
// folder.
func buildGuest(k string) (string, error) {
	out, err := runScript(10*time.Minute, filepath.Join(repoRoot(), "hack", "vm", "build.sh"), k)
	if err != nil {
		return "", fmt.Errorf("hack/vm/build.sh %s: %w\n%s", k, err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	dir := lines[len(lines)-1]
	for _, f := range []string{"vmlinux", "initramfs.cpio.gz", "kernel.release"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("hack/vm/build.sh %s printed %q: %w\n%s", k, dir, err, out)
		}
	}
	return dir, nil
}

// buildRunner builds test/kernel/guest static into dir.
func buildRunner(dir string) (string, error) {
	bin := filepath.Join(dir, "kernel-guest")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("CGO_ENABLED=0 go build ./test/kernel/guest: %w\n%s", err, out)
	}
	return bin, nil
}

// checkStatic fails for a dynamically linked program: the guest has no C
// library (only iproute2's ip brings its own).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (has an ELF interpreter): build it with CGO_ENABLED=0", path)
		}
	}
	if f.Section(".dynamic") != nil {
		return fmt.Errorf("%s has a .dynamic section: build it with CGO_ENABLED=0", path)
	}
	return nil
}

// writeInitrd writes base followed by a gzip'd newc cpio archive holding
// bins (name -> host path) under /np: the kernel unpacks both in order.
func writeInitrd(path, base string, bins map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := os.Open(base)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, b)
	b.Close()
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		return err
	}
	ino := 1
	entry := func(name string, mode uint32, data []byte) error {
		ino++
		hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		var buf bytes.Buffer
		buf.WriteString(hdr)
		buf.WriteString(name)
		buf.WriteByte(0)
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
		buf.Write(data)
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
		_, err := zw.Write(buf.Bytes())
		return err
	}
	if err := entry("np", 0o040755, nil); err != nil {
		return err
	}
	for name, p := range bins {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := entry("np/"+name, 0o100755, data); err != nil {
			return err
		}
	}
	if err := entry("TRAILER!!!", 0, nil); err != nil {
		return err
	}
	return zw.Close()
}

// tap is a tap device on the cluster's bridge.
func addTap(bridge string) (string, error) {
	name := "npvt" + host.RandHex(6)
	for _, args := range [][]string{
		{"tuntap", "add", "dev", name, "mode", "tap"},
		{"link", "set", name, "master", bridge, "up"},
	} {
		if r := host.RunCmd(30*time.Second, nil, nil, "ip", args...); r.Err != nil {
			_ = host.RunCmd(30*time.Second, nil, nil, "ip", "link", "del", name)
			return "", fmt.Errorf("%s", r)
		}
	}
	return name, nil
}

// vm is a running qemu.
type vm struct {
	cmd     *exec.Cmd
	console *syncBuffer
	logPath string
	done    chan error
	start   time.Time
	took    time.Duration
}

// syncBuffer collects the console and copies it to a file.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	f   *os.File
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.f != nil {
		_, _ = b.f.Write(p)
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startVM boots the guest; guestTimeout is the guest's own watchdog, the
// host kills qemu (by its PID) a minute after it.
// taps become the guest's eth0, eth1, ... in order (fixed PCI slots), with
// MACs of their own for each guest index (qemu's default MAC is the same in
// every qemu, and guests booted at once share the clusters' bridges).
func startVM(ctx context.Context, vmDir, initrd, share string, taps []string, index int, logPath string, guestTimeout time.Duration) (*vm, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{
		"-accel", "tcg", "-m", "1024", "-smp", "2", "-nodefaults", "-no-reboot", "-display", "none",
		"-serial", "stdio", "-monitor", "none",
		"-kernel", filepath.Join(vmDir, "vmlinux"), "-initrd", initrd,
		"-append", fmt.Sprintf("console=ttyS0 panic=-1 quiet vm.timeout=%d", int(guestTimeout.Seconds())),
		"-virtfs", "local,path=" + share + ",mount_tag=share,security_model=none,id=share",
	}
	for i, tap := range taps {
		args = append(args, "-netdev", fmt.Sprintf("tap,id=n%d,ifname=%s,script=no,downscript=no", i, tap),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=n%d,addr=0x%x,mac=52:54:00:6e:%02x:%02x", i, 0x10+i, index, i))
	}
	cctx, cancel := context.WithTimeout(ctx, guestTimeout+time.Minute)
	cmd := exec.CommandContext(cctx, "qemu-system-x86_64", args...)
	v := &vm{cmd: cmd, console: &syncBuffer{f: f}, logPath: logPath, done: make(chan error, 1), start: time.Now()}
	cmd.Stdout, cmd.Stderr = v.console, v.console
	cmd.Stdin = nil
	if err := cmd.Start(); err != nil {
		cancel()
		f.Close()
		return nil, fmt.Errorf("qemu-system-x86_64: %w", err)
	}
	go func() {
		err := cmd.Wait()
		v.took = time.Since(v.start)
		if cctx.Err() != nil {
			err = fmt.Errorf("qemu killed after %s (the guest's watchdog did not end it): %w", guestTimeout+time.Minute, err)
		}
		cancel()
		f.Close()
		v.done <- err
	}()
	return v, nil
}

// kill ends qemu by its PID (cleanup of a run that did not end by itself).
func (v *vm) kill() {
	// (os.ErrProcessDone once it exited: nothing to do)
	_ = v.cmd.Process.Kill()
}
