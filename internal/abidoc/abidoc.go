// Package abidoc reads the two sides of a byte-level contract: the
// markdown tables of a protocol document (docs/rings.md, docs/abi-blocks.md,
// the LWIO and sockets-direct layouts) and the exported constants of the Go
// package that implements it. The doc tests compare the two in both
// directions, and the C header generator turns them into a header; both
// read them here, the one way.
package abidoc

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Table is one markdown table of a document (outside code fences), under
// the nearest heading above it.
type Table struct {
	Path    string
	Heading string
	Line    int            // the header row's line
	Cols    map[string]int // lower-cased column name → index
	Rows    []Row          // data rows (the separator row is not one)
}

// Row is a data row: its line and its cells, trimmed.
type Row struct {
	Line  int
	Cells []string
}

// Cell returns r's cell in column col (lower case), and whether t has it.
func (t *Table) Cell(r Row, col string) (string, bool) {
	i, ok := t.Cols[col]
	if !ok {
		return "", false
	}
	return r.Cells[i], true
}

// Where names r for an error message: path:line (heading).
func (t *Table) Where(r Row) string {
	return fmt.Sprintf("%s:%d (%s)", t.Path, r.Line, t.Heading)
}

// Has reports whether t has every one of cols (lower case).
func (t *Table) Has(cols ...string) bool {
	for _, c := range cols {
		if _, ok := t.Cols[c]; !ok {
			return false
		}
	}
	return true
}

// Doc is a parsed document: its tables and its headings in order.
type Doc struct {
	Tables   []*Table
	Headings []string
	// Problems are rows the parser could not take (a row not closed by |,
	// a cell count that differs from the header's); the doc tests report
	// them, a generator refuses the document.
	Problems []string
}

// ParseFile parses the markdown document at path.
func ParseFile(path string) (*Doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &Doc{}
	var cur *Table
	heading := ""
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			cur = nil
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "#") {
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
			d.Headings = append(d.Headings, heading)
		}
		if !strings.HasPrefix(line, "|") {
			cur = nil
			continue
		}
		if !strings.HasSuffix(line, "|") {
			d.Problems = append(d.Problems, fmt.Sprintf("%s:%d: table row does not end with |", path, n))
			continue
		}
		cells := strings.Split(line[1:len(line)-1], "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cur == nil {
			cur = &Table{Path: path, Heading: heading, Line: n, Cols: map[string]int{}}
			for i, c := range cells {
				cur.Cols[strings.ToLower(c)] = i
			}
			d.Tables = append(d.Tables, cur)
			continue
		}
		if len(cells) != len(cur.Cols) {
			d.Problems = append(d.Problems, fmt.Sprintf("%s:%d: %d cells, the table header has %d (a | inside a cell?)", path, n, len(cells), len(cur.Cols)))
			continue
		}
		if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue // separator
		}
		cur.Rows = append(cur.Rows, Row{Line: n, Cells: cells})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return d, nil
}

// Ident returns the Go identifier in a `backticked` cell, or "" for — (or
// - or an empty cell).
func Ident(cell string) (string, error) {
	if cell == "—" || cell == "-" || cell == "" {
		return "", nil
	}
	if len(cell) < 3 || cell[0] != '`' || cell[len(cell)-1] != '`' {
		return "", fmt.Errorf("cell %q is neither `Identifier` nor —", cell)
	}
	id := cell[1 : len(cell)-1]
	if !token.IsIdentifier(id) {
		return "", fmt.Errorf("cell %q is not an identifier", cell)
	}
	return id, nil
}

// Num parses a number cell (0x.., decimal).
func Num(cell string) (uint64, error) { return strconv.ParseUint(cell, 0, 64) }

// Const is an exported package-level constant of a Go package.
type Const struct {
	Name string
	Type string // the named type, or "" for an untyped constant
	File string // base name of the declaring file
	Line int
	Doc  string // the line comment, trimmed
	Val  constant.Value
}

// Uint64 is the constant's value as a uint64.
func (c Const) Uint64() (uint64, bool) { return constant.Uint64Val(constant.ToInt(c.Val)) }

// Package is a Go package as the doc tests and generators see it: its
// type-checked non-test files and its exported package-level constants.
type Package struct {
	Fset   *token.FileSet
	Types  *types.Package
	Consts map[string]Const // by name
}

// Load type-checks the non-test Go files in dir (imports are not resolved:
// a wire constant never depends on one) and collects the exported
// package-level constants with their line comments.
func Load(dir string) (*Package, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var files []*ast.File
	comments := map[string]map[int]string{} // file → line → line comment
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		lc := map[int]string{}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				if vs := s.(*ast.ValueSpec); vs.Comment != nil {
					lc[fset.Position(vs.Pos()).Line] = strings.TrimSpace(vs.Comment.Text())
				}
			}
		}
		comments[filepath.Base(name)] = lc
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("abidoc: no Go files in %s", dir)
	}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check(files[0].Name.Name, fset, files, nil)
	p := &Package{Fset: fset, Types: pkg, Consts: map[string]Const{}}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || !c.Exported() {
			continue
		}
		if c.Val().Kind() == constant.Unknown {
			return nil, fmt.Errorf("abidoc: constant %s has no value (type-check failure?)", name)
		}
		pos := fset.Position(c.Pos())
		gc := Const{Name: name, Val: c.Val(), File: filepath.Base(pos.Filename), Line: pos.Line}
		gc.Doc = comments[gc.File][pos.Line]
		if n, ok := c.Type().(*types.Named); ok {
			gc.Type = n.Obj().Name()
		}
		p.Consts[name] = gc
	}
	return p, nil
}

// emptyImporter gives every import an empty package: the files' references
// to other packages fail to type-check, which no constant depends on.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	p := types.NewPackage(path, path[strings.LastIndex(path, "/")+1:])
	p.MarkComplete()
	return p, nil
}

// CompareDoc holds a protocol document's tables to a package's constants
// in both directions and returns what disagrees: every row of an offset
// table (columns Offset and Constant) or a value table (Value and
// Constant) that names a constant must give its value ("—" in an offset
// cell stands for a variable-length field and is not compared), and every
// constant owned (by the caller's rule) must have a row.
func CompareDoc(pkg *Package, doc *Doc, owned func(Const) bool) []string {
	out := append([]string(nil), doc.Problems...)
	seen := map[string]bool{}
	for _, tb := range doc.Tables {
		col := ""
		switch {
		case tb.Has("offset", "constant"):
			col = "offset"
		case tb.Has("value", "constant"):
			col = "value"
		default:
			continue
		}
		for _, r := range tb.Rows {
			cc, _ := tb.Cell(r, "constant")
			name, err := Ident(cc)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: %v", tb.Where(r), err))
				continue
			}
			if name == "" {
				continue
			}
			c, ok := pkg.Consts[name]
			if !ok {
				out = append(out, fmt.Sprintf("%s: no constant %s in the package", tb.Where(r), name))
				continue
			}
			seen[name] = true
			cell, _ := tb.Cell(r, col)
			if cell == "—" {
				continue
			}
			v, err := Num(cell)
			got, _ := c.Uint64()
			if err != nil || v != got {
				out = append(out, fmt.Sprintf("%s: %s is %s in the doc, %d in the code", tb.Where(r), name, cell, got))
			}
		}
	}
	names := make([]string, 0, len(pkg.Consts))
	for name := range pkg.Consts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if c := pkg.Consts[name]; owned(c) && !seen[name] {
			out = append(out, fmt.Sprintf("constant %s (%s:%d) is not in the doc", name, c.File, c.Line))
		}
	}
	return out
}

// CheckDoc loads the package in dir and the document at docPath and
// compares them (CompareDoc); an error is one of reading them.
func CheckDoc(dir, docPath string, owned func(Const) bool) ([]string, error) {
	pkg, err := Load(dir)
	if err != nil {
		return nil, err
	}
	d, err := ParseFile(docPath)
	if err != nil {
		return nil, err
	}
	return CompareDoc(pkg, d, owned), nil
}
