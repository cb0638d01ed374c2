package netnsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// openLinkDir opens the directory of an absolute link path without
// following symlinks, creating missing directories. Links under pinDir are
// resolved beneath pinDir; others (such as Rook's path under a CSI
// driver's folder) beneath "/".
func (s *Store) openLinkDir(link string, create bool) (int, error) {
	dir := filepath.Dir(link)
	if rel, ok := relWithin(dir, s.PinDir); ok {
		return openDirBeneath(s.pinDirFd, rel, create, 0o755)
	}
	root, err := unix.Open("/", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	return openDirBeneath(root, strings.TrimPrefix(dir, "/"), create, 0o755)
}

// setLink points link at the pin of attachment with a relative symlink,
// replaced atomically (symlink to a temporary name, then rename) so a
// reader such as ceph-csi's os.Stat never sees it missing.
func (s *Store) setLink(link, attachment string) error {
	target, err := filepath.Rel(filepath.Dir(link), s.pinPath(attachment))
	if err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	dfd, err := s.openLinkDir(link, true)
	if err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	defer unix.Close(dfd)
	base := filepath.Base(link)
	cur, kind, err := readLinkAt(dfd, base)
	if err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	switch {
	case kind == linkIsSymlink && cur == target:
		return nil
	case kind == linkIsOther:
		return fmt.Errorf("link %s: exists and is not a symlink; refusing to replace it", link)
	}
	tmp := tmpPrefix + base
	if err := unlinkIfExists(dfd, tmp); err != nil { // left by a crash
		return fmt.Errorf("link %s: %w", link, err)
	}
	if err := unix.Symlinkat(target, dfd, tmp); err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	if err := unix.Renameat(dfd, tmp, dfd, base); err != nil {
		return fmt.Errorf("link %s: %w", link, errors.Join(err, unlinkIfExists(dfd, tmp)))
	}
	return nil
}

// removeLink deletes link if it is a symlink into pins/: a link that
// someone else made is not ours to remove.
func (s *Store) removeLink(link string) error {
	dfd, err := s.openLinkDir(link, false)
	if noLinkDir(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	defer unix.Close(dfd)
	base := filepath.Base(link)
	cur, kind, err := readLinkAt(dfd, base)
	if err != nil || kind != linkIsSymlink {
		return err
	}
	if !s.pointsIntoPins(link, cur) {
		return nil
	}
	if err := unlinkIfExists(dfd, base); err != nil {
		return fmt.Errorf("remove link %s: %w", link, err)
	}
	return nil
}

// linkTarget returns the attachment a link points at ("" when it does not
// exist or does not point into pins/).
func (s *Store) linkTarget(link string) (string, error) {
	dfd, err := s.openLinkDir(link, false)
	if noLinkDir(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	cur, kind, err := readLinkAt(dfd, filepath.Base(link))
	if err != nil || kind != linkIsSymlink || !s.pointsIntoPins(link, cur) {
		return "", err
	}
	return filepath.Base(cur), nil
}

// noLinkDir reports an error of openLinkDir that proves no link of ours is
// there: the folder is missing, or a symlink or a file stands where it
// should be (folders are never followed through symlinks, so no link was
// ever made below one).
func noLinkDir(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)
}

func (s *Store) pointsIntoPins(link, target string) bool {
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(link), target)
	}
	return filepath.Dir(filepath.Clean(target)) == filepath.Join(s.PinDir, PinsSubdir)
}

type linkKind int

const (
	linkMissing linkKind = iota
	linkIsSymlink
	linkIsOther
)

func readLinkAt(dfd int, name string) (string, linkKind, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dfd, name, buf)
	switch {
	case err == nil:
		return string(buf[:n]), linkIsSymlink, nil
	case errors.Is(err, unix.ENOENT):
		return "", linkMissing, nil
	case errors.Is(err, unix.EINVAL):
		return "", linkIsOther, nil
	}
	return "", linkMissing, &os.PathError{Op: "readlink", Path: name, Err: err}
}

// relWithin returns p relative to dir when p is dir or below it.
func relWithin(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	if rest, ok := strings.CutPrefix(p, dir+"/"); ok {
		return rest, true
	}
	return "", false
}
