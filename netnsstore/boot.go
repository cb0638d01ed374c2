package netnsstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/netns-pin/netns-pin/internal/regfile"
)

// bootMarker is the file in stateDir that names the boot whose operations
// write records there (design §10). It is written durably, once per boot,
// under the lock and before that boot's first record. Records are written
// without fsync, so a power loss can leave one empty or torn; such a record
// found while the marker still names an earlier boot was written in that
// boot, since every record of this boot comes after the marker is rewritten.
// That tells a torn record of a dead boot, which is dropped, from one
// that became unreadable in this boot, which blocks every release as
// before (not known to be unused is in use). No clock is involved.
const bootMarker = "boot-id"

// markBoot runs under the lock at the start of every operation that may
// write. When the marker names another boot, the records that cannot be
// decoded are that boot's and are dropped with what they left; then the
// marker is rewritten for this boot. The marker also names the pinDir its
// records were made under: a store with another pinDir drops nothing (it
// would look for their pins and links in the wrong place) and refuses while
// the stateDir holds records, as it does for a readable record of another
// pinDir. A missing marker (a new stateDir, or one of a netns-pin that
// synced every record) drops nothing.
// A read-only view changes nothing: it is told what would be dropped.
func (s *Store) markBoot(v *view, readOnly bool) error {
	prev, prevPinDir, err := s.markedBoot()
	switch {
	case err != nil:
		return err
	case readOnly:
		for _, n := range s.tornOf(v, prev, prevPinDir) {
			delete(v.bad, n)
			v.repaired = append(v.repaired, tornFinding(n, prev))
		}
		return nil
	case prev == s.bootID && prevPinDir == s.PinDir:
		return nil
	case prevPinDir != "" && prevPinDir != s.PinDir && (len(v.recs) > 0 || len(v.bad) > 0):
		return fmt.Errorf("%w: %s/%s says its records were made under pinDir %s, this store's pinDir is %s",
			ErrOtherPinDir, s.StateDir, bootMarker, prevPinDir, s.PinDir)
	}
	for _, n := range s.tornOf(v, prev, prevPinDir) {
		if err := errors.Join(s.removeLinksInto(v, n), s.removeRecord(n)); err != nil {
			s.log.Error("drop a torn record of an earlier boot", "attachment", n, "error", err)
			continue
		}
		delete(v.bad, n)
		s.log.Warn("dropped a record left empty or torn by a power loss", "attachment", n, "bootID", prev)
		v.repaired = append(v.repaired, tornFinding(n, prev))
	}
	if err := s.replaceFile(s.stateFd, bootMarker, []byte(s.bootID+"\n"+s.PinDir+"\n"), true); err != nil {
		return fmt.Errorf("write %s/%s: %w", s.StateDir, bootMarker, err)
	}
	return nil
}

// markedBoot is the boot and the pinDir the marker names, "" when there is
// no marker (or it names no pinDir).
func (s *Store) markedBoot() (boot, pinDir string, err error) {
	data, err := regfile.ReadBeneath(s.stateFd, bootMarker, 4096)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("read %s/%s: %w", s.StateDir, bootMarker, err)
	}
	boot, pinDir, _ = strings.Cut(strings.TrimSpace(string(data)), "\n")
	boot = strings.TrimSpace(boot)
	if !isBootID(boot) {
		// Not what this store writes: it tells no boot, like a missing
		// marker (drops nothing), and is never printed.
		boot = ""
	}
	return boot, strings.TrimSpace(pinDir), nil
}

// isBootID reports whether s has the kernel's boot_id form, a UUID in
// lower-case hex (8-4-4-4-12).
func isBootID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range []byte(s) {
		if dash := i == 8 || i == 13 || i == 18 || i == 23; dash != (c == '-') || !dash && !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// tornOf lists the records of v that a power loss in boot prev left empty
// or torn, when prev is an earlier boot the marker names and pinDir, the
// marker's, is this store's: their pin file,
// which no mount outlives, is then a plain file without a record, which
// repair removes. A torn record whose pin is a mount after all (it cannot
// be of a dead boot) is not listed, and keeps blocking.
func (s *Store) tornOf(v *view, prev, pinDir string) []string {
	if prev == "" || prev == s.bootID || pinDir != s.PinDir {
		return nil
	}
	var names []string
	for n, err := range v.bad {
		if !errors.Is(err, errTornRecord) {
			continue
		}
		if _, mounted, err := s.pinState(n); err != nil || mounted {
			s.log.Error("torn record of an earlier boot whose pin is a mount, or cannot be inspected: kept", "attachment", n, "bootID", prev, "error", err)
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func tornFinding(attachment, prev string) Finding {
	return Finding{Attachment: attachment, Action: ActionDrop, Reason: "record left empty or torn by a power loss in the earlier boot " + prev}
}

// linkDirsFile lists, one per line, every folder outside pinDir that a
// link was ever made in (absolute link templates, such as Rook's path):
// the only way to find the links of a record that a power loss tore. It
// grows by one durable write the first time a folder is used, which is
// once per link template, not once per pin.
const linkDirsFile = "link-dirs"

// linkDirs is the folders of linkDirsFile; none when it does not exist.
func (s *Store) linkDirs() ([]string, error) {
	data, err := regfile.ReadBeneath(s.stateFd, linkDirsFile, 1<<20)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s/%s: %w", s.StateDir, linkDirsFile, err)
	}
	return strings.Fields(string(data)), nil
}

// noteLinkDirs adds the folders of links outside pinDir to linkDirsFile,
// durably, before a record that names them is written.
func (s *Store) noteLinkDirs(links []string) error {
	known, err := s.linkDirs()
	if err != nil {
		return err
	}
	n := len(known)
	for _, l := range links {
		dir := filepath.Dir(l)
		if _, within := relWithin(dir, s.PinDir); !within && !slices.Contains(known, dir) {
			known = append(known, dir)
		}
	}
	if len(known) == n {
		return nil
	}
	if err := s.replaceFile(s.stateFd, linkDirsFile, []byte(strings.Join(known, "\n")+"\n"), true); err != nil {
		return fmt.Errorf("write %s/%s: %w", s.StateDir, linkDirsFile, err)
	}
	return nil
}

// removeLinksInto removes every link that leads to the pin of attachment:
// under pinDir, and in the folders of linkDirsFile and of the records v
// could read.
func (s *Store) removeLinksInto(v *view, attachment string) error {
	var errs []error
	check := func(p string) {
		at, err := s.linkTarget(p)
		if err == nil && at == attachment {
			err = s.removeLink(p)
		}
		errs = append(errs, err)
	}
	err := filepath.WalkDir(s.PinDir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			errs = append(errs, err)
		case d.IsDir() && p == filepath.Join(s.PinDir, PinsSubdir):
			return fs.SkipDir
		case d.Type()&fs.ModeSymlink != 0:
			check(p)
		}
		return nil
	})
	dirs, lerr := s.linkDirs()
	errs = append(errs, err, lerr)
	for _, r := range v.recs {
		for _, l := range r.Links {
			if dir := filepath.Dir(l); !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
	}
	for _, dir := range dirs {
		if _, within := relWithin(dir, s.PinDir); within {
			continue // walked above
		}
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		for _, en := range entries {
			if en.Type()&fs.ModeSymlink != 0 {
				check(filepath.Join(dir, en.Name()))
			}
		}
	}
	return errors.Join(errs...)
}
