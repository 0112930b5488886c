package rings

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
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The tables in docs/rings.md are the byte-level contract for whoever
// implements the other side of the rings. TestDocMatchesCode parses them and
// compares them with the Go constants in both directions: every documented
// row must match a constant, and every exported constant declared in the
// files below must be documented. The entry tables are also checked against
// the encoders, so a constant that agrees with the doc but is not what
// Encode uses is caught too.

const docPath = "../docs/rings.md"

// docFiles are the files whose exported constants the doc must all cover.
// Other files (connstate.go, rdma.go, wqe.go) document their own blocks, but
// any constant of a type in docTypes, wherever it is declared, is a value of
// a ring entry field documented here and must be in the doc too.
var docFiles = []string{"ring.go", "mem.go", "command.go", "notify.go", "desc.go", "stats.go", "le.go"}

var docTypes = map[string]bool{"Opcode": true, "Status": true, "NotifyFlags": true, "TxFlags": true, "StatID": true}

type goConst struct {
	name     string
	typ      string // named type, or "" for untyped constants
	val      constant.Value
	required bool // must be documented
}

func (c goConst) u64(t *testing.T) uint64 {
	v, ok := constant.Uint64Val(constant.ToInt(c.val))
	if !ok {
		t.Fatalf("constant %s = %v is not a uint64", c.name, c.val)
	}
	return v
}

// loadConsts type-checks the package's non-test files and returns its
// exported package-level constants with values, marking those the doc must
// cover. Imports are not resolved (errors are ignored): no wire constant
// depends on an import.
func loadConsts(t *testing.T) map[string]goConst {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]bool{}
	for _, name := range docFiles {
		own[name] = true
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	conf := types.Config{
		Importer: emptyImporter{},
		Error:    func(error) {},
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	pkg, _ := conf.Check("rings", fset, files, info)
	out := map[string]goConst{}
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || !c.Exported() {
			continue
		}
		gc := goConst{name: name, val: c.Val()}
		if n, ok := c.Type().(*types.Named); ok {
			gc.typ = n.Obj().Name()
		}
		gc.required = own[filepath.Base(fset.Position(c.Pos()).Filename)] || docTypes[gc.typ]
		if gc.val.Kind() == constant.Unknown {
			t.Fatalf("constant %s has no value (type-check failure?)", name)
		}
		out[name] = gc
	}
	req := 0
	for _, c := range out {
		if c.required {
			req++
		}
	}
	if req < 50 {
		t.Fatalf("only %d constants must be documented: the type check failed?", req)
	}
	return out
}

// emptyImporter gives every import an empty package: the files' references
// into other packages fail to type-check (ignored), constants do not need them.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	name := path[strings.LastIndex(path, "/")+1:]
	p := types.NewPackage(path, name)
	p.MarkComplete()
	return p, nil
}

type docTable struct {
	heading string
	line    int
	cols    map[string]int
	rows    []docRow
}

type docRow struct {
	line  int
	cells []string
}

func (t *docTable) cell(r docRow, col string) (string, bool) {
	i, ok := t.cols[col]
	if !ok {
		return "", false
	}
	return r.cells[i], true
}

// parseDoc returns every markdown table in the document.
func parseDoc(t *testing.T, path string) []*docTable {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tables []*docTable
	var cur *docTable
	heading := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
		if !strings.HasPrefix(line, "|") {
			cur = nil
			continue
		}
		if !strings.HasSuffix(line, "|") {
			t.Errorf("%s:%d: table row does not end with |", path, n)
			continue
		}
		cells := strings.Split(line[1:len(line)-1], "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cur == nil {
			cur = &docTable{heading: heading, line: n, cols: map[string]int{}}
			for i, c := range cells {
				cur.cols[strings.ToLower(c)] = i
			}
			tables = append(tables, cur)
			continue
		}
		if len(cells) != len(cur.cols) {
			t.Errorf("%s:%d: %d cells, the table header has %d (a | inside a cell?)", path, n, len(cells), len(cur.cols))
			continue
		}
		if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue // separator
		}
		cur.rows = append(cur.rows, docRow{line: n, cells: cells})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tables
}

// ident returns the Go identifier in a `backticked` cell, or "" for —.
func ident(cell string) (string, error) {
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

func parseNum(cell string) (uint64, error) {
	return strconv.ParseUint(cell, 0, 64)
}

// parseBits parses "3" or "0–7" into a mask.
func parseBits(cell string) (uint64, error) {
	for _, sep := range []string{"–", "..", "-"} {
		if a, b, ok := strings.Cut(cell, sep); ok {
			lo, err1 := strconv.Atoi(a)
			hi, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil || lo < 0 || hi > 63 || lo > hi {
				return 0, fmt.Errorf("bad bit range %q", cell)
			}
			return (uint64(1)<<(hi-lo+1) - 1) << lo, nil
		}
	}
	b, err := strconv.Atoi(cell)
	if err != nil || b < 0 || b > 63 {
		return 0, fmt.Errorf("bad bit %q", cell)
	}
	return 1 << b, nil
}

// entrySpec ties an entry table to its size constant and fields struct.
type entrySpec struct {
	prefix  string // offset constant prefix
	size    string // entry size constant
	typ     reflect.Type
	encode  func(v reflect.Value, b []byte)
	decode  func(b []byte) (reflect.Value, error)
	noField map[string]bool // offset constants with no struct field
}

var entrySpecs = []entrySpec{
	{
		prefix: "CmdOff", size: "CommandEntrySize", typ: reflect.TypeFor[Command](),
		encode: func(v reflect.Value, b []byte) { v.Addr().Interface().(*Command).Encode(b) },
		decode: func(b []byte) (reflect.Value, error) {
			var c Command
			err := c.Decode(b)
			return reflect.ValueOf(c), err
		},
	},
	{
		prefix: "NtfOff", size: "NotificationEntrySize", typ: reflect.TypeFor[Notification](),
		encode: func(v reflect.Value, b []byte) { v.Addr().Interface().(*Notification).Encode(b) },
		decode: func(b []byte) (reflect.Value, error) {
			var c Notification
			err := c.Decode(b)
			return reflect.ValueOf(c), err
		},
	},
	{
		prefix: "TxOff", size: "TxDescSize", typ: reflect.TypeFor[Tx](),
		encode: func(v reflect.Value, b []byte) { v.Addr().Interface().(*Tx).Encode(b) },
		decode: func(b []byte) (reflect.Value, error) {
			var c Tx
			err := c.Decode(b)
			return reflect.ValueOf(c), err
		},
	},
	{
		prefix: "RxOff", size: "RxDescSize", typ: reflect.TypeFor[Rx](),
		encode: func(v reflect.Value, b []byte) { v.Addr().Interface().(*Rx).Encode(b) },
		decode: func(b []byte) (reflect.Value, error) {
			var c Rx
			err := c.Decode(b)
			return reflect.ValueOf(c), err
		},
		noField: map[string]bool{"RxOffRsvd": true},
	},
}

// nameOf returns the String() of a typed constant, for the Name column.
func nameOf(c goConst, v uint64) (string, bool) {
	switch c.typ {
	case "Opcode":
		return Opcode(v).String(), true
	case "Status":
		return Status(v).String(), true
	case "NotifyFlags":
		return NotifyFlags(v).String(), true
	case "StatID":
		return StatID(v).String(), true
	}
	return "", false
}

func TestDocMatchesCode(t *testing.T) {
	consts := loadConsts(t)
	tables := parseDoc(t, docPath)
	documented := map[string]int{}

	for _, tb := range tables {
		ci, ok := tb.cols["constant"]
		if !ok {
			continue
		}
		isEntry := hasCols(tb, "offset", "size", "field")
		for _, r := range tb.rows {
			where := fmt.Sprintf("%s:%d (%s)", docPath, r.line, tb.heading)
			name, err := ident(r.cells[ci])
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if name == "" {
				continue // informational row
			}
			c, ok := consts[name]
			if !ok {
				t.Errorf("%s: documents %s, which is not an exported constant of package rings", where, name)
				continue
			}
			documented[name]++
			v := c.u64(t)
			if s, ok := tb.cell(r, "value"); ok {
				if got, err := parseNum(s); err != nil {
					t.Errorf("%s: %s: value %q: %v", where, name, s, err)
				} else if got != v {
					t.Errorf("%s: %s documented as %#x, code has %#x", where, name, got, v)
				}
			}
			if s, ok := tb.cell(r, "index"); ok {
				if got, err := parseNum(s); err != nil || got != v {
					t.Errorf("%s: %s documented at index %q, code has %d", where, name, s, v)
				}
			}
			if s, ok := tb.cell(r, "offset"); ok {
				want := v
				if c.typ == "StatID" {
					want = uint64(StatID(v).Offset())
					if want != 8*v {
						t.Errorf("%s: %s: Offset() = %d, want 8 × index", where, name, want)
					}
				}
				if got, err := parseNum(s); err != nil || got != want {
					t.Errorf("%s: %s documented at offset %q, code has %#x", where, name, s, want)
				}
			}
			if s, ok := tb.cell(r, "bit"); ok {
				if mask, err := parseBits(s); err != nil {
					t.Errorf("%s: %v", where, err)
				} else if mask != v {
					t.Errorf("%s: %s documented as bit(s) %s (mask %#x), code has %#x", where, name, s, mask, v)
				}
			}
			if s, ok := tb.cell(r, "name"); ok {
				if want, ok := nameOf(c, v); !ok {
					t.Errorf("%s: %s has a Name column but type %q has no String to check it against", where, name, c.typ)
				} else if s != want {
					t.Errorf("%s: %s documented as name %q, String() says %q", where, name, s, want)
				}
			}
			if !isEntry {
				if s, ok := tb.cell(r, "size"); ok && strings.HasPrefix(name, "Off") {
					// Ring header word.
					sz, err := parseNum(s)
					if err != nil || sz != 4 || v%CacheLine != 0 || v+sz > HeaderSize {
						t.Errorf("%s: header word %s at %#x size %q: want a 4-byte word at the start of its own line inside the header", where, name, v, s)
					}
				}
			}
		}
		if isEntry {
			checkEntryTable(t, tb, consts)
		}
	}

	// Every exported constant is documented.
	var missing []string
	for name, c := range consts {
		if c.required && documented[name] == 0 {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("%s is not documented in %s", name, docPath)
	}
	// Each entry-type offset constant is documented once; OffCtl once per entry table.
	for name, n := range documented {
		if n > 1 && name != "OffCtl" {
			t.Errorf("%s is documented %d times", name, n)
		}
	}
	if documented["OffCtl"] != len(entrySpecs) {
		t.Errorf("OffCtl documented in %d entry tables, want %d", documented["OffCtl"], len(entrySpecs))
	}

	// The stat block table lists every counter in order.
	var stats []string
	for _, tb := range tables {
		if !hasCols(tb, "index", "name") {
			continue
		}
		for _, r := range tb.rows {
			n, _ := tb.cell(r, "name")
			stats = append(stats, n)
		}
	}
	if len(stats) != int(NumStats) {
		t.Errorf("stat block table has %d rows, NumStats is %d", len(stats), NumStats)
	}
	for i := 0; i < len(stats) && i < int(NumStats); i++ {
		if stats[i] != StatID(i).String() {
			t.Errorf("stat block row %d is %q, counter %d is %q", i, stats[i], i, StatID(i).String())
		}
	}
}

func hasCols(tb *docTable, cols ...string) bool {
	for _, c := range cols {
		if _, ok := tb.cols[c]; !ok {
			return false
		}
	}
	return true
}

// checkEntryTable checks one entry layout table: the rows tile the entry
// exactly, field sizes match the fields struct, every field and offset
// constant appears, and Encode/Decode put each field where the doc says.
func checkEntryTable(t *testing.T, tb *docTable, consts map[string]goConst) {
	t.Helper()
	type field struct {
		line       int
		off, size  uint64
		constName  string
		structName string
	}
	var fields []field
	var spec *entrySpec
	for _, r := range tb.rows {
		where := fmt.Sprintf("%s:%d", docPath, r.line)
		cn, _ := ident(r.cells[tb.cols["constant"]])
		fn, err := ident(r.cells[tb.cols["field"]])
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		off, err1 := parseNum(r.cells[tb.cols["offset"]])
		size, err2 := parseNum(r.cells[tb.cols["size"]])
		if err1 != nil || err2 != nil || cn == "" {
			t.Errorf("%s: entry row needs a numeric offset and size and a constant", where)
			continue
		}
		for i := range entrySpecs {
			if strings.HasPrefix(cn, entrySpecs[i].prefix) {
				if spec != nil && spec != &entrySpecs[i] {
					t.Errorf("%s: %s in the %s table", where, cn, spec.prefix)
				}
				spec = &entrySpecs[i]
			}
		}
		fields = append(fields, field{r.line, off, size, cn, fn})
	}
	if spec == nil {
		t.Errorf("%s:%d: entry table %q matches no entry type", docPath, tb.line, tb.heading)
		return
	}
	entrySize := consts[spec.size].u64(t)

	// Tiling.
	sort.Slice(fields, func(i, j int) bool { return fields[i].off < fields[j].off })
	if len(fields) == 0 || fields[0].constName != "OffCtl" || fields[0].off != 0 || fields[0].size != 4 {
		t.Errorf("%s: entry table must start with the 4-byte control word `OffCtl` at 0x00", tb.heading)
	}
	next := uint64(0)
	for _, f := range fields {
		if f.off != next {
			t.Errorf("%s:%d: %s at %#x, but the previous field ends at %#x", docPath, f.line, f.constName, f.off, next)
		}
		if f.off%f.size != 0 {
			t.Errorf("%s:%d: %s at %#x is not aligned to its size %d", docPath, f.line, f.constName, f.off, f.size)
		}
		next = f.off + f.size
	}
	if next != entrySize {
		t.Errorf("%s: fields end at %#x, %s is %d", tb.heading, next, spec.size, entrySize)
	}

	// Every offset constant of this entry type is in the table.
	inTable := map[string]bool{}
	for _, f := range fields {
		inTable[f.constName] = true
	}
	for name := range consts {
		if strings.HasPrefix(name, spec.prefix) && !inTable[name] {
			t.Errorf("%s: %s is missing from the table", tb.heading, name)
		}
	}

	// Struct fields: sizes, completeness, and Encode/Decode placement.
	v := reflect.New(spec.typ).Elem()
	seen := map[string]bool{}
	for _, f := range fields {
		if f.structName == "" {
			if f.constName != "OffCtl" && !spec.noField[f.constName] {
				t.Errorf("%s:%d: %s has no Field", docPath, f.line, f.constName)
			}
			continue
		}
		sf, ok := spec.typ.FieldByName(f.structName)
		if !ok {
			t.Errorf("%s:%d: %s has no field %s", docPath, f.line, spec.typ, f.structName)
			continue
		}
		seen[f.structName] = true
		if uint64(sf.Type.Size()) != f.size {
			t.Errorf("%s:%d: %s.%s is %d bytes, documented %d", docPath, f.line, spec.typ, f.structName, sf.Type.Size(), f.size)
		}
		// A distinct value per field: every byte differs from every other field's.
		pat := uint64(0)
		for i := uint64(0); i < f.size; i++ {
			pat |= (0x10 + f.off + i) << (8 * i)
		}
		v.FieldByIndex(sf.Index).SetUint(pat)
	}
	for i := 0; i < spec.typ.NumField(); i++ {
		if n := spec.typ.Field(i).Name; !seen[n] {
			t.Errorf("%s: field %s.%s is not documented", tb.heading, spec.typ, n)
		}
	}
	buf := make([]byte, entrySize)
	for i := range buf {
		buf[i] = 0xEE
	}
	spec.encode(v, buf)
	for _, f := range fields {
		var got uint64
		for i := uint64(0); i < f.size; i++ {
			got |= uint64(buf[f.off+i]) << (8 * i)
		}
		var want uint64
		switch {
		case f.constName == "OffCtl":
			want = 0xEEEEEEEE // Encode must leave the control word to the ring
		case f.structName == "":
			want = 0 // reserved: written zero
		default:
			want = v.FieldByName(f.structName).Convert(reflect.TypeFor[uint64]()).Uint()
		}
		if got != want {
			t.Errorf("%s: after Encode, bytes %#x..%#x (%s) hold %#x, want %#x", tb.heading, f.off, f.off+f.size-1, f.constName, got, want)
		}
	}
	back, err := spec.decode(buf)
	if err != nil || !reflect.DeepEqual(back.Interface(), v.Interface()) {
		t.Errorf("%s: Decode(Encode(x)) = %+v, %v; want %+v", tb.heading, back.Interface(), err, v.Interface())
	}
}
