package repotest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxReadmeLines keeps README.md an introduction: what emunic is, the two
// commands, who it is for and where things live. References go in docs/.
const maxReadmeLines = 200

// outsideRefs are names of things that exist only beside a working copy of
// emunic, never in a clone of it. They are built from pieces so that this
// file does not trip its own test.
var outsideRefs = []string{
	"../" + "shared", // a directory next to the checkout
	"DESIGN" + ".md", // a design note that was never part of the repository
}

// root is the repository's top directory: the nearest one above the test's
// directory that holds go.mod.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// repoFiles lists the repository's files, relative to root, with slashes.
// With git it is what a commit would hold (tracked, and untracked files not
// ignored), so build outputs such as scripts/siw-vm/out are left out; from a
// tarball without git it is every file outside hidden directories.
func repoFiles(t *testing.T, top string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = top
	if out, err := cmd.Output(); err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f == "" {
				continue
			}
			// A file deleted in the work tree is still in the index.
			if _, err := os.Stat(filepath.Join(top, filepath.FromSlash(f))); err == nil {
				files = append(files, f)
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != top && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(top, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readText returns a file's contents, or ok false for a binary file (one
// with a NUL byte: traces, fuzz corpora, captures), which cannot hold a
// reference anyone follows.
func readText(t *testing.T, top, rel string) (text string, ok bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(top, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return "", false
	}
	return string(b), true
}

func TestReadmeLength(t *testing.T) {
	text, _ := readText(t, root(t), "README.md")
	n := strings.Count(text, "\n")
	if !strings.HasSuffix(text, "\n") && text != "" {
		n++
	}
	if n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move reference material to docs/", n, maxReadmeLines)
	}
}

// outsidePaths returns the absolute paths a committed file must not name:
// the checkout's own location (a clone elsewhere has another), and each
// directory beside it. The directories beside a checkout in a shared system
// directory (the file system root, the temporary directory) are not
// collected: "/tmp/export" in an example is no reference to a neighbour.
func outsidePaths(t *testing.T, top string) []string {
	t.Helper()
	paths := []string{top + string(filepath.Separator)}
	parent := filepath.Dir(top)
	if parent == filepath.Dir(parent) || parent == filepath.Clean(os.TempDir()) {
		return paths
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return paths // an unreadable parent has no neighbours to name
	}
	for _, e := range entries {
		p := filepath.Join(parent, e.Name())
		if p == top || !e.IsDir() {
			continue
		}
		paths = append(paths, p+string(filepath.Separator))
	}
	return paths
}

func TestNoReferencesOutsideRepository(t *testing.T) {
	top := root(t)
	forbidden := append(append([]string{}, outsideRefs...), outsidePaths(t, top)...)
	for _, rel := range repoFiles(t, top) {
		text, ok := readText(t, top, rel)
		if !ok {
			continue
		}
		for _, ref := range forbidden {
			if i := strings.Index(text, ref); i >= 0 {
				line := strings.Count(text[:i], "\n") + 1
				t.Errorf("%s:%d refers to %q, outside the repository", rel, line, ref)
			}
		}
	}
}

// linkRE finds the target of an inline Markdown link or image: [text](target)
// or [text](target "title").
var linkRE = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)

// docFiles are the documents whose links a reader follows from the front
// page: README.md, ARCHITECTURE.md and everything in docs/.
func docFiles(files []string) []string {
	var docs []string
	for _, f := range files {
		if f == "README.md" || f == "ARCHITECTURE.md" ||
			(path.Dir(f) == "docs" && strings.HasSuffix(f, ".md")) {
			docs = append(docs, f)
		}
	}
	return docs
}

func TestRelativeLinksResolve(t *testing.T) {
	top := root(t)
	files := repoFiles(t, top)
	inRepo := map[string]bool{}
	for _, f := range files {
		inRepo[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			inRepo[d] = true // a link may name a directory
		}
	}
	docs := docFiles(files)
	if len(docs) < 3 {
		t.Fatalf("found only %v to check: is the repository listing right?", docs)
	}
	for _, doc := range docs {
		text, _ := readText(t, top, doc)
		sc := bufio.NewScanner(strings.NewReader(text))
		sc.Buffer(nil, 1<<20)
		fenced := false
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced // links are not links inside a code block
				continue
			}
			if fenced {
				continue
			}
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") ||
					strings.HasPrefix(target, "#") {
					continue // a web link or an anchor in this document
				}
				if i := strings.IndexByte(target, '#'); i >= 0 {
					target = target[:i]
				}
				resolved := path.Clean(path.Join(path.Dir(doc), target))
				switch {
				case resolved == ".." || strings.HasPrefix(resolved, "../") || path.IsAbs(target):
					t.Errorf("%s:%d links to %s, outside the repository", doc, n, m[1])
				case !inRepo[resolved]:
					t.Errorf("%s:%d links to %s, which is not in the repository", doc, n, m[1])
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
	}
}

// TestLinkPattern holds the link pattern to the forms the documents use, so
// that a link the pattern misses cannot pass the check unseen.
func TestLinkPattern(t *testing.T) {
	for line, want := range map[string]string{
		"see [docs/split.md](docs/split.md) for":    "docs/split.md",
		"[`.ci/run`](.ci/run)":                      ".ci/run",
		`[x](../ARCHITECTURE.md "the layers")`:      "../ARCHITECTURE.md",
		"[ports](ports.md#offloads), more":          "ports.md#offloads",
		"![diagram](<img/layers.png>)":              "img/layers.png",
		"[web](https://example.org/a_(b)) trailing": "https://example.org/a_(b",
	} {
		m := linkRE.FindStringSubmatch(line)
		if m == nil || m[1] != want {
			t.Errorf("link in %q: got %v, want %q", line, m, want)
		}
	}
}
