package cephfixture

import (
	"path/filepath"
	"regexp"
	"strings"
)

var (
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// %pK before the kernel's pointer-hashing key is ready (early after
	// boot, lib/vsprintf.c ptr_to_id) prints this instead of the hash
	ptrvalRE = regexp.MustCompile(`\(_+ptrval_+\)`)
	ip6RE    = regexp.MustCompile(`\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]`)
	numberRE = regexp.MustCompile(`[0-9A-Fa-f]*[0-9][0-9A-Fa-f]*`)
	blanksRE = regexp.MustCompile(`[ \t]+`)
	// names chosen by whoever made the client: the cephx user, the file
	// system, the mount point
	userRE  = regexp.MustCompile(`(name=|^|[ ,])[A-Za-z][A-Za-z0-9_.-]*@`)
	nameRE  = regexp.MustCompile(`name=[^,\s]+`)
	fsRE    = regexp.MustCompile(`(<uuid>)\.[A-Za-z][A-Za-z0-9_-]*=`)
	mountRE = regexp.MustCompile(`^(\S+ \S+ \S+ )\S+ \S+ (\S+)(?: [^-]\S*)* - `)
	// every field of /proc/net/tcp{,6} is hex, and a value may have no
	// decimal digit at all (port 0xCAAA)
	hexRE = regexp.MustCompile(`\b[0-9A-Fa-f]+\b`)
)

// FileShape is Shape, and for a file named mountinfo* (lines of
// /proc/<pid>/mountinfo) also takes the mount's root and mount point out;
// for one named proc_net_tcp* every hex value below the header is a
// number, whether or not it has a decimal digit.
func FileShape(name, content string) string {
	if strings.HasPrefix(filepath.Base(name), "proc_net_tcp") {
		lines := strings.Split(content, "\n")
		for i := 1; i < len(lines); i++ {
			lines[i] = hexRE.ReplaceAllString(lines[i], "#")
		}
		content = strings.Join(lines, "\n")
	}
	if strings.HasPrefix(name, "mountinfo") {
		lines := strings.Split(content, "\n")
		for i, l := range lines {
			lines[i] = mountRE.ReplaceAllString(l, "${1}<root> <mountpoint> ${2} - ")
		}
		content = strings.Join(lines, "\n")
	}
	return Shape(content)
}

// Shape is what a kernel file looks like with its values taken out: every
// UUID becomes "<uuid>", every IPv6 address in brackets "[<ip6>]", every number (decimal or hex, as in addresses,
// ports, nonces, client ids, inodes) "#", every run of blanks one space (a pointer the kernel printed as
// "(____ptrval____)" counts as a number);
// cephx user names, file system names and mountinfo's root and mount point
// become placeholders. Two files of the same shape differ only in values,
// so a fixture whose shape differs from what the kernel printed has drifted
// from it.
func Shape(content string) string {
	lines := strings.Split(content, "\n")
	for i, l := range lines {
		l = uuidRE.ReplaceAllString(l, "<uuid>")
		l = ptrvalRE.ReplaceAllString(l, "0")
		l = ip6RE.ReplaceAllString(l, "[<ip6>]")
		l = fsRE.ReplaceAllString(l, "${1}.<fs>=")
		l = userRE.ReplaceAllString(l, "${1}<user>@")
		l = nameRE.ReplaceAllString(l, "name=<user>")
		l = numberRE.ReplaceAllString(l, "#")
		lines[i] = strings.TrimSpace(blanksRE.ReplaceAllString(l, " "))
	}
	return strings.Join(lines, "\n")
}
