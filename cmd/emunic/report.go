package main

import (
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// table prints aligned columns: the first left columns (at least one)
// left-aligned (labels), the others right-aligned (numbers), two spaces
// apart, indented by two.
type table struct {
	left int
	rows [][]string
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	var width []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, r := range t.rows {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			case i < t.left:
				b.WriteString("  " + c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// hostReport is one host's counters as the reports print them, read once
// (after the hosts stopped, so they are final) and then only formatted: the
// tables show one moment, and tests compare the figures as data.
type hostReport struct {
	name string // column heading, e.g. "A 10.0.0.1"
	hostSnap
	port     port.Stats // the host's port (below any recorder)
	havePort bool
}

// reportHost reads host h's counters and, if p is not nil, its port's.
func reportHost(name string, h *tcpstack.Host, p port.Port) hostReport {
	r := hostReport{name: name, hostSnap: snapHost(h)}
	if p != nil {
		r.port, r.havePort = p.Stats(), true
	}
	return r
}

// isDropOrError tells the counters that report a loss or a fault apart from
// the ones that report work done.
func isDropOrError(id rings.StatID) bool {
	s := id.String()
	return strings.Contains(s, "drop") || strings.Contains(s, "error") || strings.Contains(s, "bad")
}

// printDeviceCounters prints the device stat block's activity counters (the
// drops and errors are printed by printDrops), one column per host. Counters
// that are zero on every host are left out.
func printDeviceCounters(w io.Writer, hosts []hostReport) {
	fmt.Fprintln(w, "device counters (stat block)")
	t := &table{}
	head := []string{""}
	for _, h := range hosts {
		head = append(head, h.name)
	}
	t.row(head...)
	for id := rings.StatID(0); id < rings.NumStats; id++ {
		if isDropOrError(id) {
			continue
		}
		cells := []string{id.String()}
		any := false
		for _, h := range hosts {
			v := h.stat[id]
			any = any || v != 0
			cells = append(cells, u64(v))
		}
		if any {
			t.row(cells...)
		}
	}
	t.write(w)
}

// printRingStats prints the mechanics of every ring: the device's side from
// its ring counters, the driver's side from its statistics.
func printRingStats(w io.Writer, hosts []hostReport) {
	fmt.Fprintln(w, "rings (device side)")
	type ringRow struct {
		host, ring string
		s          rings.RingStats
	}
	var rows []ringRow
	var sum rings.RingStats
	for _, h := range hosts {
		rc := h.ring
		for _, r := range []ringRow{
			{h.name, "command", rc.Command}, {h.name, "notify", rc.Notify},
			{h.name, "tx", rc.Tx}, {h.name, "rx", rc.Rx},
		} {
			rows = append(rows, r)
			sum.Kicks += r.s.Kicks
			sum.Suppressed += r.s.Suppressed
			sum.Parks += r.s.Parks
		}
	}
	// Entries, publishes, full and phase errors always; the doorbell
	// columns only when the device counted any (its unit parks on its own
	// doorbell, not per ring).
	type col struct {
		name string
		get  func(rings.RingStats) uint64
		show bool
	}
	cols := []col{
		{"entries", func(s rings.RingStats) uint64 { return s.Entries }, true},
		{"publishes", func(s rings.RingStats) uint64 { return s.Publishes }, true},
		{"kicks", func(s rings.RingStats) uint64 { return s.Kicks }, sum.Kicks != 0},
		{"suppressed", func(s rings.RingStats) uint64 { return s.Suppressed }, sum.Suppressed != 0},
		{"parks", func(s rings.RingStats) uint64 { return s.Parks }, sum.Parks != 0},
		{"full", func(s rings.RingStats) uint64 { return s.Full }, true},
		{"phase_errs", func(s rings.RingStats) uint64 { return s.PhaseErrs }, true},
	}
	t := &table{left: 2}
	head := []string{"", "ring"}
	for _, c := range cols {
		if c.show {
			head = append(head, c.name)
		}
	}
	t.row(head...)
	for _, r := range rows {
		cells := []string{r.host, r.ring}
		for _, c := range cols {
			if c.show {
				cells = append(cells, u64(c.get(r.s)))
			}
		}
		t.row(cells...)
	}
	t.write(w)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "driver (host side)")
	t = &table{}
	head = []string{""}
	for _, h := range hosts {
		head = append(head, h.name)
	}
	t.row(head...)
	for _, f := range driverRows {
		cells := []string{f.name}
		any := false
		for _, h := range hosts {
			v := f.get(h.drv)
			any = any || v != 0
			cells = append(cells, u64(v))
		}
		if any || !f.nonZero {
			t.row(cells...)
		}
	}
	t.write(w)
}

// driverRows are the driver table's rows; nonZero rows are left out when
// they are zero on every host.
var driverRows = []struct {
	name    string
	get     func(tcpstack.DriverStats) uint64
	nonZero bool
}{
	{"tx_frames", func(s tcpstack.DriverStats) uint64 { return s.TxFrames }, false},
	{"tx_bytes", func(s tcpstack.DriverStats) uint64 { return s.TxBytes }, false},
	{"tx_ring_full_waits", func(s tcpstack.DriverStats) uint64 { return s.TxRingFull }, false},
	{"rx_frames", func(s tcpstack.DriverStats) uint64 { return s.RxFrames }, false},
	{"rx_bytes", func(s tcpstack.DriverStats) uint64 { return s.RxBytes }, false},
	{"notifications", func(s tcpstack.DriverStats) uint64 { return s.Notifications }, false},
	{"interrupts", func(s tcpstack.DriverStats) uint64 { return s.Interrupts }, false},
	{"commands", func(s tcpstack.DriverStats) uint64 { return s.Commands }, false},
	// netstack's frames of delegated flows that the driver kept off the
	// wire (retransmissions racing the freeze), and received frames of those
	// flows it kept from netstack: why "segments sent by netstack" is
	// more than netstack's frames on the wire.
	{"frozen_drops_out", func(s tcpstack.DriverStats) uint64 { return s.FrozenDropsOut }, true},
	{"frozen_drops_in", func(s tcpstack.DriverStats) uint64 { return s.FrozenDropsIn }, true},
	// A peer's first bytes to an RDMA listener that came before its end
	// was delegated: in rx_frames, held from netstack and handed to the
	// device again for the QP.
	{"rx_held_for_rdma", func(s tcpstack.DriverStats) uint64 { return s.RxHeld }, true},
	// Bytes the CPU copied: legacy frames, delegated Read/Write, and the
	// verbs layer's own copies (inline sends, private data, held frames).
	{"host_copy_bytes", func(s tcpstack.DriverStats) uint64 { return s.HostCopyBytes }, true},
	{"rdma_copy_bytes", func(s tcpstack.DriverStats) uint64 { return s.RDMACopyBytes }, true},
}

// dropRow is one non-zero drop or error counter.
type dropRow struct {
	where, name string
	v           uint64
}

// collectDrops gathers every non-zero drop and error counter of the hosts:
// the device's stat block, the driver's, the delegated TCP engine's and the
// port's.
func collectDrops(hosts []hostReport) []dropRow {
	var out []dropRow
	for _, h := range hosts {
		for id := rings.StatID(0); id < rings.NumStats; id++ {
			if v := h.stat[id]; v != 0 && isDropOrError(id) {
				out = append(out, dropRow{h.name + " device", id.String(), v})
			}
		}
		ds := h.drv
		for _, c := range []struct {
			name string
			v    uint64
		}{{"tx_dropped", ds.TxDropped}, {"rx_errors", ds.RxErrors}, {"rx_frame_too_large", ds.RxFrameTooLarge},
			{"ntf_ring_errors", ds.NtfRingErrors}} {
			if c.v != 0 {
				out = append(out, dropRow{h.name + " driver", c.name, c.v})
			}
		}
		for _, c := range engineCounters(h.eng) {
			if c.drop && c.v != 0 {
				out = append(out, dropRow{h.name + " engine", c.name, c.v})
			}
		}
		if h.havePort {
			for _, c := range portDrops(h.port) {
				out = append(out, dropRow{h.name + " port", c.name, c.v})
			}
		}
	}
	return out
}

type namedCount struct {
	name string
	v    uint64
}

// portDrops lists a port's non-zero drop and error counters by name.
func portDrops(s port.Stats) []namedCount {
	var out []namedCount
	for _, c := range []namedCount{
		{"tx_drop_too_big", s.TxDropTooBig}, {"tx_drop_runt", s.TxDropRunt},
		{"tx_drop_closed", s.TxDropClosed}, {"tx_drop_link_down", s.TxDropLinkDown},
		{"tx_drop_queue_full", s.TxDropQueueFull}, {"tx_drop_loss (wire impairment)", s.TxDropLoss},
		{"tx_errors", s.TxErrors}, {"rx_drop_too_big", s.RxDropTooBig},
		{"rx_drop_queue_full", s.RxDropQueueFull}, {"rx_drop_closed", s.RxDropClosed},
	} {
		if c.v != 0 {
			out = append(out, c)
		}
	}
	return out
}

// printDrops prints every non-zero drop and error counter, or says there
// were none.
func printDrops(w io.Writer, rows []dropRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "drops and errors: none")
		return
	}
	fmt.Fprintln(w, "drops and errors (non-zero only)")
	t := &table{left: 2}
	for _, r := range rows {
		t.row(r.where, r.name, u64(r.v))
	}
	t.write(w)
}

// engineCounter is one field of the delegated TCP engine's counters.
type engineCounter struct {
	name string // snake_case, like the stat block's names
	v    uint64
	drop bool // a drop or an error, printed with the others by printDrops
}

// engineCounters lists every counter of the engine, in the order of
// tcpstack.EngineCounters, so new fields show up without a change here.
func engineCounters(c tcpstack.EngineCounters) []engineCounter {
	v := reflect.ValueOf(c)
	t := v.Type()
	out := make([]engineCounter, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() != reflect.Uint64 {
			continue
		}
		out = append(out, engineCounter{name: snakeCase(f.Name), v: v.Field(i).Uint(), drop: isEngineDrop(f.Name)})
	}
	return out
}

// isEngineDrop tells the engine's drop and error counters (by field name)
// from its activity counters.
func isEngineDrop(field string) bool {
	switch field {
	case "TxErrors", "DMAErrors", "Timeouts", "OOOBytesDropped", "OOODropRanges":
		return true
	}
	return strings.HasPrefix(field, "Drop")
}

// snakeCase turns a Go field name into the report's style:
// TxRetransSegs -> tx_retrans_segs, OOOSegments -> ooo_segments,
// DropPAWS -> drop_paws.
func snakeCase(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		upper := unicode.IsUpper(c)
		if i > 0 && upper {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// printEngineCounters prints the delegated TCP engine's activity counters
// that are not zero on some host, one column per host (the drops and
// errors are printed by printDrops). With no delegated traffic at all it
// says so in one line.
func printEngineCounters(w io.Writer, hosts []hostReport) {
	cols := make([][]engineCounter, len(hosts))
	for i, h := range hosts {
		cols[i] = engineCounters(h.eng)
	}
	t := &table{}
	head := []string{""}
	for _, h := range hosts {
		head = append(head, h.name)
	}
	t.row(head...)
	rows := 0
	for j := range cols[0] {
		if cols[0][j].drop {
			continue
		}
		cells := []string{cols[0][j].name}
		nonZero := false
		for i := range hosts {
			nonZero = nonZero || cols[i][j].v != 0
			cells = append(cells, u64(cols[i][j].v))
		}
		if nonZero {
			t.row(cells...)
			rows++
		}
	}
	if rows == 0 {
		fmt.Fprintln(w, "delegated TCP engine (offload unit): no delegated traffic")
		return
	}
	fmt.Fprintln(w, "delegated TCP engine (offload unit)")
	t.write(w)
}
