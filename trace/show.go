package trace

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// RingRole is what a ring is, as show names it.
type RingRole string

// Ring roles. A device opens command, notification, transmit and receive
// rings at start, then per QP its send and receive queues and per CQ its
// completion ring.
const (
	RoleCommand RingRole = "cmd"
	RoleNotify  RingRole = "ntf"
	RoleTx      RingRole = "tx"
	RoleRx      RingRole = "rx"
	RoleSQ      RingRole = "sq"
	RoleRQ      RingRole = "rq"
	RoleCQ      RingRole = "cq"
)

// Printer decodes records into lines, learning each device's rings from
// its Ring records.
type Printer struct {
	names map[uint8]string
	rings map[uint8][]ringInfo
	// Hex adds the bytes of entries and frames.
	Hex bool
}

type ringInfo struct {
	role  RingRole
	esize uint32
	count uint32
}

// NewPrinter returns a Printer.
func NewPrinter() *Printer {
	return &Printer{names: map[uint8]string{}, rings: map[uint8][]ringInfo{}}
}

// Device is the name of device dev (learnt from its Device record).
func (p *Printer) Device(dev uint8) string {
	if n, ok := p.names[dev]; ok {
		return n
	}
	return fmt.Sprintf("dev%d", dev)
}

// Learn takes what a record says about devices and rings without printing it.
func (p *Printer) Learn(r *Record) { p.learn(r) }

func (p *Printer) learn(r *Record) {
	switch r.Kind {
	case KindDevice:
		var info DeviceInfo
		if json.Unmarshal(r.Data, &info) == nil && info.Name != "" {
			p.names[r.Dev] = info.Name
		}
	case KindRing:
		rs := p.rings[r.Dev]
		role := RoleCQ
		switch {
		case len(rs) < 4:
			role = [...]RingRole{RoleCommand, RoleNotify, RoleTx, RoleRx}[len(rs)]
		case r.Flags&1 != 0:
			role = RoleCQ
		case r.Len == rings.SQEntrySize && (len(rs) == 4 || rs[len(rs)-1].role != RoleSQ):
			role = RoleSQ
		default:
			role = RoleRQ
		}
		if int(r.Ring) == len(rs) {
			p.rings[r.Dev] = append(rs, ringInfo{role: role, esize: r.Len, count: r.Val})
		}
	}
}

func (p *Printer) ring(dev uint8, id uint16) ringInfo {
	rs := p.rings[dev]
	if int(id) < len(rs) {
		return rs[id]
	}
	return ringInfo{role: RingRole(fmt.Sprintf("ring%d", id))}
}

func (p *Printer) ringName(dev uint8, id uint16) string {
	ri := p.ring(dev, id)
	if id < 4 {
		return string(ri.role)
	}
	return fmt.Sprintf("%s%d", ri.role, id)
}

var wordNames = map[uint8]string{rings.OffProducerIndex: "producer index", rings.OffConsumerIndex: "consumer index",
	rings.OffProducerFlags: "producer flags", rings.OffConsumerFlags: "consumer flags"}

// Format returns r as one or more lines (without a trailing newline).
func (p *Printer) Format(r *Record) string {
	p.learn(r)
	dir := "  "
	switch {
	case r.Kind.IsOutput():
		dir = "→ " // the device did it
	case r.Kind == KindLoad || r.Kind == KindRead || r.Kind == KindFrameIn || r.Kind == KindBell:
		dir = "← " // the device was given it
	}
	var b strings.Builder
	switch r.Kind {
	case KindDevice:
		fmt.Fprintf(&b, "device %s: %s", p.Device(r.Dev), r.Data)
		return b.String()
	case KindStep:
		fmt.Fprintf(&b, "%s step %d  t=%s", p.Device(r.Dev), r.N, fmtTime(r.Now))
		if r.Flags&StepDoorbell != 0 {
			b.WriteString("  doorbell")
		}
		if r.Flags&StepParked != 0 {
			b.WriteString("  after sleeping")
		}
		if r.Flags&StepStop != 0 {
			b.WriteString("  stop")
		}
		return b.String()
	}
	b.WriteString("    " + dir)
	switch r.Kind {
	case KindRing:
		role := "consumes"
		if r.Flags&1 != 0 {
			role = "produces"
		}
		fmt.Fprintf(&b, "ring %s at %#x: %d × %d bytes (the device %s)", p.ringName(r.Dev, r.Ring), r.Addr, r.Val, r.Len, role)
	case KindLoad, KindStore:
		fmt.Fprintf(&b, "%s %s = %d", p.ringName(r.Dev, r.Ring), wordNames[r.Off], r.Val)
		ri := p.ring(r.Dev, r.Ring)
		if ri.esize > 0 && len(r.Data) > 0 {
			n := uint32(len(r.Data)) / ri.esize
			for k := uint32(0); k < n; k++ {
				e := r.Data[k*ri.esize : (k+1)*ri.esize]
				fmt.Fprintf(&b, "\n        [%d] %s", r.Val-n+k, p.entry(ri.role, e))
				if p.Hex {
					b.WriteString("\n" + indentHex(e))
				}
			}
		}
	case KindComplete:
		ri := p.ring(r.Dev, r.Ring)
		fmt.Fprintf(&b, "%s[%d] written back: %s", p.ringName(r.Dev, r.Ring), r.Val, p.entry(ri.role, r.Data))
	case KindRead:
		fmt.Fprintf(&b, "dma read %d bytes at %#x", len(r.Data), r.Addr)
		if p.Hex {
			b.WriteString("\n" + indentHex(r.Data[:min(len(r.Data), 256)]))
		}
	case KindWrite:
		fmt.Fprintf(&b, "dma write %d bytes at %#x", r.Len, r.Addr)
		if r.Flags&WriteHashed != 0 {
			fmt.Fprintf(&b, " sha256 %x", r.Data[:8])
		} else {
			fmt.Fprintf(&b, ": %x", r.Data[:min(len(r.Data), 32)])
		}
	case KindFrameIn, KindFrameOut:
		name := "frame in "
		if r.Kind == KindFrameOut {
			name = "frame out"
		}
		if r.Kind == KindFrameIn && r.Flags&FrameTooBig != 0 {
			fmt.Fprintf(&b, "%s: too long for the device's buffer (dropped by the port)", name)
			break
		}
		fmt.Fprintf(&b, "%s %4d  %s", name, len(r.Data), FormatFrame(r.Data))
		if r.Kind == KindFrameOut && r.Flags&FramePortError != 0 {
			b.WriteString("  (refused by the port)")
		}
		if p.Hex {
			b.WriteString("\n" + indentHex(r.Data))
		}
	case KindBell:
		if r.Flags&BellCQ == 0 {
			fmt.Fprintf(&b, "doorbell register: QP %d", r.Val)
			break
		}
		fmt.Fprintf(&b, "arm register: CQ %d%s", r.Val, fmtArms(r.Len))
	case KindIrq:
		fmt.Fprintf(&b, "interrupt %s", [...]string{"notify", "tx-space", "command"}[min(int(r.Vec), 2)])
	default:
		fmt.Fprintf(&b, "%v", r.Kind)
	}
	return b.String()
}

func (p *Printer) entry(role RingRole, e []byte) string {
	switch role {
	case RoleCommand:
		if len(e) != rings.CommandEntrySize {
			break
		}
		var c rings.Command
		_ = c.Decode(rings.CommandEntry(e))
		s := fmt.Sprintf("%v conn=%d tag=%#x addr=%#x len=%d args=%d,%d,%d,%d", c.Opcode, c.Conn, c.Tag, uint64(c.Addr), c.Len, c.Arg0, c.Arg1, c.Arg2, c.Arg3)
		if ctl := rings.CommandEntry(e); ctl[0]&0x2 != 0 || c.Status != 0 {
			s += fmt.Sprintf(" → %v result=%d", c.Status, c.Result)
		}
		return s
	case RoleNotify:
		if len(e) != rings.NotificationEntrySize {
			break
		}
		var n rings.Notification
		_ = n.Decode(rings.NotificationEntry(e))
		return fmt.Sprintf("%v conn=%d seq=%d ack=%d acks=%d len=%d aux=%d", n.Flags, n.Conn, n.Seq, n.Ack, n.AckCount, n.Len, n.Aux)
	case RoleTx:
		if len(e) != rings.TxDescSize {
			break
		}
		var t rings.Tx
		_ = t.Decode(rings.TxDesc(e))
		return fmt.Sprintf("tx conn=%d addr=%#x len=%d flags=%#x tag=%#x", t.Conn, uint64(t.Addr), t.Len, uint32(t.Flags), t.Tag)
	case RoleRx:
		if len(e) != rings.RxDescSize {
			break
		}
		var x rings.Rx
		_ = x.Decode(rings.RxDesc(e))
		return fmt.Sprintf("rx buf=%d addr=%#x len=%d tag=%#x", x.BufID, uint64(x.Addr), x.Len, x.Tag)
	case RoleSQ:
		if len(e) != rings.SQEntrySize {
			break
		}
		var w rings.SendWR
		_ = w.Decode(rings.SQEntry(e))
		s := fmt.Sprintf("%v wr=%#x flags=%#x rkey=%#x raddr=%#x", w.Opcode, w.WRID, uint8(w.Flags), w.RKey, w.RemoteAddr)
		return s + fmtSGL(w.SGL[:min(w.NumSGE, len(w.SGL))])
	case RoleRQ:
		if len(e) != rings.RQEntrySize {
			break
		}
		var w rings.RecvWR
		_ = w.Decode(rings.RQEntry(e))
		s := fmt.Sprintf("recv wr=%#x", w.WRID)
		return s + fmtSGL(w.SGL[:min(w.NumSGE, len(w.SGL))])
	case RoleCQ:
		if len(e) != rings.CQEntrySize {
			break
		}
		var c rings.Completion
		_ = c.Decode(rings.CQEntry(e))
		return c.String()
	}
	return hex.EncodeToString(e)
}

// fmtSGL formats a work request's scatter/gather elements.
func fmtSGL(sgl []rings.SGE) string {
	s := ""
	for _, g := range sgl {
		s += fmt.Sprintf(" sge{%#x %d %#x}", g.Addr, g.Length, g.LKey)
	}
	return s
}

// FormatFrame summarises an Ethernet frame the way tshark's one-line view
// does: addresses, ports, TCP flags, sequence numbers, window and length.
func FormatFrame(f []byte) string {
	if len(f) < hdr.EthernetSize {
		return fmt.Sprintf("runt frame of %d bytes", len(f))
	}
	eth := hdr.Ethernet(f)
	var src, dst netip.Addr
	var tcp hdr.TCP
	switch eth.Type() {
	case hdr.EtherTypeARP:
		return "ARP " + fmt.Sprintf("% x", f[hdr.EthernetSize:min(len(f), hdr.EthernetSize+28)])
	case hdr.EtherTypeIPv4:
		ip, t, err := hdr.ParseTCPFrame(f)
		if err != nil {
			return fmt.Sprintf("IPv4, not a TCP segment we parse: %v", err)
		}
		src, dst, tcp = ip.SourceAddress(), ip.DestinationAddress(), t
	case hdr.EtherTypeIPv6:
		ip, err := hdr.ParseIPv6(f[hdr.EthernetSize:])
		var c hdr.IPv6Chain
		if err == nil {
			err = hdr.WalkIPv6(ip, &c)
		}
		if err != nil {
			return fmt.Sprintf("IPv6, not a packet we parse: %v", err)
		}
		seg, ok := hdr.IPv6TCPSegment(ip, &c)
		if !ok {
			if c.Proto == hdr.ProtoICMPv6 && !c.Fragment && len(ip) > c.L4Off {
				return fmt.Sprintf("ICMPv6 %v → %v type %d", ip.SourceAddress(), ip.DestinationAddress(), ip[c.L4Off])
			}
			return fmt.Sprintf("IPv6 %v → %v, protocol %d", ip.SourceAddress(), ip.DestinationAddress(), c.Proto)
		}
		if tcp, err = hdr.ParseTCP(seg); err != nil {
			return fmt.Sprintf("IPv6, not a TCP segment we parse: %v", err)
		}
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	default:
		return fmt.Sprintf("ethertype %#04x", eth.Type())
	}
	var fl []string
	for i, n := range []string{"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"} {
		if tcp.Flags()&(1<<i) != 0 {
			fl = append(fl, n)
		}
	}
	// AddrPort's form: 10.0.0.1:5001, [fd00::1]:5001.
	return fmt.Sprintf("TCP %v → %v [%s] seq=%d ack=%d win=%d len=%d", netip.AddrPortFrom(src, tcp.SrcPort()), netip.AddrPortFrom(dst, tcp.DstPort()),
		strings.Join(fl, ","), tcp.Seq(), tcp.Ack(), tcp.Window(), len(tcp.Payload()))
}

func fmtTime(ns int64) string {
	return fmt.Sprintf("%d.%09ds", ns/1e9, ns%1e9)
}

func indentHex(b []byte) string {
	var out strings.Builder
	for i := 0; i < len(b); i += 16 {
		fmt.Fprintf(&out, "          %04x  % x\n", i, b[i:min(i+16, len(b))])
	}
	return strings.TrimRight(out.String(), "\n")
}

// Show prints a trace's records, decoded, one step per paragraph. Steps
// with nothing in them are left out unless idle is set.
func Show(w io.Writer, r io.Reader, p *Printer, idle bool) error {
	tr, err := NewReader(r)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "trace version %d, %s, clock %s, recorded from: %s\n", tr.Header.Version, tr.Header.Tool, tr.Header.Clock, strings.Join(tr.Header.Args, " "))
	var pending *Record // a step not printed yet
	for {
		rec, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if rec.Kind == KindStep && !idle {
			c := *rec
			pending = &c
			p.learn(rec)
			continue
		}
		if pending != nil && rec.Kind != KindDevice {
			fmt.Fprintln(w, p.Format(pending))
			pending = nil
		}
		fmt.Fprintln(w, p.Format(rec))
	}
}

// fmtArms names a CQ arm record's arms.
func fmtArms(a uint32) string {
	var b strings.Builder
	for i, n := range [...]string{"all", "solicited", "if-pending all", "if-pending solicited"} {
		if a&(1<<i) != 0 {
			b.WriteString(", " + n)
		}
	}
	return b.String()
}
