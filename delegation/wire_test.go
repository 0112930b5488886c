package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

// TestParseTCPSACKBlocks: the blocks of several SACK options add up (two
// of two blocks fill 36 of the 40 option bytes), behind NOPs.
func TestParseTCPSACKBlocks(t *testing.T) {
	opts := make([]byte, 40)
	for i := range opts {
		opts[i] = hdr.TCPOptNOP
	}
	n := 4 // NOP NOP NOP NOP first
	for k := range 2 {
		o := opts[n:]
		n += hdr.PutTCPOptSACK(o, 2)
		for i := range 2 {
			hdr.PutTCPSACKBlock(o, i, uint32(100*k+10*i), uint32(100*k+10*i+5))
		}
	}
	seg := make([]byte, hdr.TCPMinSize+40+3)
	(&hdr.TCPFields{HeaderLen: hdr.TCPMinSize + 40, Flags: hdr.TCPFlagACK, Seq: 1, Ack: 2, Window: 3}).Encode(seg)
	copy(seg[hdr.TCPMinSize:], opts)
	var s segment
	if got := parseTCP(seg, &s); got != parseOK {
		t.Fatalf("parseTCP: %d", got)
	}
	want := [hdr.TCPMaxSACKBlocks]sackBlock{{0, 5}, {10, 15}, {100, 105}, {110, 115}}
	if s.nSACK != hdr.TCPMaxSACKBlocks || s.sack != want || s.hasTS ||
		s.seq != 1 || s.ack != 2 || s.wnd != 3 || len(s.payload) != 3 {
		t.Fatalf("parsed %+v", s)
	}
}

// TestInputDeviceChecksum: a segment with a wrong TCP checksum is dropped
// by Input, and taken by InputFlags with RxTCPChecksumOK (the device
// vouched for it: the engine does not sum it again).
func TestInputDeviceChecksum(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.h.start()
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: []byte("hello")})
	hdr.TCP(tcp).SetChecksum(hdr.TCP(tcp).Checksum() ^ 0x0100)
	r.e.Input(0, ip, tcp)
	if c := r.e.Counters(); c.DropBadChecksum != 1 || c.RxSegments != 0 {
		t.Fatalf("Input: %+v", c)
	}
	r.e.InputFlags(0, ip, tcp, RxTCPChecksumOK)
	if c := r.e.Counters(); c.DropBadChecksum != 1 || c.RxSegments != 1 {
		t.Fatalf("InputFlags: %+v", c)
	}
}

// patchTCP32 rewrites the 32-bit field at off of a TCP segment and updates
// its checksum incrementally (RFC 1624 eqn. 3), so a benchmark can send a
// stream of segments without summing each one.
func patchTCP32(tcp []byte, off int, v uint32) {
	old := be.Uint32(tcp[off:])
	be.PutUint32(tcp[off:], v)
	acc := uint64(^hdr.TCP(tcp).Checksum()) + uint64(^uint16(old>>16)) + uint64(^uint16(old)) +
		uint64(v>>16) + uint64(v&0xFFFF)
	hdr.TCP(tcp).SetChecksum(^hdr.Fold(acc))
}

// BenchmarkInput: one in-order 1448-byte segment placed in a user buffer,
// per op, as the device delivers it: "verify" sums the segment in the
// engine (Input), "device-verified" takes the classifier's word for it
// (InputFlags with RxTCPChecksumOK).
func BenchmarkInput(b *testing.B) {
	for _, v := range []struct {
		name string
		fl   RxFlags
	}{{"verify", 0}, {"device-verified", RxTCPChecksumOK}} {
		b.Run(v.name, func(b *testing.B) {
			o := defaultRigOpts()
			o.host.userBufs, o.host.userSize = 8, 16<<10
			r := quietRig(b, o)
			r.h.start()
			ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: pattern(1448, 1)})
			sq, ts := uint32(5000), uint32(8000)
			b.SetBytes(1448)
			b.ReportAllocs()
			for b.Loop() {
				patchTCP32(tcp, hdr.TCPOffSeq, sq)
				patchTCP32(tcp, hdr.TCPMinSize+4, ts) // TSval (NOP NOP TS first)
				r.e.InputFlags(0, ip, tcp, v.fl)
				r.h.drain()
				sq += 1448
				ts++
			}
			if c := r.e.Counters(); c.DropBadChecksum != 0 || c.RxSegments == 0 {
				b.Fatalf("%+v", c)
			}
		})
	}
}

func BenchmarkChecksum1500(b *testing.B) {
	buf := make([]byte, 1500)
	for i := range buf {
		buf[i] = byte(i)
	}
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		hdr.Sum(0, buf)
	}
}
