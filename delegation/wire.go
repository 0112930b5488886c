package delegation

import (
	"encoding/binary"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/seqnum"
)

var be = binary.BigEndian

// The wire formats are package hdr's, shared with the device's classifier
// and the host driver; these are the engine's short names for the parts it
// uses.

// Wire sizes.
const (
	netHdrLen = hdr.IPv4MinSize // the IPv4 header the engine sends (netlayer.go): no options
	hdrsLen   = hdr.EthernetSize + netHdrLen + hdr.TCPMinSize
	// tmplLen is the header template's size: Ethernet, the larger network
	// header of the two families (IPv6's 40 bytes; an IPv4 template uses
	// the first hdrsLen bytes) and TCP.
	tmplLen  = hdr.EthernetSize + hdr.IPv6Size + hdr.TCPMinSize
	maxFrame = hdr.EthernetSize + hdr.IPv4MaxTotalLen // the largest IPv4 datagram behind an Ethernet header
)

// Option sizes as the engine sends them: NOP NOP TS(10) and NOP NOP
// SACK(2+8n), each 4-byte aligned.
const (
	tsOptLen      = 2 + hdr.TCPOptTimestampLen
	sackOptHdrLen = 2 + hdr.TCPOptSACKHdrLen
	maxSACKWithTS = (hdr.TCPMaxOptionsSize - tsOptLen - sackOptHdrLen) / hdr.TCPSACKBlockLen
	minMSS        = 64
	maxMSS        = hdr.IPv4MaxTotalLen - hdr.IPv4MinSize - hdr.TCPMinSize // 65495
)

// sackBlock is one SACK block [start, end).
type sackBlock struct{ start, end seq }

// segment is a parsed received TCP segment. It lives on the stack of Input;
// payload aliases the caller's frame.
type segment struct {
	seq     seq
	ack     seq
	flags   uint8
	wnd     uint16
	payload []byte
	hasTS   bool
	tsVal   uint32
	tsEcr   uint32
	nSACK   int
	sack    [hdr.TCPMaxSACKBlocks]sackBlock
	// segs is how many wire segments this one stands for: more than one
	// for a super-frame the device took whole (Engine.InputSegmentLRO).
	segs uint32
}

// seqLen is the sequence space the segment occupies (SYN and FIN count one).
func (s *segment) seqLen() uint32 {
	n := uint32(len(s.payload))
	if s.flags&hdr.TCPFlagSYN != 0 {
		n++
	}
	if s.flags&hdr.TCPFlagFIN != 0 {
		n++
	}
	return n
}

// parse errors, each with its own counter.
const (
	parseOK = iota
	parseShort
	parseBadOffset
	parseBadOptions
)

// parseTCP fills s from the TCP segment b (header, options, payload; its
// length is the IPv4 total length's). It never reads outside b. A known
// option of the wrong length, or one that does not fit, refuses the
// segment: a peer that sends one is broken, and guessing would be worse.
func parseTCP(b []byte, s *segment) int {
	t, err := hdr.ParseTCP(b)
	switch err {
	case nil:
	case hdr.ErrShort:
		return parseShort
	default:
		return parseBadOffset
	}
	s.seq = seq(t.Seq())
	s.ack = seq(t.Ack())
	s.flags = t.Flags()
	s.wnd = t.Window()
	s.payload = t.Payload()
	s.hasTS = false
	s.nSACK = 0
	it := t.OptionIter()
	for o, ok := it.Next(); ok; o, ok = it.Next() {
		if !o.WellFormed() {
			return parseBadOptions
		}
		switch o.Kind() {
		case hdr.TCPOptTimestamp:
			s.hasTS = true
			s.tsVal, s.tsEcr = o.TSVal(), o.TSEcr()
		case hdr.TCPOptSACK:
			for j := 0; j < o.SACKBlocks() && s.nSACK < hdr.TCPMaxSACKBlocks; j++ {
				l, r := o.SACKBlock(j)
				s.sack[s.nSACK] = sackBlock{seq(l), seq(r)}
				s.nSACK++
			}
		}
	}
	if it.Err() != nil {
		return parseBadOptions
	}
	return parseOK
}

// seq is the engine's name for a TCP sequence number, package seqnum's
// Value: the engine has hundreds of them in fields and signatures, and a
// short name keeps those readable.
type seq = seqnum.Value
