package rings

import (
	"fmt"
	"go/constant"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// The tables in docs/rings.md and docs/abi-blocks.md are the byte-level
// contract for whoever implements the other side of the rings.
// TestDocMatchesCode parses them and compares them with the Go constants in
// both directions: every documented row must match a constant, and every
// exported constant declared in the files below must be documented.
// TestDocABIBlocks names every block the host and the device exchange, finds
// each one's section through the index in docs/rings.md, checks that its
// layout table tiles the block exactly and checks the table against the
// block's encoder, so a constant that agrees with the doc but is not what
// Encode uses is caught too.

var docPaths = []string{"../docs/rings.md", "../docs/abi-blocks.md"}

// docFiles are the files whose exported constants the docs must all cover.
var docFiles = []string{"ring.go", "mem.go", "command.go", "notify.go", "desc.go", "stats.go", "le.go",
	"connstate.go", "conninfo.go", "rdma.go", "wqe.go", "statarea.go"}

// docTypes are the value types of entry fields: any constant of one of them,
// wherever it is declared, must be documented, and all of a type's values in
// one table.
var docTypes = map[string]bool{"Opcode": true, "Status": true, "NotifyFlags": true, "TxFlags": true, "StatID": true,
	"ConnStateFlags": true, "TCPState": true, "UpdateFlags": true, "QPAction": true, "QPEvent": true,
	"WROpcode": true, "WRFlags": true, "WCOpcode": true, "WCStatus": true, "WCFlags": true}

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

// loadPackage type-checks the package's non-test files.
func loadPackage(t *testing.T) *abidoc.Package {
	t.Helper()
	p, err := abidoc.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loadConsts returns the package's exported package-level constants with
// values, marking those the docs must cover.
func loadConsts(t *testing.T) map[string]goConst {
	t.Helper()
	own := map[string]bool{}
	for _, name := range docFiles {
		own[name] = true
	}
	out := map[string]goConst{}
	for name, c := range loadPackage(t).Consts {
		out[name] = goConst{name: name, typ: c.Type, val: c.Val, required: own[c.File] || docTypes[c.Type]}
	}
	req := 0
	for _, c := range out {
		if c.required {
			req++
		}
	}
	if req < 200 {
		t.Fatalf("only %d constants must be documented: the type check failed?", req)
	}
	return out
}

type docTable = abidoc.Table

type docRow = abidoc.Row

// parseDocs parses every document in docPaths; rows the parser could not
// take fail the test.
func parseDocs(t *testing.T) (tables []*docTable, headings map[string][]string) {
	t.Helper()
	headings = map[string][]string{}
	for _, p := range docPaths {
		d, err := abidoc.ParseFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range d.Problems {
			t.Error(e)
		}
		tables = append(tables, d.Tables...)
		headings[p] = d.Headings
	}
	return tables, headings
}

var (
	ident    = abidoc.Ident
	parseNum = abidoc.Num
)

// parseBitRange parses "3" or "0–7" into the lowest and highest bit.
func parseBitRange(cell string) (lo, hi int, err error) {
	for _, sep := range []string{"–", "..", "-"} {
		if a, b, ok := strings.Cut(cell, sep); ok {
			lo, err1 := strconv.Atoi(a)
			hi, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil || lo < 0 || hi > 63 || lo > hi {
				return 0, 0, fmt.Errorf("bad bit range %q", cell)
			}
			return lo, hi, nil
		}
	}
	b, err := strconv.Atoi(cell)
	if err != nil || b < 0 || b > 63 {
		return 0, 0, fmt.Errorf("bad bit %q", cell)
	}
	return b, b, nil
}

// parseBits parses "3" or "0–7" into a mask.
func parseBits(cell string) (uint64, error) {
	lo, hi, err := parseBitRange(cell)
	if err != nil {
		return 0, err
	}
	return (uint64(1)<<(hi-lo+1) - 1) << lo, nil
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
	case "TCPState":
		return TCPState(v).String(), true
	case "CongestionControl":
		return CongestionControl(v).String(), true
	case "WROpcode":
		return WROpcode(v).String(), true
	case "WCOpcode":
		return WCOpcode(v).String(), true
	case "WCStatus":
		return WCStatus(v).String(), true
	}
	return "", false
}

// isLayout reports whether tb gives the byte layout of a block.
func isLayout(tb *docTable) bool {
	return tb.Has("offset", "constant")
}

func TestDocMatchesCode(t *testing.T) {
	consts := loadConsts(t)
	tables, _ := parseDocs(t)
	documented := map[string]int{}
	tablesOf := map[string]map[*docTable]int{} // constant → tables documenting it → rows
	typeTables := map[string]map[*docTable]bool{}

	for _, tb := range tables {
		ci, ok := tb.Cols["constant"]
		if !ok {
			continue
		}
		enumType := ""
		for _, r := range tb.Rows {
			where := tb.Where(r)
			name, err := ident(r.Cells[ci])
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if name == "" {
				continue // informational or reserved row
			}
			c, ok := consts[name]
			if !ok {
				t.Errorf("%s: documents %s, which is not an exported constant of package rings", where, name)
				continue
			}
			documented[name]++
			if tablesOf[name] == nil {
				tablesOf[name] = map[*docTable]int{}
			}
			tablesOf[name][tb]++
			if docTypes[c.typ] && !strings.HasPrefix(name, "Num") {
				if enumType != "" && enumType != c.typ {
					t.Errorf("%s: %s is a %s in a table of %s values", where, name, c.typ, enumType)
				}
				enumType = c.typ
				if typeTables[c.typ] == nil {
					typeTables[c.typ] = map[*docTable]bool{}
				}
				typeTables[c.typ][tb] = true
			}
			v := c.u64(t)
			if s, ok := tb.Cell(r, "value"); ok {
				if got, err := parseNum(s); err != nil {
					t.Errorf("%s: %s: value %q: %v", where, name, s, err)
				} else if got != v {
					t.Errorf("%s: %s documented as %#x, code has %#x", where, name, got, v)
				}
			}
			if s, ok := tb.Cell(r, "index"); ok {
				if got, err := parseNum(s); err != nil || got != v {
					t.Errorf("%s: %s documented at index %q, code has %d", where, name, s, v)
				}
			}
			if s, ok := tb.Cell(r, "offset"); ok {
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
			if s, ok := tb.Cell(r, "bit"); ok {
				if mask, err := parseBits(s); err != nil {
					t.Errorf("%s: %v", where, err)
				} else if mask != v {
					t.Errorf("%s: %s documented as bit(s) %s (mask %#x), code has %#x", where, name, s, mask, v)
				}
			}
			if s, ok := tb.Cell(r, "name"); ok {
				if want, ok := nameOf(c, v); !ok {
					t.Errorf("%s: %s has a Name column but type %q has no String to check it against", where, name, c.typ)
				} else if s != want {
					t.Errorf("%s: %s documented as name %q, String() says %q", where, name, s, want)
				}
			}
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
		t.Errorf("%s is not documented in %v", name, docPaths)
	}
	// Each constant is documented in one table (OffCtl: in every ring entry
	// table), and once in it unless a layout table gives alternatives for the
	// same bytes (checked by TestDocABIBlocks).
	for name, in := range tablesOf {
		if name == "OffCtl" {
			continue
		}
		if len(in) > 1 {
			t.Errorf("%s is documented in %d tables", name, len(in))
		}
		for tb, n := range in {
			if n > 1 && !isLayout(tb) {
				t.Errorf("%s:%d: %s is documented %d times", tb.Path, tb.Line, name, n)
			}
		}
	}
	if n, want := documented["OffCtl"], ringEntryBlocks(); n != want {
		t.Errorf("OffCtl documented in %d rows, want one per ring entry table (%d)", n, want)
	}
	// The values of a type are listed in one table.
	for typ, in := range typeTables {
		if len(in) > 1 {
			t.Errorf("the %s values are split over %d tables", typ, len(in))
		}
	}

	// The stat block table lists every counter in order.
	var stats []string
	for _, tb := range tables {
		if !tb.Has("index", "name") {
			continue
		}
		for _, r := range tb.Rows {
			n, _ := tb.Cell(r, "name")
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

	// The UPDATE argument table.
	n := 0
	for _, tb := range tables {
		if tb.Has("field", "bits", "parameter") {
			checkUpdateArgs(t, tb, consts)
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d UPDATE argument tables (columns Field, Bits, Flag, Parameter), want 1", n)
	}
}

// blockKind says how a block's layout table is checked.
type blockKind int

const (
	kindFields blockKind = iota // against a fields struct's Encode and Decode
	kindHeader                  // the ring header: one word per cache line
	kindStats                   // the stat block: u64 counters by index
)

// abiBlock is one block of bytes the host and the device exchange.
type abiBlock struct {
	name   string // the Block cell of the index in docs/rings.md
	size   string // its size constant
	kind   blockKind
	prefix string       // prefix of its offset constants
	typ    reflect.Type // kindFields: the fields struct, with Encode and Decode
	ring   bool         // a ring entry: bytes 0–3 are the ring's control word, OffCtl
	union  []unionArm   // alternatives for the same bytes
}

// unionArm is one alternative of the bytes two or more layout rows share.
type unionArm struct {
	field  string              // the struct field those bytes hold in this arm
	choose func(reflect.Value) // makes the fields struct select this arm
}

// abiBlocks names every block of the ABI. A new block (a type with Encode
// and Decode, or a …Size constant) fails TestDocABIBlocks until it is here
// and documented.
var abiBlocks = []abiBlock{
	{name: "ring header", size: "HeaderSize", kind: kindHeader, prefix: "Off"},
	{name: "command ring entry", size: "CommandEntrySize", prefix: "CmdOff", typ: reflect.TypeFor[Command](), ring: true},
	{name: "notification ring entry", size: "NotificationEntrySize", prefix: "NtfOff", typ: reflect.TypeFor[Notification](), ring: true},
	{name: "transmit descriptor", size: "TxDescSize", prefix: "TxOff", typ: reflect.TypeFor[Tx](), ring: true},
	{name: "receive descriptor", size: "RxDescSize", prefix: "RxOff", typ: reflect.TypeFor[Rx](), ring: true},
	{name: "stat block", size: "StatBlockSize", kind: kindStats},
	{name: "offload state block", size: "ConnStateSize", prefix: "CsOff", typ: reflect.TypeFor[ConnState]()},
	{name: "offload state address extension", size: "ConnAddrExtSize", prefix: "CaOff", typ: reflect.TypeFor[ConnAddrExt]()},
	{name: "connection info block", size: "ConnInfoSize", prefix: "CiOff", typ: reflect.TypeFor[ConnInfo]()},
	{name: "user buffer descriptor", size: "UserBufDescSize", prefix: "UbOff", typ: reflect.TypeFor[UserBuf]()},
	{name: "QP configuration block", size: "QPConfigSize", prefix: "QcOff", typ: reflect.TypeFor[QPConfig]()},
	{name: "scatter/gather element", size: "SGESize", prefix: "SGEOff", typ: reflect.TypeFor[SGE]()},
	{name: "send queue entry", size: "SQEntrySize", prefix: "SQOff", typ: reflect.TypeFor[SendWR](), ring: true,
		union: []unionArm{
			{"SGL", func(v reflect.Value) { f := v.FieldByName("Flags"); f.SetUint(f.Uint() &^ uint64(WRInline)) }},
			{"InlineData", func(v reflect.Value) { f := v.FieldByName("Flags"); f.SetUint(f.Uint() | uint64(WRInline)) }},
		}},
	{name: "receive queue entry", size: "RQEntrySize", prefix: "RQOff", typ: reflect.TypeFor[RecvWR](), ring: true},
	{name: "completion queue entry", size: "CQEntrySize", prefix: "CQOff", typ: reflect.TypeFor[Completion](), ring: true},
	{name: "counter area header", size: "StatAreaHeaderSize", prefix: "SaOff", typ: reflect.TypeFor[StatAreaHeader]()},
}

func ringEntryBlocks() int {
	n := 0
	for _, b := range abiBlocks {
		if b.ring {
			n++
		}
	}
	return n
}

// ownsConst reports whether an offset constant belongs to block b.
func (b *abiBlock) ownsConst(name string, c goConst) bool {
	switch b.kind {
	case kindStats:
		return c.typ == "StatID" && name != "NumStats"
	case kindHeader:
		return strings.HasPrefix(name, b.prefix) && name != "OffCtl"
	}
	return strings.HasPrefix(name, b.prefix)
}

var slug = abidoc.Slug

var linkRE = abidoc.SectionLinkRE

// TestDocABIBlocks checks the index of ABI blocks in docs/rings.md against
// abiBlocks and each block's layout table against the code.
func TestDocABIBlocks(t *testing.T) {
	consts := loadConsts(t)
	tables, headings := parseDocs(t)

	// The code side: every type with Encode and Decode and every exported
	// …Size constant is a block.
	pkg := loadPackage(t).Types
	byType, bySize := map[string]bool{}, map[string]bool{}
	for _, b := range abiBlocks {
		if b.typ != nil {
			byType[b.typ.Name()] = true
		}
		bySize[b.size] = true
	}
	for _, name := range pkg.Scope().Names() {
		switch o := pkg.Scope().Lookup(name).(type) {
		case *types.TypeName:
			ms := types.NewMethodSet(types.NewPointer(o.Type()))
			if ms.Lookup(pkg, "Encode") != nil && ms.Lookup(pkg, "Decode") != nil && !byType[name] {
				t.Errorf("type %s has Encode and Decode but is not an ABI block of abiBlocks", name)
			}
		case *types.Const:
			if !o.Exported() || !strings.HasSuffix(name, "Size") || bySize[name] || docTypes[consts[name].typ] {
				continue
			}
			offset := false
			for i := range abiBlocks {
				offset = offset || abiBlocks[i].ownsConst(name, consts[name])
			}
			if !offset {
				t.Errorf("constant %s is not the size of an ABI block of abiBlocks", name)
			}
		}
	}

	// The index.
	var index *docTable
	for _, tb := range tables {
		if tb.Has("block", "size", "size constant", "fields", "section") {
			if index != nil {
				t.Fatalf("%s:%d: a second index of ABI blocks (the first at %s:%d)", tb.Path, tb.Line, index.Path, index.Line)
			}
			index = tb
		}
	}
	if index == nil {
		t.Fatalf("no index of ABI blocks (columns Block, Size, Size constant, Fields, Section) in %v", docPaths)
	}
	rows := map[string]docRow{}
	for _, r := range index.Rows {
		name, _ := index.Cell(r, "block")
		if _, dup := rows[name]; dup {
			t.Errorf("%s: block %q listed twice", index.Where(r), name)
		}
		rows[name] = r
	}
	claimed := map[*docTable]bool{}
	for i := range abiBlocks {
		b := &abiBlocks[i]
		r, ok := rows[b.name]
		if !ok {
			t.Errorf("ABI block %q (%s) is not in the index of ABI blocks at %s:%d", b.name, b.size, index.Path, index.Line)
			continue
		}
		delete(rows, b.name)
		where := index.Where(r)
		size := consts[b.size].u64(t)
		if s, _ := index.Cell(r, "size"); s != strconv.FormatUint(size, 10) {
			t.Errorf("%s: %s: size %q, %s is %d", where, b.name, s, b.size, size)
		}
		if s, _ := index.Cell(r, "size constant"); s != "`"+b.size+"`" {
			t.Errorf("%s: %s: size constant %s, want `%s`", where, b.name, s, b.size)
		}
		wantFields := "—"
		if b.typ != nil {
			wantFields = "`" + b.typ.Name() + "`"
		}
		if s, _ := index.Cell(r, "fields"); s != wantFields {
			t.Errorf("%s: %s: fields %s, want %s", where, b.name, s, wantFields)
		}
		sec, _ := index.Cell(r, "section")
		m := linkRE.FindStringSubmatch(sec)
		if m == nil {
			t.Errorf("%s: %s: section %q is not a [link](file.md#anchor)", where, b.name, sec)
			continue
		}
		docPath := index.Path
		if m[1] != "" {
			docPath = filepath.ToSlash(filepath.Join(filepath.Dir(index.Path), m[1]))
		}
		if _, ok := headings[docPath]; !ok {
			t.Errorf("%s: %s: section in %s, which is not one of the parsed docs %v", where, b.name, docPath, docPaths)
			continue
		}
		heading := ""
		for _, h := range headings[docPath] {
			if slug(h) == m[2] {
				heading = h
			}
		}
		if heading == "" {
			t.Errorf("%s: %s: %s has no section #%s", where, b.name, docPath, m[2])
			continue
		}
		var layout []*docTable
		for _, tb := range tables {
			if tb.Path == docPath && tb.Heading == heading && isLayout(tb) {
				layout = append(layout, tb)
			}
		}
		if len(layout) != 1 {
			t.Errorf("%s: %s: section %q of %s has %d layout tables, want 1", where, b.name, heading, docPath, len(layout))
			continue
		}
		claimed[layout[0]] = true
		checkLayout(t, layout[0], b, consts)
	}
	for name, r := range rows {
		t.Errorf("%s: block %q is not an ABI block of abiBlocks", index.Where(r), name)
	}
	for _, tb := range tables {
		if isLayout(tb) && !claimed[tb] {
			t.Errorf("%s:%d: layout table %q belongs to no ABI block of the index", tb.Path, tb.Line, tb.Heading)
		}
	}
}

// layoutRow is one row of a layout table.
type layoutRow struct {
	line      int
	off, size uint64
	constName string
	field     string
	reserved  bool
}

// checkLayout checks block b's layout table: its rows tile the block
// exactly, every offset constant of the block is in it, and for blocks with
// a fields struct, Encode puts a distinct value of every field where the
// table says, zeroes reserved bytes, leaves a ring entry's control word
// alone, and Decode gives the struct back.
func checkLayout(t *testing.T, tb *docTable, b *abiBlock, consts map[string]goConst) {
	t.Helper()
	blockSize := consts[b.size].u64(t)
	var rows []layoutRow
	for _, r := range tb.Rows {
		where := tb.Where(r)
		cn, err := ident(r.Cells[tb.Cols["constant"]])
		if err != nil {
			continue // reported by TestDocMatchesCode
		}
		lr := layoutRow{line: r.Line, constName: cn}
		if s, ok := tb.Cell(r, "field"); ok {
			if lr.field, err = ident(s); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
		off, err := parseNum(r.Cells[tb.Cols["offset"]])
		if err != nil {
			t.Errorf("%s: offset %q: %v", where, r.Cells[tb.Cols["offset"]], err)
			continue
		}
		lr.off, lr.size = off, 8
		if s, ok := tb.Cell(r, "size"); ok {
			if lr.size, err = parseNum(s); err != nil || lr.size == 0 {
				t.Errorf("%s: size %q", where, s)
				continue
			}
		} else if b.kind != kindStats {
			t.Errorf("%s: layout table without a Size column", where)
			return
		}
		meaning, _ := tb.Cell(r, "meaning")
		switch {
		case cn == "OffCtl":
			if !b.ring || lr.off != 0 || lr.size != 4 || lr.field != "" {
				t.Errorf("%s: the control word `OffCtl` belongs at 0x00, 4 bytes, with no Field, in ring entries only", where)
			}
		case cn != "":
			c := consts[cn]
			if !b.ownsConst(cn, c) {
				t.Errorf("%s: %s does not belong to the %s (constants %s…)", where, cn, b.name, b.prefix)
			}
			lr.reserved = b.kind == kindFields && lr.field == ""
		default:
			lr.reserved = true
		}
		if lr.reserved && lr.field != "" {
			t.Errorf("%s: field %s has no Constant: name its offset constant", where, lr.field)
		} else if lr.reserved && !strings.HasPrefix(strings.ToLower(meaning), "reserved") {
			t.Errorf("%s: a row with no Field (or no Constant) is reserved bytes: its meaning must start with \"reserved\"", where)
		}
		rows = append(rows, lr)
	}
	if b.ring && (len(rows) == 0 || rows[0].constName != "OffCtl") {
		t.Errorf("%s:%d: the %s table must start with the control word `OffCtl`", tb.Path, tb.Line, b.name)
	}

	// Tiling: the rows cover [0, size) once each; rows with the same offset,
	// size and constant are alternatives for the same bytes.
	sorted := append([]layoutRow(nil), rows...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].off < sorted[j].off })
	next := uint64(0)
	var arms [][]layoutRow
	for i, f := range sorted {
		if i > 0 {
			p := sorted[i-1]
			if f.off == p.off && f.size == p.size && f.constName == p.constName && f.constName != "" && f.field != "" && p.field != "" {
				arms[len(arms)-1] = append(arms[len(arms)-1], f)
				continue // an alternative
			}
		}
		if f.off != next {
			if f.off > next {
				t.Errorf("%s:%d: %s: bytes %#x..%#x are in no row (mark them reserved)", tb.Path, f.line, b.name, next, f.off-1)
			} else {
				t.Errorf("%s:%d: %s at %#x overlaps the previous row, which ends at %#x", tb.Path, f.line, f.constName, f.off, next)
			}
		}
		if (f.size == 2 || f.size == 4 || f.size == 8) && f.off%f.size != 0 {
			t.Errorf("%s:%d: %s at %#x is not aligned to its size %d", tb.Path, f.line, f.constName, f.off, f.size)
		}
		next = max(next, f.off+f.size)
		arms = append(arms, []layoutRow{f})
	}
	if next != blockSize {
		t.Errorf("%s:%d: %s: the rows end at %#x, %s is %d", tb.Path, tb.Line, b.name, next, b.size, blockSize)
	}
	var union []layoutRow
	for _, a := range arms {
		if len(a) > 1 {
			if union != nil {
				t.Errorf("%s:%d: %s: more than one set of alternatives", tb.Path, a[0].line, b.name)
			}
			union = a
		}
	}
	if len(union) != len(b.union) {
		t.Errorf("%s:%d: %s: %d alternatives for the same bytes, the code has %d", tb.Path, tb.Line, b.name, len(union), len(b.union))
		return
	}
	for i := range union {
		if union[i].field != b.union[i].field {
			t.Errorf("%s:%d: alternative %d is %s, the code's is %s", tb.Path, union[i].line, i, union[i].field, b.union[i].field)
		}
	}

	// Every offset constant of the block is in the table.
	inTable := map[string]bool{}
	for _, f := range rows {
		inTable[f.constName] = true
	}
	for name, c := range consts {
		if b.ownsConst(name, c) && !inTable[name] {
			t.Errorf("%s:%d: %s is missing from the %s table", tb.Path, tb.Line, name, b.name)
		}
	}

	switch b.kind {
	case kindHeader:
		for _, f := range rows {
			if !f.reserved && (f.size != 4 || f.off%CacheLine != 0) {
				t.Errorf("%s:%d: header word %s at %#x size %d: want a 4-byte word at the start of its own cache line", tb.Path, f.line, f.constName, f.off, f.size)
			}
		}
		return
	case kindStats:
		if uint64(len(rows))*8 != blockSize {
			t.Errorf("%s:%d: %d counters of 8 bytes, %s is %d", tb.Path, tb.Line, len(rows), b.size, blockSize)
		}
		return
	}
	checkEncoding(t, tb, b, rows, blockSize)
}

// checkEncoding encodes the block's fields struct, holding a distinct value
// in every documented byte, once per alternative, and checks every row.
func checkEncoding(t *testing.T, tb *docTable, b *abiBlock, rows []layoutRow, blockSize uint64) {
	t.Helper()
	unionField := map[string]bool{}
	for _, a := range b.union {
		unionField[a.field] = true
	}
	seen := map[string]bool{}
	for _, f := range rows {
		if f.field == "" {
			continue
		}
		sf, ok := b.typ.FieldByName(f.field)
		if !ok {
			t.Errorf("%s:%d: %s has no field %s", tb.Path, f.line, b.typ, f.field)
			return
		}
		if seen[f.field] {
			t.Errorf("%s:%d: field %s documented twice", tb.Path, f.line, f.field)
		}
		seen[f.field] = true
		if err := wireCompatible(sf.Type, f.size); err != nil {
			t.Errorf("%s:%d: %s.%s (%s): %v", tb.Path, f.line, b.typ.Name(), f.field, sf.Type, err)
			return
		}
	}
	for i := 0; i < b.typ.NumField(); i++ {
		if n := b.typ.Field(i).Name; !seen[n] {
			t.Errorf("%s:%d: field %s.%s is not documented", tb.Path, tb.Line, b.typ.Name(), n)
		}
	}
	if t.Failed() {
		return
	}

	arms := b.union
	if arms == nil {
		arms = []unionArm{{choose: func(reflect.Value) {}}}
	}
	const guard = 16
	for _, arm := range arms {
		active := func(f layoutRow) bool { return !unionField[f.field] || f.field == arm.field }
		label := b.name
		if arm.field != "" {
			label += " (" + arm.field + ")"
		}
		v := reflect.New(b.typ).Elem()
		for _, f := range rows {
			if f.field == "" || !active(f) {
				continue
			}
			pat := make([]byte, f.size)
			for i := range pat {
				pat[i] = byte(0x10 + f.off + uint64(i)) // every byte differs from every other
			}
			if err := setWire(v.FieldByName(f.field), pat); err != nil {
				t.Errorf("%s: %s: %v", label, f.field, err)
				return
			}
		}
		arm.choose(v)
		buf := make([]byte, blockSize+guard)
		for i := range buf {
			buf[i] = 0xEE
		}
		call(v.Addr(), "Encode", buf[:blockSize])
		for _, f := range rows {
			if f.field != "" && !active(f) {
				continue
			}
			got := buf[f.off : f.off+f.size]
			var want []byte
			switch {
			case f.constName == "OffCtl":
				want = []byte{0xEE, 0xEE, 0xEE, 0xEE} // Encode leaves the control word to the ring
			case f.reserved:
				want = make([]byte, f.size) // written zero
			default:
				want = wireBytes(v.FieldByName(f.field), f.size)
			}
			if string(got) != string(want) {
				what := f.field
				if f.reserved {
					what = "reserved"
				} else if what == "" {
					what = "control word"
				}
				if f.constName != "" {
					what = f.constName + ", " + what
				}
				t.Errorf("%s: after Encode, bytes %#x..%#x (%s) hold % x, want % x", label, f.off, f.off+f.size-1, what, got, want)
			}
		}
		for i, c := range buf[blockSize:] {
			if c != 0xEE {
				t.Errorf("%s: Encode wrote byte %#x, beyond the block", label, blockSize+uint64(i))
			}
		}
		back := reflect.New(b.typ)
		if err := call(back, "Decode", buf[:blockSize]); err != nil || !reflect.DeepEqual(back.Elem().Interface(), v.Interface()) {
			t.Errorf("%s: Decode(Encode(x)) = %+v, %v; want %+v", label, back.Elem().Interface(), err, v.Interface())
		}
	}
}

// call calls p's method (Encode or Decode) with b converted to its
// parameter type and returns its error result, if any.
func call(p reflect.Value, method string, b []byte) error {
	m := p.MethodByName(method)
	out := m.Call([]reflect.Value{reflect.ValueOf(b).Convert(m.Type().In(0))})
	if len(out) == 1 && !out[0].IsNil() {
		return out[0].Interface().(error)
	}
	return nil
}

// wireCompatible reports whether a field of Go type typ can be a size-byte
// wire field: an unsigned integer of that size, a count (int) of at most
// that size, a byte array of that length, or an array of blocks with
// Encode and Decode that fill it.
func wireCompatible(typ reflect.Type, size uint64) error {
	switch typ.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if uint64(typ.Size()) != size {
			return fmt.Errorf("%d bytes, documented %d", typ.Size(), size)
		}
	case reflect.Int:
		if size > 4 {
			return fmt.Errorf("a count documented as %d bytes", size)
		}
	case reflect.Array:
		e := typ.Elem()
		if e.Kind() == reflect.Uint8 {
			if uint64(typ.Len()) != size {
				return fmt.Errorf("%d bytes, documented %d", typ.Len(), size)
			}
			return nil
		}
		ms := reflect.PointerTo(e)
		if _, ok := ms.MethodByName("Encode"); !ok || size%uint64(typ.Len()) != 0 {
			return fmt.Errorf("array of %s: not %d encodable elements", e, typ.Len())
		}
	default:
		return fmt.Errorf("kind %s is not a wire type", typ.Kind())
	}
	return nil
}

// setWire sets field fv from its little-endian wire bytes.
func setWire(fv reflect.Value, b []byte) error {
	switch fv.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		fv.SetUint(leUint(b))
	case reflect.Int:
		fv.SetInt(int64(leUint(b)))
	case reflect.Array:
		if fv.Type().Elem().Kind() == reflect.Uint8 {
			reflect.Copy(fv, reflect.ValueOf(b))
			return nil
		}
		es := len(b) / fv.Len()
		for i := 0; i < fv.Len(); i++ {
			if err := call(fv.Index(i).Addr(), "Decode", b[i*es:(i+1)*es]); err != nil {
				return err
			}
		}
	}
	return nil
}

// wireBytes is the inverse of setWire.
func wireBytes(fv reflect.Value, size uint64) []byte {
	b := make([]byte, size)
	switch fv.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		putLE(b, fv.Uint())
	case reflect.Int:
		putLE(b, uint64(fv.Int()))
	case reflect.Array:
		if fv.Type().Elem().Kind() == reflect.Uint8 {
			reflect.Copy(reflect.ValueOf(b), fv)
			return b
		}
		es := int(size) / fv.Len()
		for i := 0; i < fv.Len(); i++ {
			_ = call(fv.Index(i).Addr(), "Encode", b[i*es:(i+1)*es])
		}
	}
	return b
}

func leUint(b []byte) uint64 {
	var v uint64
	for i, c := range b {
		v |= uint64(c) << (8 * i)
	}
	return v
}

func putLE(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

// checkUpdateArgs checks the table of where UPDATE's parameters sit in the
// command entry against ConnUpdate.ToCommand and FromCommand.
func checkUpdateArgs(t *testing.T, tb *docTable, consts map[string]goConst) {
	t.Helper()
	cmdType, updType := reflect.TypeFor[Command](), reflect.TypeFor[ConnUpdate]()
	type arg struct {
		line   int
		field  string // command entry field
		lo, hi int
		param  string // ConnUpdate field
		pat    uint64
	}
	var args []arg
	var u ConnUpdate
	uv := reflect.ValueOf(&u).Elem()
	used := map[string]uint64{} // command field → bits documented
	seen := map[string]bool{}
	k := uint64(0x21)
	for _, r := range tb.Rows {
		where := tb.Where(r)
		s, _ := tb.Cell(r, "field")
		field, err1 := ident(s)
		s, _ = tb.Cell(r, "parameter")
		param, err2 := ident(s)
		s, _ = tb.Cell(r, "flag")
		flag, err3 := ident(s)
		s, _ = tb.Cell(r, "bits")
		lo, hi, err4 := parseBitRange(s)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil || field == "" || param == "" {
			t.Errorf("%s: want `Field`, bits, `Flag` or —, `Parameter`", where)
			continue
		}
		if flag != "" && consts[flag].typ != "UpdateFlags" {
			t.Errorf("%s: flag %s is not an UpdateFlags constant", where, flag)
		}
		cf, ok := cmdType.FieldByName(field)
		if !ok {
			t.Errorf("%s: the command entry has no field %s", where, field)
			continue
		}
		if hi >= 8*int(cf.Type.Size()) {
			t.Errorf("%s: bits %d–%d of the %d-bit %s", where, lo, hi, 8*cf.Type.Size(), field)
			continue
		}
		mask := (uint64(1)<<(hi-lo+1) - 1) << lo
		if used[field]&mask != 0 {
			t.Errorf("%s: bits %d–%d of %s documented twice", where, lo, hi, field)
		}
		used[field] |= mask
		pf, ok := updType.FieldByName(param)
		if !ok {
			t.Errorf("%s: ConnUpdate has no field %s", where, param)
			continue
		}
		if seen[param] {
			t.Errorf("%s: %s documented twice", where, param)
		}
		seen[param] = true
		width := 8 * int(pf.Type.Size())
		if pf.Type.Kind() == reflect.Bool {
			width = 1 // a flag: one bit
		}
		if width != hi-lo+1 {
			t.Errorf("%s: %s is %d bits, documented %d", where, param, width, hi-lo+1)
			continue
		}
		if pf.Type.Kind() == reflect.Bool {
			uv.FieldByName(param).SetBool(true)
			args = append(args, arg{line: r.Line, field: field, lo: lo, hi: hi, param: param, pat: 1})
			continue
		}
		pat := make([]byte, pf.Type.Size())
		for i := range pat {
			pat[i] = byte(k)
			k++
		}
		if err := setWire(uv.FieldByName(param), pat); err != nil {
			t.Fatal(err)
		}
		args = append(args, arg{line: r.Line, field: field, lo: lo, hi: hi, param: param, pat: leUint(pat)})
	}
	for i := 0; i < updType.NumField(); i++ {
		if n := updType.Field(i).Name; !seen[n] {
			t.Errorf("%s:%d: ConnUpdate.%s is not documented", tb.Path, tb.Line, n)
		}
	}
	var c Command
	u.ToCommand(&c)
	if c.Opcode != OpUpdate {
		t.Errorf("ToCommand sets opcode %v, want UPDATE", c.Opcode)
	}
	cv := reflect.ValueOf(c)
	for _, a := range args {
		got := (cv.FieldByName(a.field).Convert(reflect.TypeFor[uint64]()).Uint() >> a.lo) & (uint64(1)<<(a.hi-a.lo+1) - 1)
		if got != a.pat {
			t.Errorf("%s:%d: ToCommand puts %#x in bits %d–%d of %s, want %s = %#x", tb.Path, a.line, got, a.lo, a.hi, a.field, a.param, a.pat)
		}
	}
	for i := 0; i < cmdType.NumField(); i++ {
		f := cmdType.Field(i)
		if f.Name == "Opcode" {
			continue
		}
		v := cv.Field(i).Convert(reflect.TypeFor[uint64]()).Uint()
		if rest := v &^ used[f.Name]; rest != 0 {
			t.Errorf("ToCommand sets undocumented bits %#x of %s", rest, f.Name)
		}
	}
	var back ConnUpdate
	back.FromCommand(&c)
	if back != u {
		t.Errorf("FromCommand(ToCommand(u)) = %+v, want %+v", back, u)
	}
}

var anchorLinkRE = regexp.MustCompile(`\]\(([^)\s#]*)#([^)\s]+)\)`)

// TestDocLinks checks that every link to a section (file.md#anchor, or
// #anchor) in the parsed docs names a heading that exists, so the prose
// pointers between docs/rings.md, docs/abi-blocks.md and docs/iwarp.md do
// not rot when a section is renamed or moved.
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{}
	load := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := map[string]bool{}
		fenced := false
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
			}
			if !fenced && strings.HasPrefix(line, "#") {
				a[slug(strings.TrimSpace(strings.TrimLeft(line, "#")))] = true
			}
		}
		anchors[path] = a
		return a, nil
	}
	n := 0
	for _, p := range docPaths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range anchorLinkRE.FindAllStringSubmatch(line, -1) {
				target := p
				if m[1] != "" {
					if !strings.HasSuffix(m[1], ".md") || strings.Contains(m[1], "://") {
						continue
					}
					target = filepath.ToSlash(filepath.Join(filepath.Dir(p), m[1]))
				}
				a, err := load(target)
				if err != nil {
					t.Errorf("%s:%d: link to %s: %v", p, i+1, m[1], err)
					continue
				}
				if !a[m[2]] {
					t.Errorf("%s:%d: link to %s#%s: no such section", p, i+1, target, m[2])
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Error("no section links found: is the link pattern right?")
	}
}
