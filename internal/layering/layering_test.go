// Package layering holds the repository to its one boundary: the host
// side (tcpstack and everything built on it) sees the device only through
// the ABI (rings, the shared leaves), and the device side never sees the
// host. Only board (and the programs and tests that use it) put the two
// together.
package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/emunic/emunic"

// side is which side of the boundary a package is on.
type side int

const (
	neutral side = iota // shared leaves (rings, nic/hdr, seqnum, internal helpers) and composition (board, cmd, tests)
	host
	device
)

// sideOf classifies a package by its path in the module.
func sideOf(pkg string) side {
	under := func(root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }
	switch {
	case pkg == "nic/hdr":
		return neutral // wire headers: a shared leaf both sides parse frames with
	case under("tcpstack"), under("lwio"):
		return host
	case under("nic"), under("delegation"):
		return device
	}
	return neutral
}

// sharedLeaf tells the packages both sides import, which therefore import
// neither: the ABI (rings and below), the wire headers, sequence numbers.
func sharedLeaf(pkg string) bool {
	return pkg == "rings" || strings.HasPrefix(pkg, "rings/") || pkg == "nic/hdr" || pkg == "seqnum"
}

// allowed are the test files' imports across the boundary, each with why.
// A test may need the other side where it checks the two against each
// other; production code never. Besides these, a host package's tests may
// import board, to build whole machines (that is what board is for).
var allowed = []struct {
	from, to string // packages (module-relative): the importing test package, the imported one
	why      string
}{
	{"tcpstack", "nic", "tcpstack's internal tests build their hosts' devices themselves (board imports tcpstack: a cycle) and put gates between driver and device"},
	{"tcpstack", "nic/port", "tcpstack's internal tests give those devices in-memory wires"},
	{"tcpstack/direct", "nic/port", "sockets direct's tests impair the wire between two hosts (port.WireConfig)"},
	{"tcpstack/direct", "nic/port/porttest", "and spy on it"},
	{"tcpstack/direct", "delegation/iwarp", "the CRC test computes MPA's CRC32c as the device does, to corrupt a frame on the wire"},
	{"tcpstack/verbs", "delegation/iwarp", "the MPA v2 tests hand-build MPA frames with the device's encoder"},
}

type pkgInfo struct {
	imports     map[string]bool // non-test files
	testImports map[string]bool // _test.go files
}

// load parses the import clauses of every Go file in the module, whatever
// its build tags (a Linux-only file is held to the rule too).
func load(t *testing.T, root string) map[string]*pkgInfo {
	t.Helper()
	pkgs := map[string]*pkgInfo{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		p := pkgs[pkg]
		if p == nil {
			p = &pkgInfo{imports: map[string]bool{}, testImports: map[string]bool{}}
			pkgs[pkg] = p
		}
		for _, im := range f.Imports {
			ip := strings.Trim(im.Path.Value, `"`)
			if ip != module && !strings.HasPrefix(ip, module+"/") {
				continue
			}
			ip = strings.TrimPrefix(strings.TrimPrefix(ip, module), "/")
			if strings.HasSuffix(path, "_test.go") {
				p.testImports[ip] = true
			} else {
				p.imports[ip] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// violations lists, for every host or device package, the packages of the
// other side (or board) it reaches: through its own files' imports,
// transitively, and through its test files' direct imports unless
// allowed.
func violations(pkgs map[string]*pkgInfo) []string {
	var out []string
	// deps is a package's non-test closure, with the path to each dep.
	var deps func(pkg string, seen map[string]string, via string)
	deps = func(pkg string, seen map[string]string, via string) {
		p := pkgs[pkg]
		if p == nil {
			return
		}
		for im := range p.imports {
			if _, ok := seen[im]; ok {
				continue
			}
			seen[im] = via + " → " + im
			deps(im, seen, via+" → "+im)
		}
	}
	forbidden := func(from side, to string) bool {
		board := to == "board" || strings.HasPrefix(to, "board/")
		switch from {
		case neutral: // a shared leaf: the ABI both sides import
			return sideOf(to) != neutral || board
		case host:
			return sideOf(to) == device || to == "board" || strings.HasPrefix(to, "board/")
		case device:
			return sideOf(to) == host || to == "board" || strings.HasPrefix(to, "board/")
		}
		return false
	}
	isAllowed := func(from, to string) bool {
		for _, a := range allowed {
			if a.from == from && a.to == to {
				return true
			}
		}
		return false
	}
	for pkg, p := range pkgs {
		s := sideOf(pkg)
		if s == neutral && !sharedLeaf(pkg) {
			continue
		}
		seen := map[string]string{}
		deps(pkg, seen, pkg)
		for dep, path := range seen {
			if forbidden(s, dep) {
				out = append(out, path)
			}
		}
		for im := range p.testImports {
			if s == host && (im == "board" || strings.HasPrefix(im, "board/")) {
				continue
			}
			if forbidden(s, im) && !isAllowed(pkg, im) {
				out = append(out, pkg+" (test) → "+im)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestLayering: no host package reaches a device package or board, no
// device package reaches a host package or board, a shared leaf (rings,
// nic/hdr, seqnum) reaches neither, and no test file crosses the boundary
// but those the allow-list names.
func TestLayering(t *testing.T) {
	pkgs := load(t, "../..")
	if len(pkgs) < 20 || pkgs["tcpstack"] == nil || pkgs["nic"] == nil {
		t.Fatalf("found %d packages: not the module's root?", len(pkgs))
	}
	for _, v := range violations(pkgs) {
		t.Errorf("crosses the host/device boundary: %s", v)
	}
	for _, a := range allowed {
		if sideOf(a.from) == neutral || a.why == "" {
			t.Errorf("allow-list entry %s → %s: not a host or device package, or no reason", a.from, a.to)
		}
		if p := pkgs[a.from]; p == nil || !p.testImports[a.to] {
			t.Errorf("allow-list entry %s → %s: no test of %s imports it any more; drop the entry", a.from, a.to, a.from)
		}
	}
}

// TestLayeringCatchesAnImport: the check fails on a host package that
// imports a device package, directly or through a neutral one, and on a
// device package that imports a host package.
func TestLayeringCatchesAnImport(t *testing.T) {
	mk := func(imports ...string) *pkgInfo {
		p := &pkgInfo{imports: map[string]bool{}, testImports: map[string]bool{}}
		for _, im := range imports {
			p.imports[im] = true
		}
		return p
	}
	for name, pkgs := range map[string]map[string]*pkgInfo{
		"host → device":           {"tcpstack": mk("rings", "nic"), "nic": mk("rings"), "rings": mk()},
		"host → neutral → device": {"lwio": mk("internal/x"), "internal/x": mk("delegation"), "delegation": mk()},
		"device → host":           {"nic/split": mk("tcpstack"), "tcpstack": mk()},
		"host → board":            {"tcpstack/verbs": mk("board"), "board": mk()},
		"shared leaf → device":    {"rings": mk("nic"), "nic": mk()},
	} {
		if v := violations(pkgs); len(v) == 0 {
			t.Errorf("%s: no violation found", name)
		}
	}
	ok := map[string]*pkgInfo{"tcpstack": mk("rings", "nic/hdr"), "nic": mk("rings", "nic/hdr"), "board": mk("tcpstack", "nic")}
	if v := violations(ok); len(v) != 0 {
		t.Errorf("a clean graph: %v", v)
	}
}
