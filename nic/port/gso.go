package port

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/emunic/emunic/nic/hdr"
)

// The virtio-net header (virtio spec 1.2 §5.1.6, struct virtio_net_hdr, 10
// bytes, little-endian) that a TAP opened with IFF_VNET_HDR puts before
// every frame, both ways. With the checksum and TSO offloads on, the
// kernel hands the TAP whole TCP super-frames of up to 64 KiB (one read
// where there would be dozens), with the checksum left for the device to
// finish; the port splits them into wire-size frames with their checksums
// done, so nothing behind it (the NIC, a recorder) ever sees a frame the
// wire could not carry.
const (
	VnetHdrSize       = 10
	vnetOffFlags      = 0 // u8
	vnetOffGSOType    = 1 // u8
	vnetOffHdrLen     = 2 // u16: Ethernet + IP + TCP headers (a hint)
	vnetOffGSOSize    = 4 // u16: the MSS of the segments to cut
	vnetOffCsumStart  = 6 // u16: where the checksummed part starts (the L4 header)
	vnetOffCsumOffset = 8 // u16: where the checksum field is, from CsumStart
)

// Virtio-net header flags and GSO types.
const (
	VnetFlagNeedsCsum = 1    // the L4 checksum is the pseudo-header's only: finish it
	VnetFlagDataValid = 2    // the checksum was checked (receive side)
	VnetGSONone       = 0    // an ordinary frame
	VnetGSOTCPv4      = 1    // a TCP/IPv4 super-frame: cut into GSOSize segments
	VnetGSOUDP        = 3    // UFO (not enabled on our TAPs)
	VnetGSOTCPv6      = 4    // a TCP/IPv6 super-frame (TSO6): cut into GSOSize segments
	VnetGSOECN        = 0x80 // with a GSO type: the flow uses ECN (CWR on the first segment only)
)

// TUNSETOFFLOAD bits (linux/if_tun.h).
const (
	tunFCsum = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04
)

// VnetHdr is a decoded virtio-net header.
type VnetHdr struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16
	GSOSize    uint16
	CsumStart  uint16
	CsumOffset uint16
}

// Decode reads h from b (at least VnetHdrSize bytes).
func (h *VnetHdr) Decode(b []byte) error {
	if len(b) < VnetHdrSize {
		return fmt.Errorf("%w: virtio-net header of %d bytes", ErrBadGSO, len(b))
	}
	le := binary.LittleEndian
	*h = VnetHdr{Flags: b[vnetOffFlags], GSOType: b[vnetOffGSOType], HdrLen: le.Uint16(b[vnetOffHdrLen:]),
		GSOSize: le.Uint16(b[vnetOffGSOSize:]), CsumStart: le.Uint16(b[vnetOffCsumStart:]), CsumOffset: le.Uint16(b[vnetOffCsumOffset:])}
	return nil
}

// Encode writes h into b (at least VnetHdrSize bytes).
func (h *VnetHdr) Encode(b []byte) {
	le := binary.LittleEndian
	b[vnetOffFlags], b[vnetOffGSOType] = h.Flags, h.GSOType
	le.PutUint16(b[vnetOffHdrLen:], h.HdrLen)
	le.PutUint16(b[vnetOffGSOSize:], h.GSOSize)
	le.PutUint16(b[vnetOffCsumStart:], h.CsumStart)
	le.PutUint16(b[vnetOffCsumOffset:], h.CsumOffset)
}

// ErrBadGSO is a virtio-net header or super-frame the port cannot take
// apart (counted in RxDropBadGSO).
var ErrBadGSO = errors.New("port: malformed offload frame")

// finishCsum completes a partial checksum: the field at start+offset holds
// the pseudo-header's sum, and the checksum of everything from start on,
// that field included, is the transport checksum.
func finishCsum(frame []byte, start, offset int) error {
	if start < 0 || start+offset+2 > len(frame) || offset < 0 {
		return fmt.Errorf("%w: checksum at %d+%d in a frame of %d bytes", ErrBadGSO, start, offset, len(frame))
	}
	binary.BigEndian.PutUint16(frame[start+offset:], ^hdr.Checksum(frame[start:], 0))
	return nil
}

// CsumReader is a port that can say a frame's transport checksum needs no
// checking: a TAP with offloads hands over the segments of a super-frame
// the kernel built (checksum left to the device), and the device can take
// them without the port computing the checksums and the device checking
// them again. ReadFrame still gives whole frames, checksums done (for a
// recorder, or any reader that does not ask).
type CsumReader interface {
	ReadFrameCsum(buf []byte) (n int, l4Verified bool, err error)
}

// BurstWriter is a port that can wake its far end once per burst of
// frames rather than per frame: after DeferWakeups, the frames WriteFrame
// takes are visible to the far end, and a parked reader woken, by
// FlushWakeups at the latest, which the writer must call at the end of
// every burst (before it waits for anything itself). Only the writer goroutine calls either. A port
// whose wake-up is a system call into another process (the shared-memory
// link) saves one per frame that finds the reader parked.
type BurstWriter interface {
	DeferWakeups()
	FlushWakeups()
}

// TSOWriter is a port that segments TCP itself: WriteFrameTSO takes a
// TCP/IPv4 or TCP/IPv6 super-frame (whole checksums) and puts it on the wire as
// segments of mss payload bytes. TSO reports whether the port does (a TAP
// opened without offloads does not).
type TSOWriter interface {
	TSO() bool
	WriteFrameTSO(frame []byte, mss int) error
}

// gsoSplitter cuts TCP/IPv4 and TCP/IPv6 super-frames into wire-size
// segments, into memory it keeps (no allocation per frame once it has
// grown).
type gsoSplitter struct {
	out      []byte
	ends     []int // out[ends[i-1]:ends[i]] is segment i
	next     int   // the next segment to hand out
	count    int
	src, dst netip.Addr // for the segments' TCP checksums
	l4       int        // offset of the TCP header in a segment
}

// pending reports whether segments are waiting.
func (s *gsoSplitter) pending() bool { return s.next < s.count }

// pop copies the next segment into buf and returns its length, or
// ErrFrameTooBig (the segment is dropped) when buf is short. With csum the
// segment's TCP checksum is computed; without, the field is left as the
// kernel's partial sum, for a reader that takes the frame as verified.
func (s *gsoSplitter) pop(buf []byte, csum bool) (int, error) {
	start := 0
	if s.next > 0 {
		start = s.ends[s.next-1]
	}
	seg := s.out[start:s.ends[s.next]]
	s.next++
	if len(seg) > len(buf) {
		return 0, ErrFrameTooBig
	}
	if csum {
		hdr.TCP(seg[s.l4:]).UpdateChecksumAddr(s.src, s.dst)
	}
	return copy(buf, seg), nil
}

// split takes a super-frame apart: every segment gets the headers with
// its own IP length (and, over IPv4, identification and header checksum;
// IPv6 has neither), its own sequence number, FIN and PSH only on the
// last, CWR only on the first, and its TCP checksum computed whole.
func (s *gsoSplitter) split(h *VnetHdr, frame []byte) error {
	s.next, s.count, s.ends = 0, 0, s.ends[:0]
	sf, err := parseSuper(h, frame)
	if err != nil {
		return err
	}
	tcp, payload, mss := sf.tcp, sf.payload, sf.mss
	l3, thl := sf.l3, tcp.HeaderLen()
	hl, nseg := sf.hl, sf.segs
	if need := nseg*hl + len(payload); cap(s.out) < need {
		s.out = make([]byte, 0, need)
	}
	s.out = s.out[:0]
	seq, flags := tcp.Seq(), tcp.Flags()
	var id uint16
	if !sf.v6 {
		id = hdr.IPv4(sf.ip).ID()
	}
	for i := 0; i < nseg; i++ {
		chunk := payload[min(i*mss, len(payload)):min((i+1)*mss, len(payload))]
		start := len(s.out)
		s.out = append(s.out, frame[:hl]...)
		s.out = append(s.out, chunk...)
		seg := s.out[start:]
		if sf.v6 {
			hdr.IPv6(seg[hdr.EthernetSize:]).SetPayloadLen(uint16(l3 - hdr.IPv6Size + thl + len(chunk)))
		} else {
			sip := hdr.IPv4(seg[hdr.EthernetSize:])
			sip.SetTotalLen(uint16(l3 + thl + len(chunk)))
			sip.SetID(id + uint16(i))
			sip.UpdateChecksum()
		}
		stcp := hdr.TCP(seg[hdr.EthernetSize+l3:])
		stcp.SetSeq(seq + uint32(i*mss))
		f := flags
		if i != nseg-1 {
			f &^= hdr.TCPFlagFIN | hdr.TCPFlagPSH
		}
		if i != 0 {
			f &^= hdr.TCPFlagCWR
		}
		stcp.SetFlags(f)
		s.ends = append(s.ends, len(s.out))
	}
	s.count, s.src, s.dst, s.l4 = nseg, sf.src, sf.dst, hdr.EthernetSize+l3
	return nil
}

// gsoFrame is a TCP super-frame the kernel handed over, checked.
type gsoFrame struct {
	ip       []byte // the IP packet, up to its length field's end
	v6       bool
	l3       int // IP header bytes (IPv4 with options; IPv6 with extension headers)
	src, dst netip.Addr
	tcp      hdr.TCP
	payload  []byte
	mss      int // payload bytes per segment (GSO size)
	hl       int // Ethernet + IP + TCP header bytes of every segment
	segs     int // the wire segments it stands for
}

// wireBytes is what its segments weigh on the wire.
func (sf *gsoFrame) wireBytes() int { return sf.segs*sf.hl + len(sf.payload) }

// parseSuper checks a super-frame and its virtio-net header: TCP/IPv4
// (GSO TCPV4) or TCP/IPv6 (TCPV6, behind any extension headers but a
// fragment header), a GSO size, headers whole. The IP length field, not
// the read, says where the packet ends.
func parseSuper(h *VnetHdr, frame []byte) (gsoFrame, error) {
	var sf gsoFrame
	if len(frame) < hdr.EthernetSize {
		return sf, fmt.Errorf("%w: a super-frame of %d bytes", ErrBadGSO, len(frame))
	}
	et := hdr.Ethernet(frame).Type()
	switch h.GSOType &^ VnetGSOECN {
	case VnetGSOTCPv4:
		if et != hdr.EtherTypeIPv4 {
			return sf, fmt.Errorf("%w: a TCP/IPv4 super-frame that is not IPv4", ErrBadGSO)
		}
		ip := hdr.IPv4(frame[hdr.EthernetSize:])
		if len(ip) < hdr.IPv4MinSize || ip.Version() != 4 || ip.HeaderLen() < hdr.IPv4MinSize || len(ip) < ip.HeaderLen()+hdr.TCPMinSize || ip.Proto() != hdr.ProtoTCP {
			return sf, fmt.Errorf("%w: bad IPv4 header in a super-frame", ErrBadGSO)
		}
		sf.l3, sf.ip = ip.HeaderLen(), ip
		if tl := int(ip.TotalLen()); tl >= sf.l3+hdr.TCPMinSize && tl <= len(ip) {
			sf.ip = ip[:tl]
		}
		sf.src, sf.dst = ip.SourceAddress(), ip.DestinationAddress()
	case VnetGSOTCPv6:
		if et != hdr.EtherTypeIPv6 {
			return sf, fmt.Errorf("%w: a TCP/IPv6 super-frame that is not IPv6", ErrBadGSO)
		}
		ip, err := hdr.ParseIPv6(frame[hdr.EthernetSize:])
		if err != nil {
			return sf, fmt.Errorf("%w: bad IPv6 header in a super-frame: %v", ErrBadGSO, err)
		}
		var c hdr.IPv6Chain
		if err := hdr.WalkIPv6(ip, &c); err != nil || c.Proto != hdr.ProtoTCP || c.Fragment || len(ip) < c.L4Off+hdr.TCPMinSize {
			return sf, fmt.Errorf("%w: an IPv6 super-frame that is not unfragmented TCP", ErrBadGSO)
		}
		sf.v6, sf.l3, sf.ip = true, c.L4Off, ip
		sf.src, sf.dst = ip.SourceAddress(), ip.DestinationAddress()
	default:
		return sf, fmt.Errorf("%w: GSO type %#x (TCP/IPv4 and TCP/IPv6 are enabled)", ErrBadGSO, h.GSOType)
	}
	tcp := hdr.TCP(sf.ip[sf.l3:])
	thl := tcp.HeaderLen()
	if thl < hdr.TCPMinSize || thl > len(tcp) {
		return gsoFrame{}, fmt.Errorf("%w: bad TCP header in a super-frame", ErrBadGSO)
	}
	sf.mss = int(h.GSOSize)
	if sf.mss <= 0 {
		return gsoFrame{}, fmt.Errorf("%w: GSO size 0", ErrBadGSO)
	}
	sf.tcp, sf.payload = tcp, tcp[thl:]
	sf.hl = hdr.EthernetSize + sf.l3 + thl
	sf.segs = max(1, (len(sf.payload)+sf.mss-1)/sf.mss)
	return sf, nil
}

// fixLengths makes a super-frame handed over whole (LRO) read as one
// packet: the IPv4 header checksum over its total length (the kernel
// leaves it for the device); an IPv6 header has none, and its payload
// length already covers the whole.
func (sf *gsoFrame) fixLengths() {
	if !sf.v6 {
		hdr.IPv4(sf.ip).UpdateChecksum()
	}
}

// LROBufferSize is a buffer ReadFrameLRO reads any frame into without a
// copy (the kernel's virtio-net header before it, LROFrame.Off).
const LROBufferSize = VnetHdrSize + TAPMaxFrameSize

// LROFrame says what ReadFrameLRO put in the caller's buffer.
type LROFrame struct {
	Off, N int // the frame is buf[Off:Off+N]
	// GSOSize > 0: the frame is a TCP/IPv4 or TCP/IPv6 super-frame
	// standing for Segs wire segments of GSOSize payload bytes (the last
	// one shorter): the first segment's headers with the IP length of the
	// whole (and over IPv4 a valid header checksum), the TCP checksum not
	// computed
	// (L4Verified), FIN and PSH as the last segment carries them.
	GSOSize    int
	Segs       int  // wire frames it stands for (1 for an ordinary frame)
	WireBytes  int  // their bytes on the wire (N for an ordinary frame)
	L4Verified bool // as CsumReader's
}

// LROReader is a port that can hand over a TCP super-frame whole (large
// receive offload), for a receiver that places a delegated flow's payload
// in one pass instead of segment by segment. A super-frame that does not
// fit buf comes as its segments, one per call, as ReadFrameCsum gives them.
// Ports that record frames (a Recorder) do not offer it: what they record
// stays wire-size frames.
type LROReader interface {
	ReadFrameLRO(buf []byte) (LROFrame, error)
}

// Splitter cuts a super-frame that ReadFrameLRO handed over into its wire
// segments, for a receiver that takes super-frames whole only for some
// flows (the rest go on as the wire would have carried them). Segments
// keep the kernel's partial TCP checksum: they are as verified as the
// super-frame was. No allocation per frame once it has grown.
type Splitter struct{ s gsoSplitter }

// Split takes frame (an LROFrame of gsoSize, of either family) apart; the
// previous frame's segments not yet taken are dropped.
func (p *Splitter) Split(gsoSize int, frame []byte) error {
	h := VnetHdr{GSOType: VnetGSOTCPv4, GSOSize: uint16(gsoSize)}
	if len(frame) >= hdr.EthernetSize && hdr.Ethernet(frame).Type() == hdr.EtherTypeIPv6 {
		h.GSOType = VnetGSOTCPv6
	}
	return p.s.split(&h, frame)
}

// Pending reports whether segments are waiting.
func (p *Splitter) Pending() bool { return p.s.pending() }

// Peek returns the next segment (valid until the next Split), or nil.
func (p *Splitter) Peek() []byte {
	if !p.s.pending() {
		return nil
	}
	start := 0
	if p.s.next > 0 {
		start = p.s.ends[p.s.next-1]
	}
	return p.s.out[start:p.s.ends[p.s.next]]
}

// Pop moves past the segment Peek returned.
func (p *Splitter) Pop() {
	if p.s.pending() {
		p.s.next++
	}
}
