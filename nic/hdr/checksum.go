package hdr

import (
	"encoding/binary"
	"math/bits"
)

var (
	be = binary.BigEndian
	le = binary.LittleEndian
)

// The Internet checksum (RFC 1071) is the one's complement of the one's
// complement sum of 16-bit big-endian words. A one's complement sum does not
// care where a word sits as long as it sits on a 16-bit boundary (2^16 ≡ 1
// mod 2^16-1), so Sum adds 64-bit words into a 64-bit accumulator and
// counts the carries out of it (2^64 ≡ 1 too); Fold brings the total down
// to 16 bits once, at the end. Partial sums (the pseudo-header, a header, a
// payload) add up in the accumulator in any order.

// Sum adds b, taken as big-endian 16-bit words starting at an even offset,
// to the one's complement accumulator acc and returns the new accumulator.
// Chaining Sum over consecutive pieces of one buffer is correct only if
// every piece but the last has an even length.
func Sum(acc uint64, b []byte) uint64 {
	// The words are loaded little-endian, which is a plain load on the
	// machines this runs on (no byte swap per word). A little-endian load
	// of a word is its big-endian value times 2^-8 modulo 2^16-1 (RFC 1071
	// 2(B), byte order independence), and rotating a 64-bit word by 8 bits
	// multiplies it by 2^8 modulo 2^64-1, which 2^16-1 divides. So: rotate
	// the accumulator into the little-endian domain, add, rotate back.
	// Measured against the engine's former big-endian loop: the same at 20
	// bytes, 15-20% faster from 1 KB (BenchmarkChecksum).
	acc = bits.RotateLeft64(acc, -8)
	// Four independent adds per 32 bytes, the carries counted apart, so no
	// add waits for the previous one's carry flag (an ADC chain measured
	// slower); the fixed-size window lets the compiler drop bounds checks.
	var c, carry uint64
	for len(b) >= 32 {
		w := b[:32]
		acc, c = bits.Add64(acc, le.Uint64(w[0:8]), 0)
		carry += c
		acc, c = bits.Add64(acc, le.Uint64(w[8:16]), 0)
		carry += c
		acc, c = bits.Add64(acc, le.Uint64(w[16:24]), 0)
		carry += c
		acc, c = bits.Add64(acc, le.Uint64(w[24:32]), 0)
		carry += c
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, c = bits.Add64(acc, le.Uint64(b), 0)
		carry += c
		b = b[8:]
	}
	if len(b) > 0 {
		// The tail, byte i at bits 8i of a zero-padded word: the padding
		// adds nothing and the positions keep 16-bit word boundaries (an
		// odd last byte is the high byte of its word, RFC 1071 4.1). Four,
		// two and one byte loads, not a byte loop: a 20-byte IPv4 header
		// ends in a 4-byte tail.
		var t uint64
		s := 0
		if len(b) >= 4 {
			t = uint64(le.Uint32(b))
			s = 32
			b = b[4:]
		}
		if len(b) >= 2 {
			t |= uint64(le.Uint16(b)) << s
			s += 16
			b = b[2:]
		}
		if len(b) > 0 {
			t |= uint64(b[0]) << s
		}
		acc, c = bits.Add64(acc, t, 0)
		carry += c
	}
	acc, c = bits.Add64(acc, carry, 0)
	return bits.RotateLeft64(acc+c, 8) // acc+c cannot overflow: c is 1 only if acc < carry
}

// Fold folds a one's complement accumulator to its 16-bit sum. A buffer
// that carries a correct checksum folds to 0xFFFF.
func Fold(acc uint64) uint16 {
	s := (acc >> 32) + (acc & 0xFFFFFFFF)
	s = (s >> 32) + (s & 0xFFFFFFFF)
	s = (s >> 16) + (s & 0xFFFF)
	s = (s >> 16) + (s & 0xFFFF)
	s = (s >> 16) + (s & 0xFFFF)
	return uint16(s)
}

// Checksum is the 16-bit one's complement sum of b, starting from initial
// (not complemented: the value for a checksum field is ^Checksum(...)
// computed with the field zero, and a buffer with a correct checksum field
// sums to 0xFFFF).
func Checksum(b []byte, initial uint16) uint16 {
	return Fold(Sum(uint64(initial), b))
}

// PseudoHeaderSum is the accumulator of the IPv4 pseudo-header (RFC 9293
// 3.1, RFC 768): source, destination, zero, protocol, and the transport
// length (header and payload). Add the transport segment with Sum.
func PseudoHeaderSum(proto uint8, src, dst IPv4Addr, l4Len int) uint64 {
	return uint64(be.Uint32(src[:])) + uint64(be.Uint32(dst[:])) + uint64(proto) + uint64(l4Len)
}

// TransportChecksum is the checksum field value for the TCP or UDP segment
// seg (whole: header and payload) between src and dst, computed with seg's
// checksum field zero. For UDP a result of zero goes on the wire as 0xFFFF
// (RFC 768: zero means "no checksum"); UDP.UpdateChecksum does that.
func TransportChecksum(proto uint8, src, dst IPv4Addr, seg []byte) uint16 {
	return ^Fold(Sum(PseudoHeaderSum(proto, src, dst, len(seg)), seg))
}

// TransportChecksumOK reports whether the TCP or UDP segment seg carries
// the right checksum for src and dst.
func TransportChecksumOK(proto uint8, src, dst IPv4Addr, seg []byte) bool {
	return Fold(Sum(PseudoHeaderSum(proto, src, dst, len(seg)), seg)) == 0xFFFF
}
