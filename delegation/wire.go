package delegation

import (
	"encoding/binary"
	"math/bits"
)

var be = binary.BigEndian

// Wire sizes.
const (
	ethHdrLen  = 14
	ipHdrLen   = 20 // we never send IPv4 options
	tcpHdrLen  = 20
	maxOptLen  = 40
	hdrsLen    = ethHdrLen + ipHdrLen + tcpHdrLen
	maxFrame   = ethHdrLen + 65535 // the largest IPv4 datagram behind an Ethernet header
	minFrame   = 60                // the Ethernet minimum, without the FCS
	etherIPv4  = 0x0800
	ipProtoTCP = 6
	ipFlagDF   = 0x4000
)

// TCP header flags.
const (
	flFIN = 0x01
	flSYN = 0x02
	flRST = 0x04
	flPSH = 0x08
	flACK = 0x10
	flURG = 0x20
)

// TCP option kinds.
const (
	optEOL       = 0
	optNOP       = 1
	optMSS       = 2
	optWS        = 3
	optSACKPerm  = 4
	optSACK      = 5
	optTimestamp = 8
)

// Option sizes as the engine sends them: NOP NOP TS(10) and NOP NOP
// SACK(2+8n), each 4-byte aligned.
const (
	tsOptLen       = 12
	sackOptHdrLen  = 4
	sackBlockLen   = 8
	maxSACKBlocks  = 4
	maxSACKWithTS  = 3
	minMSS         = 64
	maxMSS         = 65495 // 65535 - 20 (IP) - 20 (TCP)
	maxWindowScale = 14
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
	sack    [maxSACKBlocks]sackBlock
}

// seqLen is the sequence space the segment occupies (SYN and FIN count one).
func (s *segment) seqLen() uint32 {
	n := uint32(len(s.payload))
	if s.flags&flSYN != 0 {
		n++
	}
	if s.flags&flFIN != 0 {
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

// parseTCP parses a TCP header and its options. It never reads outside b.
func parseTCP(b []byte, s *segment) int {
	if len(b) < tcpHdrLen {
		return parseShort
	}
	off := int(b[12]>>4) * 4
	if off < tcpHdrLen || off > len(b) {
		return parseBadOffset
	}
	s.seq = seq(be.Uint32(b[4:]))
	s.ack = seq(be.Uint32(b[8:]))
	s.flags = b[13]
	s.wnd = be.Uint16(b[14:])
	s.payload = b[off:]
	s.hasTS = false
	s.nSACK = 0
	opts := b[tcpHdrLen:off]
	for i := 0; i < len(opts); {
		kind := opts[i]
		if kind == optEOL {
			break
		}
		if kind == optNOP {
			i++
			continue
		}
		if i+1 >= len(opts) {
			return parseBadOptions
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return parseBadOptions
		}
		o := opts[i : i+l]
		switch kind {
		case optMSS:
			if l != 4 {
				return parseBadOptions
			}
		case optWS:
			if l != 3 {
				return parseBadOptions
			}
		case optSACKPerm:
			if l != 2 {
				return parseBadOptions
			}
		case optTimestamp:
			if l != 10 {
				return parseBadOptions
			}
			s.hasTS = true
			s.tsVal = be.Uint32(o[2:])
			s.tsEcr = be.Uint32(o[6:])
		case optSACK:
			if l < 2+sackBlockLen || (l-2)%sackBlockLen != 0 {
				return parseBadOptions
			}
			for j := 2; j+sackBlockLen <= l && s.nSACK < maxSACKBlocks; j += sackBlockLen {
				s.sack[s.nSACK] = sackBlock{seq(be.Uint32(o[j:])), seq(be.Uint32(o[j+4:]))}
				s.nSACK++
			}
		}
		i += l
	}
	return parseOK
}

// checksumAcc adds b, taken as big-endian 16-bit words starting at an even
// offset, to the one's complement accumulator acc (64 bits wide, folded at
// the end by foldChecksum).
func checksumAcc(acc uint64, b []byte) uint64 {
	var c, carry uint64
	for len(b) >= 32 {
		acc, c = bits.Add64(acc, be.Uint64(b), 0)
		carry += c
		acc, c = bits.Add64(acc, be.Uint64(b[8:]), 0)
		carry += c
		acc, c = bits.Add64(acc, be.Uint64(b[16:]), 0)
		carry += c
		acc, c = bits.Add64(acc, be.Uint64(b[24:]), 0)
		carry += c
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, c = bits.Add64(acc, be.Uint64(b), 0)
		carry += c
		b = b[8:]
	}
	if len(b) > 0 {
		// The tail, left-aligned in a zero-padded 64-bit word: the padding
		// adds nothing and the alignment keeps 16-bit word boundaries.
		var w uint64
		for i, v := range b {
			w |= uint64(v) << (56 - 8*i)
		}
		acc, c = bits.Add64(acc, w, 0)
		carry += c
	}
	acc, c = bits.Add64(acc, carry, 0)
	return acc + c
}

// foldChecksum folds a 64-bit one's complement accumulator to 16 bits.
func foldChecksum(acc uint64) uint16 {
	s := (acc >> 32) + (acc & 0xFFFFFFFF)
	s = (s >> 32) + (s & 0xFFFFFFFF)
	s = (s >> 16) + (s & 0xFFFF)
	s = (s >> 16) + (s & 0xFFFF)
	s = (s >> 16) + (s & 0xFFFF)
	return uint16(s)
}

// pseudoHeaderAcc is the accumulator of the TCP pseudo-header.
func pseudoHeaderAcc(src, dst [4]byte, tcpLen int) uint64 {
	return uint64(be.Uint32(src[:])) + uint64(be.Uint32(dst[:])) + ipProtoTCP + uint64(tcpLen)
}

// tcpChecksumOK verifies the checksum of a whole TCP segment.
func tcpChecksumOK(src, dst [4]byte, seg []byte) bool {
	return foldChecksum(checksumAcc(pseudoHeaderAcc(src, dst, len(seg)), seg)) == 0xFFFF
}

// tcpChecksum computes the checksum field for seg (whose checksum field must
// be zero).
func tcpChecksum(src, dst [4]byte, seg []byte) uint16 {
	return ^foldChecksum(checksumAcc(pseudoHeaderAcc(src, dst, len(seg)), seg))
}

// ipv4Checksum computes the header checksum of h (checksum field zero).
func ipv4Checksum(h []byte) uint16 {
	return ^foldChecksum(checksumAcc(0, h))
}
