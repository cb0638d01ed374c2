package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxReadmeLines bounds README.md: it is the user's page (what netns-pin
// solves, how to install and run it); everything longer belongs in docs/.
const maxReadmeLines = 250

// The documentation: the README and every *.md here.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no docs/*.md")
	return append([]string{filepath.Join("..", "README.md")}, files...)
}

func TestReadmeIsShort(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	n := len(lines(string(data)))
	assert.LessOrEqual(t, n, maxReadmeLines,
		"README.md has %d lines; move detail into docs/ (performance.md, testing.md, operating.md, ...)", n)
}

// Every relative link of the documentation leads to a file or folder of
// the repository, and every #anchor to a heading of the file it names,
// spelled as GitHub spells heading anchors.
func TestLinksResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	problems, err := checkLinks(root, markdownFiles(t))
	require.NoError(t, err)
	assert.Empty(t, problems, "broken links:\n%s", strings.Join(problems, "\n"))
}

// The checker itself finds what it is for: a missing file, a missing
// anchor (in the same file and in another), a link out of the
// repository, and an anchor into a file that has no headings; and it
// accepts the forms the documentation uses.
func TestCheckLinksFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	write("deploy/x.yaml", "a: 1\n")
	other := write("docs/other.md", "# Other\n\n## Multus thick mode\n\n## Repeated\n\n## Repeated\n")
	main := write("README.md", strings.Join([]string{
		"# Main",
		"## A holder stuck in `Terminating`",
		"Good: [a](docs/other.md), [b](docs/other.md#multus-thick-mode), [c](#a-holder-stuck-in-terminating),",
		"[d](deploy/x.yaml), [e](deploy), [f](docs/other.md#repeated-1), [g](https://example.org/x#y),",
		"`[not a link](nowhere.md)`, and [ref][r].",
		"",
		"```",
		"[in a code block](nowhere.md)",
		"```",
		"",
		"[r]: docs/other.md#other",
		"",
		"Broken: [h](docs/missing.md), [i](docs/other.md#multus-thin-mode), [j](#nowhere),",
		"[k](../outside.md), [l](deploy/x.yaml#a), [m](docs/other.md#repeated-2).",
		"[s]: docs/gone.md",
	}, "\n")+"\n")
	problems, err := checkLinks(root, []string{main, other})
	require.NoError(t, err)
	want := []string{
		"README.md:13: docs/missing.md: no such file",
		"README.md:13: docs/other.md#multus-thin-mode: no heading with that anchor in docs/other.md",
		"README.md:13: #nowhere: no heading with that anchor in README.md",
		"README.md:14: ../outside.md: leads out of the repository",
		"README.md:14: deploy/x.yaml#a: an anchor into deploy/x.yaml, which is not markdown",
		"README.md:14: docs/other.md#repeated-2: no heading with that anchor in docs/other.md",
		"README.md:15: docs/gone.md: no such file",
	}
	assert.Equal(t, want, problems)
}

// GitHub's heading anchors (github-slugger, as github.com renders
// markdown): the heading's text as rendered, lower case, every character
// but letters, digits, '-', '_' and spaces dropped, spaces made '-';
// repeats get -1, -2, ...
func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Quick start":                                    "quick-start",
		"What \"in use\" means":                          "what-in-use-means",
		"Real Kubernetes: the holder's whole life":       "real-kubernetes-the-holders-whole-life",
		"§8 The invariant":                               "8-the-invariant",
		"Ceph-side matrix: who can point at the link":    "ceph-side-matrix-who-can-point-at-the-link",
		"`netns-pinctl sweep --once`":                    "netns-pinctl-sweep---once",
		"Another pinDir or stateDir, other in-use roots": "another-pindir-or-statedir-other-in-use-roots",
		"See [the guide](operating.md) *now*":            "see-the-guide-now",
		"snake_case and UTF-8 Zürich":                    "snake_case-and-utf-8-zürich",
	} {
		assert.Equal(t, want, slug(in), "%q", in)
	}
}

var (
	fenceRE   = regexp.MustCompile("^\\s*(```+|~~~+)")
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	// inline links and images: [text](dest) or [text](dest "title")
	inlineLinkRE = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// reference definitions: [label]: dest
	refDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	// explicit anchors: <a id="x"> or <a name="x">
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// doc is a markdown file as the checker sees it.
type doc struct {
	anchors map[string]bool
	links   []link
}

type link struct {
	line int
	dest string
}

// checkLinks reports every broken relative link and anchor of files
// (paths under root) as "<file relative to root>:<line>: <dest>: <why>",
// in file order.
func checkLinks(root string, files []string) ([]string, error) {
	parsed := map[string]*doc{}
	load := func(path string) (*doc, error) {
		if d, ok := parsed[path]; ok {
			return d, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		d := parseMarkdown(string(data))
		parsed[path] = d
		return d, nil
	}
	var problems []string
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, err
		}
		d, err := load(abs)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, abs)
		if err != nil {
			return nil, err
		}
		for _, l := range d.links {
			if why := checkLink(root, abs, l.dest, load); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", filepath.ToSlash(rel), l.line, l.dest, why))
			}
		}
	}
	return problems, nil
}

// checkLink says what is wrong with dest, a link in the file at from; ""
// when nothing is (external links are not this test's business).
func checkLink(root, from, dest string, load func(string) (*doc, error)) string {
	if dest == "" || schemeRE.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return ""
	}
	path, frag, _ := strings.Cut(dest, "#")
	target := from
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return "an absolute path; link relative to this file"
		}
		target = filepath.Join(filepath.Dir(from), filepath.FromSlash(path))
		if r, err := filepath.Rel(root, target); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return "leads out of the repository"
		}
		if _, err := os.Stat(target); err != nil {
			return "no such file"
		}
	}
	if frag == "" {
		return ""
	}
	relTarget, _ := filepath.Rel(root, target)
	relTarget = filepath.ToSlash(relTarget)
	if !strings.HasSuffix(target, ".md") {
		return "an anchor into " + relTarget + ", which is not markdown"
	}
	d, err := load(target)
	if err != nil {
		return err.Error()
	}
	if !d.anchors[frag] {
		return "no heading with that anchor in " + relTarget
	}
	return ""
}

// parseMarkdown finds the headings (as anchors) and the links of a
// markdown text, outside fenced code blocks and code spans.
func parseMarkdown(text string) *doc {
	d := &doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	var fence string
	orig, ls := lines(text), lines(stripCodeSpans(text))
	for i, ln := range ls {
		if m := fenceRE.FindStringSubmatch(ln); m != nil {
			switch {
			case fence == "":
				fence = m[1]
				continue
			case strings.HasPrefix(m[1], fence):
				fence = ""
				continue
			}
		}
		if fence != "" {
			continue
		}
		// a heading's anchor comes from its text with its code spans
		if m := headingRE.FindStringSubmatch(orig[i]); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				d.anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				d.anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(ln, -1) {
			d.anchors[m[1]] = true
		}
		if m := refDefRE.FindStringSubmatch(ln); m != nil {
			d.links = append(d.links, link{i + 1, m[1]})
			continue
		}
		for _, m := range inlineLinkRE.FindAllStringSubmatch(ln, -1) {
			d.links = append(d.links, link{i + 1, m[1]})
		}
	}
	return d
}

// stripCodeSpans blanks the content of code spans (`...`, “...“) in
// the paragraphs outside fenced code blocks, also across the lines of one
// paragraph, keeping the line structure; a backtick run without its
// closing run is literal text.
func stripCodeSpans(text string) string {
	ls := lines(text)
	var fence string
	para := []int{} // indexes of the current paragraph's lines
	flush := func() {
		if len(para) == 0 {
			return
		}
		joined := make([]string, len(para))
		for k, i := range para {
			joined[k] = ls[i]
		}
		for k, s := range strings.Split(blankSpans(strings.Join(joined, "\n")), "\n") {
			ls[para[k]] = s
		}
		para = para[:0]
	}
	for i, ln := range ls {
		if m := fenceRE.FindStringSubmatch(ln); m != nil && (fence == "" || strings.HasPrefix(m[1], fence)) {
			flush()
			if fence == "" {
				fence = m[1]
			} else {
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		if strings.TrimSpace(ln) == "" {
			flush()
			continue
		}
		para = append(para, i)
	}
	flush()
	return strings.Join(ls, "\n")
}

// blankSpans blanks the content of the code spans of one paragraph.
func blankSpans(p string) string {
	out := []byte(p)
	for i := 0; i < len(p); {
		if p[i] != '`' {
			i++
			continue
		}
		n := run(p, i)
		closeAt := -1
		for j := i + n; j < len(p); {
			if p[j] != '`' {
				j++
				continue
			}
			if m := run(p, j); m != n {
				j += m
				continue
			}
			closeAt = j
			break
		}
		if closeAt < 0 {
			i += n
			continue
		}
		for k := i + n; k < closeAt; k++ {
			if out[k] != '\n' {
				out[k] = ' '
			}
		}
		i = closeAt + n
	}
	return string(out)
}

// run is the length of the backtick run at p[i].
func run(p string, i int) int {
	n := 0
	for i+n < len(p) && p[i+n] == '`' {
		n++
	}
	return n
}

// slug is GitHub's anchor of a heading's markdown text.
func slug(heading string) string {
	text := regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// lines splits a file's text into its lines (no empty last line for the
// final newline).
func lines(text string) []string {
	if text == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}
