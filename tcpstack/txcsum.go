package tcpstack

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/emunic/emunic/nic/hdr"
)

// Transmit checksum offload. A driver on a device that fills in checksums
// (TxChecksummer) tells netstack so (CapabilityTXChecksumOffload): its TCP
// and UDP endpoints then leave the transport checksum field zero, and the
// driver marks those frames TxCsum for the device to fill in. Netstack
// still computes the IPv4 header checksum (the device writes it again,
// which costs it 20 bytes of summing) and every ICMP checksum, so frames
// without the flag leave complete.
//
// One case the device cannot repair: a UDP datagram larger than the MTU,
// which netstack fragments after its UDP endpoint left the checksum to the
// device. The device never sees the whole datagram, so the driver does not
// flag the fragments (the device would refuse them); it holds them back
// until the last and fills in the checksum itself (txFragments), as Linux
// computes such a checksum in software before it fragments
// (ip_do_fragment). Without that the datagram would leave with checksum
// 0: "none" over IPv4, but dropped by an IPv6 receiver, for which the
// checksum is mandatory.

// txChecksumNeeded reports whether the Ethernet frame f is one netstack
// left its transport checksum to the device for: TCP or UDP straight
// behind an IPv4 header that is not a fragment's, or behind an IPv6 fixed
// header (netstack adds no extension header to TCP or UDP but a Fragment
// header).
func txChecksumNeeded(f []byte) bool {
	if len(f) < hdr.EthernetSize {
		return false
	}
	l3 := f[hdr.EthernetSize:]
	var proto uint8
	switch hdr.Ethernet(f).Type() {
	case hdr.EtherTypeIPv4:
		ip, err := hdr.ParseIPv4Header(l3)
		if err != nil || ip.IsFragment() {
			return false
		}
		proto = ip.Proto()
	case hdr.EtherTypeIPv6:
		ip, err := hdr.ParseIPv6Header(l3)
		if err != nil {
			return false
		}
		proto = ip.NextHeader()
	default:
		return false
	}
	return proto == hdr.ProtoTCP || proto == hdr.ProtoUDP
}

// txFragments holds back the fragments of one UDP datagram that netstack
// fragmented after leaving its checksum to the device, until the last,
// then fills in the checksum the device cannot (it never sees the whole
// datagram) and lets them go, in order: what Linux's ip_do_fragment does
// in software before it fragments. Netstack writes a datagram's fragments
// one after another from one goroutine, so one datagram at a time is
// held; a first fragment of another while one is held, or more bytes than
// a datagram has, abandons the held one (counted: its receiver could not
// have reassembled it). Frames that are no fragment of the held datagram
// pass meanwhile. Under the driver's txMu; the buffer is allocated once.
type txFragments struct {
	buf    []byte   // the held fragments, back to back
	frames [][3]int // per fragment: its start in buf, where its data starts, its end
	v6     bool
	id     uint32
	addrs  [32]byte // source and destination (IPv4: the first 8 bytes)
	next   int      // the fragment offset expected next, in bytes
	l4     int      // where the UDP header starts in the first fragment
	// busy: sendHeldFragments is posting the held fragments and may wait
	// for ring space with txMu let go; a writer meanwhile holds nothing.
	busy bool

	completed, abandoned atomic.Uint64
}

// txFragsCap bounds the bytes held: a whole 64 KiB datagram and the
// headers of its fragments.
const txFragsCap = 64<<10 + 64*128

// fragInfo is what hold needs of a fragment.
type fragInfo struct {
	v6        bool
	proto     uint8
	id        uint32
	addrs     [32]byte
	off       int  // fragment offset, bytes
	more      bool // more fragments follow
	data, end int  // where the fragment's data starts and ends in the frame
}

// parseFrag reads the fragment fields of the Ethernet frame f: an IPv4
// fragment, or an IPv6 packet whose Fragment header follows the fixed
// header (where netstack puts it).
func parseFrag(f []byte) (fragInfo, bool) {
	var fi fragInfo
	if len(f) < hdr.EthernetSize {
		return fi, false
	}
	l3 := f[hdr.EthernetSize:]
	switch hdr.Ethernet(f).Type() {
	case hdr.EtherTypeIPv4:
		ip, err := hdr.ParseIPv4(l3)
		if err != nil || !ip.IsFragment() {
			return fi, false
		}
		fi.proto, fi.id, fi.off, fi.more = ip.Proto(), uint32(ip.ID()), ip.FragOffset(), ip.MF()
		src, dst := ip.Src(), ip.Dst()
		copy(fi.addrs[:4], src[:])
		copy(fi.addrs[4:8], dst[:])
		fi.data, fi.end = hdr.EthernetSize+ip.HeaderLen(), hdr.EthernetSize+len(ip)
	case hdr.EtherTypeIPv6:
		ip, err := hdr.ParseIPv6(l3)
		if err != nil || ip.NextHeader() != hdr.ProtoIPv6Fragment || len(ip) < hdr.IPv6Size+hdr.IPv6ExtMinSize {
			return fi, false
		}
		x := ip[hdr.IPv6Size:]
		w := binary.BigEndian.Uint16(x[hdr.IPv6FragOffOffset:])
		fi.v6, fi.proto, fi.id = true, x[hdr.IPv6ExtOffNextHeader], binary.BigEndian.Uint32(x[hdr.IPv6FragOffID:])
		fi.off, fi.more = int(w&hdr.IPv6FragOffsetMask), w&hdr.IPv6FragMF != 0
		copy(fi.addrs[:], ip[hdr.IPv6OffSrc:hdr.IPv6OffDst+16])
		fi.data, fi.end = hdr.EthernetSize+hdr.IPv6Size+hdr.IPv6ExtMinSize, hdr.EthernetSize+len(ip)
	default:
		return fi, false
	}
	return fi, true
}

// hold takes the frame f when it is a fragment of a UDP datagram whose
// checksum netstack left to the device (a first fragment with a zero
// checksum, or the next fragment of the held datagram). complete: f was
// the last, and the held fragments, the checksum filled in, are in frames.
func (x *txFragments) hold(f []byte) (held, complete bool) {
	if x.busy {
		return false, false
	}
	fi, ok := parseFrag(f)
	if !ok {
		return false, false
	}
	if fi.off == 0 {
		if fi.proto != hdr.ProtoUDP || fi.end-fi.data < hdr.UDPSize || !fi.more ||
			hdr.UDP(f[fi.data:]).Checksum() != 0 {
			return false, false
		}
		if len(x.frames) > 0 {
			x.abandoned.Add(1)
		}
		if x.buf == nil {
			x.buf = make([]byte, 0, txFragsCap)
			x.frames = make([][3]int, 0, 64)
		}
		x.buf, x.frames = x.buf[:0], x.frames[:0]
		x.v6, x.id, x.addrs, x.next, x.l4 = fi.v6, fi.id, fi.addrs, 0, fi.data
	} else if len(x.frames) == 0 || fi.v6 != x.v6 || fi.id != x.id || fi.addrs != x.addrs || fi.off != x.next {
		return false, false // another datagram's, or out of order: as it is
	}
	if len(x.buf)+len(f) > cap(x.buf) || len(x.frames) == cap(x.frames) {
		x.abandoned.Add(1)
		x.buf, x.frames = x.buf[:0], x.frames[:0]
		return false, false
	}
	start := len(x.buf)
	x.buf = append(x.buf, f...)
	x.frames = append(x.frames, [3]int{start, start + fi.data, start + fi.end})
	x.next += fi.end - fi.data
	if fi.more {
		return true, false
	}
	x.fill()
	return true, true
}

// fill writes the UDP checksum of the held datagram into its first
// fragment: the pseudo-header, then every fragment's data in order (all
// but the last a multiple of 8 bytes, so the sums chain).
func (x *txFragments) fill() {
	first := x.frames[0]
	udp := hdr.UDP(x.buf[first[0]+x.l4 : first[2]])
	n := int(udp.Length())
	if n != x.next {
		return // the lengths disagree: as netstack wrote it
	}
	var acc uint64
	if x.v6 {
		acc = hdr.IPv6(x.buf[first[0]+hdr.EthernetSize:]).TransportPseudoHeaderSum(hdr.ProtoUDP, n)
	} else {
		acc = hdr.PseudoHeaderSum(hdr.ProtoUDP, hdr.IPv4Addr(x.addrs[:4]), hdr.IPv4Addr(x.addrs[4:8]), n)
	}
	for _, fr := range x.frames {
		acc = hdr.Sum(acc, x.buf[fr[1]:fr[2]])
	}
	c := ^hdr.Fold(acc)
	if c == 0 {
		c = 0xFFFF
	}
	udp.SetChecksum(c)
	x.completed.Add(1)
}

// sendHeldFragments posts the fragments txFrags held, their datagram's
// checksum filled in (txMu held); a ring that stays full loses the rest,
// counted as dropped frames.
func (d *Driver) sendHeldFragments() {
	d.txFrags.busy = true
	defer func() { d.txFrags.release(); d.txFrags.busy = false }()
	for _, fr := range d.txFrags.frames {
		e := d.tx.Next()
		if e == nil {
			if e = d.waitTxSpace(); e == nil {
				d.stats.txDropped.Add(1)
				continue
			}
		}
		off := int(d.tx.Tail()&(d.cfg.TxEntries-1)) * d.bufSize
		w := copy(d.txBufMem[off:off+d.bufSize], d.txFrags.buf[fr[0]:fr[2]])
		d.commitTx(e, off, w, 0)
	}
}

// release empties the held datagram once its fragments went to the ring.
func (x *txFragments) release() { x.buf, x.frames = x.buf[:0], x.frames[:0] }
