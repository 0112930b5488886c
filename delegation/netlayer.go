package delegation

import (
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// The engine's network layer. Above it the engine works on hdr.Tuple and
// TCP segments only: a connection is keyed, matched and checksummed by its
// tuple. This file is where the network header is read (the IPv4 front end
// of Input, for callers that hold a raw header) and written (a connection's
// frame template, and the per-frame length, ID and checksums). The family
// is the tuple's: IPv4 (no options) or IPv6 (no extension headers); the TCP
// code above never asks which.

// netHdrLenOf is the length of the network header the engine sends for t:
// 20 bytes for IPv4, 40 for IPv6.
func netHdrLenOf(t *hdr.Tuple) int {
	if t.LocalIP.Is4() {
		return netHdrLen
	}
	return hdr.IPv6Size
}

// encodeNetHeader writes the Ethernet and network headers of t's frames
// into b (the template's start) and returns their length. Lengths, IDs and
// checksums are finishNetHeader's, per frame.
func encodeNetHeader(b []byte, t *hdr.Tuple, localMAC, nextHop [6]byte, ttl, tos uint8) int {
	if !t.LocalIP.Is4() {
		n := (&hdr.EthernetFields{Dst: nextHop, Src: localMAC, Type: hdr.EtherTypeIPv6}).Encode(b)
		// IPv6 never fragments in flight (RFC 8200 §5): the path MTU
		// does what IPv4's DF bit asks for. The flow label is zero.
		n += (&hdr.IPv6Fields{TrafficClass: tos, NextHeader: hdr.ProtoTCP, HopLimit: ttl,
			Src: t.LocalIP.As16(), Dst: t.RemoteIP.As16()}).Encode(b[n:])
		return n
	}
	n := (&hdr.EthernetFields{Dst: nextHop, Src: localMAC, Type: hdr.EtherTypeIPv4}).Encode(b)
	n += (&hdr.IPv4Fields{TOS: tos, FlagsFrag: hdr.IPv4FlagDF, TTL: ttl, Proto: hdr.ProtoTCP,
		Src: t.LocalIP.As4(), Dst: t.RemoteIP.As4()}).Encode(b[n:])
	return n
}

// setNetTTLTOS changes the hop limit and traffic class of a template built
// by encodeNetHeader.
func setNetTTLTOS(tmpl []byte, ttl, tos uint8) {
	if hdr.Ethernet(tmpl).Type() == hdr.EtherTypeIPv6 {
		ip := hdr.IPv6(tmpl[hdr.EthernetSize:])
		ip.SetVersionTCFlow(tos, ip.FlowLabel())
		ip.SetHopLimit(ttl)
		return
	}
	ip := hdr.IPv4(tmpl[hdr.EthernetSize:])
	ip.SetTOS(tos)
	ip.SetTTL(ttl)
}

// finishNetHeader completes frame f, copied from a template, around its TCP
// segment tcp (header and payload, its checksum field anything): the
// network header's length, ID and checksum (IPv6 has only the payload
// length), then the TCP checksum over the pseudo-header of t's addresses.
func finishNetHeader(f []byte, t *hdr.Tuple, id uint16, tcp hdr.TCP) {
	if !t.LocalIP.Is4() {
		hdr.IPv6(f[hdr.EthernetSize:]).SetPayloadLen(uint16(len(tcp)))
		tcp.UpdateChecksumAddr(t.LocalIP, t.RemoteIP)
		return
	}
	ip := hdr.IPv4(f[hdr.EthernetSize:])
	ip.SetTotalLen(uint16(netHdrLen + len(tcp)))
	ip.SetID(id)
	ip.UpdateChecksum()
	tcp.UpdateChecksumAddr(t.LocalIP, t.RemoteIP)
}

// rxTupleIPv4 reads into *t the tuple of the connection that receives a
// segment with the IPv4 header ipHdr and TCP header tcpSeg, checking no
// more than that both headers' fixed parts are there.
func rxTupleIPv4(t *hdr.Tuple, ipHdr, tcpSeg []byte) bool {
	if len(ipHdr) < hdr.IPv4MinSize || len(tcpSeg) < hdr.TCPOffDstPort+2 {
		return false
	}
	hdr.IPv4(ipHdr).ReadRxTuple(t, hdr.TCP(tcpSeg))
	return true
}

// ipv4Segment checks the IPv4 header of a received segment and returns the
// TCP segment cut to the header's total length, or false with the drop
// counted (DropBadIP, DropFragment or DropShort; fragCounter says which
// counter a fragment goes to, as the two callers have always differed).
func (e *Engine) ipv4Segment(ipHdr, tcpSeg []byte, fragCounter *uint64) ([]byte, bool) {
	ip, err := hdr.ParseIPv4Header(ipHdr)
	if err != nil || ip.Proto() != hdr.ProtoTCP {
		e.ctr.DropBadIP++
		return nil, false
	}
	if ip.IsFragment() {
		*fragCounter++
		return nil, false
	}
	l4 := int(ip.TotalLen()) - ip.HeaderLen()
	if l4 > len(tcpSeg) || l4 < hdr.TCPMinSize {
		e.ctr.DropShort++
		return nil, false
	}
	return tcpSeg[:l4], true
}

// The IPv4 front end: the engine's entry points for callers that hold a
// raw IPv4 header (the tests, and the device's INJECT path). Each parses
// the header and goes on as the tuple entry points do.

// Input processes one received TCP segment of delegated connection idx.
// ipHdr is its IPv4 header (options included), tcpSeg the IPv4 payload: the
// TCP header and data. Link padding past the IPv4 total length is ignored.
// The segment is parsed in place and never retained; the TCP checksum is
// verified here. Every rejection is counted.
func (e *Engine) Input(idx uint32, ipHdr, tcpSeg []byte) {
	e.InputFlags(idx, ipHdr, tcpSeg, 0)
}

// InputFlags is Input for a segment the device has already checked: with
// RxTCPChecksumOK the TCP checksum is taken as verified (the device's
// receive classifier sums every unfragmented TCP segment before it looks
// the flow up, and summing it again here cost a second pass over every
// payload byte). Everything else is checked as Input checks it.
func (e *Engine) InputFlags(idx uint32, ipHdr, tcpSeg []byte, fl RxFlags) {
	e.inputIPv4(idx, ipHdr, tcpSeg, fl, 1)
}

func (e *Engine) inputIPv4(idx uint32, ipHdr, tcpSeg []byte, fl RxFlags, segs int) {
	c := e.inputConn(idx)
	if c == nil || c.state == rings.StateClosed {
		// The index's connection is gone or closing; a segment of a
		// 4-tuple in TIME_WAIT is the record's (timewait.go).
		if e.InputUnmatched(ipHdr, tcpSeg, fl) {
			return
		}
		if c == nil {
			e.ctr.DropNoConn++
			return
		}
	}
	seg, ok := e.ipv4Segment(ipHdr, tcpSeg, &e.ctr.DropFragment)
	if !ok {
		return
	}
	var t hdr.Tuple
	hdr.IPv4(ipHdr).ReadRxTuple(&t, hdr.TCP(seg))
	e.inputSegment(c, &t, seg, fl, segs)
}

// LookupSegment is Lookup on raw headers (an IPv4 header and the TCP
// segment behind it). It returns false for anything too short to carry the
// tuple.
func (e *Engine) LookupSegment(ipHdr, tcpSeg []byte) (uint32, bool) {
	var t hdr.Tuple
	if !rxTupleIPv4(&t, ipHdr, tcpSeg) {
		return 0, false
	}
	return e.table.get(&t)
}

// InputUnmatched is InputUnmatchedSegment on a raw IPv4 header.
func (e *Engine) InputUnmatched(ipHdr, tcpSeg []byte, fl RxFlags) bool {
	if e.tw.n == 0 || len(tcpSeg) < hdr.TCPMinSize {
		return false
	}
	var t hdr.Tuple
	if !rxTupleIPv4(&t, ipHdr, tcpSeg) {
		return false
	}
	i, now, ok := e.twFind(&t)
	if !ok {
		return false
	}
	seg, ok := e.ipv4Segment(ipHdr, tcpSeg, &e.ctr.DropBadIP)
	if !ok {
		return true
	}
	return e.twInput(i, now, &t, seg, fl)
}
