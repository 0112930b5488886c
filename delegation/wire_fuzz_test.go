package delegation

import (
	"math/rand/v2"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
	"github.com/emunic/emunic/nic/hdr"
)

// wireSeg is the parsed form of a segment as parseTCP sees it, for
// round-tripping through encodeSeg.
type wireSeg struct {
	seq, ack     uint32
	flags        uint8
	wnd          uint16
	ts           bool
	tsVal, tsEcr uint32
	sack         []sackBlock
	payload      []byte
}

// encodeSeg builds the TCP segment of s with hdr's encoders: NOP NOP TS
// and NOP NOP SACK, as the engine sends them.
func encodeSeg(s wireSeg) []byte {
	opts := make([]byte, 0, hdr.TCPMaxOptionsSize)
	if s.ts {
		o := make([]byte, tsOptLen)
		o[0], o[1] = hdr.TCPOptNOP, hdr.TCPOptNOP
		hdr.PutTCPOptTimestamp(o[2:], s.tsVal, s.tsEcr)
		opts = append(opts, o...)
	}
	if len(s.sack) > 0 {
		o := make([]byte, sackOptHdrLen+len(s.sack)*hdr.TCPSACKBlockLen)
		o[0], o[1] = hdr.TCPOptNOP, hdr.TCPOptNOP
		hdr.PutTCPOptSACK(o[2:], len(s.sack))
		for i, b := range s.sack {
			hdr.PutTCPSACKBlock(o[2:], i, uint32(b.start), uint32(b.end))
		}
		opts = append(opts, o...)
	}
	hl := hdr.TCPMinSize + len(opts)
	b := make([]byte, hl+len(s.payload))
	(&hdr.TCPFields{SrcPort: portB, DstPort: portA, Seq: s.seq, Ack: s.ack, HeaderLen: hl, Flags: s.flags,
		Window: s.wnd}).Encode(b)
	copy(b[hdr.TCPMinSize:], opts)
	copy(b[hl:], s.payload)
	return b
}

func wireSegSamples() []wireSeg {
	r := rand.New(rand.NewPCG(0x5eed, 20))
	out := []wireSeg{
		{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: []byte("data")},
		{seq: 5000, flags: hdr.TCPFlagSYN},
		{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN | hdr.TCPFlagPSH, wnd: 100, ts: true, tsVal: 7, tsEcr: 9, payload: []byte("fin")},
		{seq: 5000, ack: 1400, flags: hdr.TCPFlagACK, wnd: 7, sack: []sackBlock{{1100, 1200}, {1300, 1400}}},
		{seq: 1, ack: 2, flags: hdr.TCPFlagACK, wnd: 0xFFFF, ts: true, tsVal: 1, tsEcr: 2,
			sack: []sackBlock{{10, 20}, {30, 40}, {50, 60}}},
		{seq: 5010, flags: hdr.TCPFlagRST | hdr.TCPFlagACK},
	}
	for range 4 {
		s := wireSeg{seq: r.Uint32(), ack: r.Uint32(), flags: uint8(r.Uint32()), wnd: uint16(r.Uint32()),
			ts: r.IntN(2) == 0, tsVal: r.Uint32(), tsEcr: r.Uint32(), payload: make([]byte, r.IntN(64))}
		lim := hdr.TCPMaxSACKBlocks
		if s.ts {
			lim = maxSACKWithTS
		}
		for range r.IntN(lim + 1) {
			s.sack = append(s.sack, sackBlock{seq(r.Uint32()), seq(r.Uint32())})
		}
		out = append(out, s)
	}
	return out
}

func parseTCPSeeds() [][]byte {
	var out [][]byte
	for _, s := range wireSegSamples() {
		out = append(out, encodeSeg(s))
	}
	return out
}

// checkParsed checks what parseTCP made of b: the fixed fields and the
// payload are b's, the SACK blocks fit, and no prefix of the header is
// taken.
func checkParsed(t *testing.T, b []byte, s *segment) {
	t.Helper()
	h := hdr.TCP(b)
	hl := h.HeaderLen()
	if s.seq != seq(h.Seq()) || s.ack != seq(h.Ack()) || s.flags != h.Flags() || s.wnd != h.Window() ||
		len(s.payload) != len(b)-hl || s.nSACK < 0 || s.nSACK > hdr.TCPMaxSACKBlocks {
		t.Fatalf("parsed %+v from % x", *s, b)
	}
	for n := 0; n < hl; n++ {
		var p segment
		if parseTCP(b[:n], &p) == parseOK {
			t.Fatalf("parseTCP took a %d-byte prefix of a %d-byte header", n, hl)
		}
	}
}

// FuzzParseTCP: any bytes parse without panicking or reading outside the
// segment; what parses matches the header's fields, and every truncated
// prefix of the header is refused.
func FuzzParseTCP(f *testing.F) {
	for _, b := range parseTCPSeeds() {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, hdr.TCPMinSize-1))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s segment
		if parseTCP(b, &s) != parseOK {
			return
		}
		checkParsed(t, b, &s)
	})
}

// TestParseTCPRoundTrip: parseTCP(encodeSeg(x)) gives back x.
func TestParseTCPRoundTrip(t *testing.T) {
	for i, w := range wireSegSamples() {
		b := encodeSeg(w)
		var s segment
		if got := parseTCP(b, &s); got != parseOK {
			t.Fatalf("sample %d: parseTCP = %d", i, got)
		}
		checkParsed(t, b, &s)
		if s.seq != seq(w.seq) || s.ack != seq(w.ack) || s.flags != w.flags || s.wnd != w.wnd ||
			s.hasTS != w.ts || string(s.payload) != string(w.payload) || s.nSACK != len(w.sack) {
			t.Fatalf("sample %d: parsed %+v, want %+v", i, s, w)
		}
		if w.ts && (s.tsVal != w.tsVal || s.tsEcr != w.tsEcr) {
			t.Fatalf("sample %d: timestamps %d/%d", i, s.tsVal, s.tsEcr)
		}
		for j, blk := range w.sack {
			if s.sack[j] != blk {
				t.Fatalf("sample %d: SACK block %d = %v, want %v", i, j, s.sack[j], blk)
			}
		}
	}
}

// TestWriteFuzzCorpus writes the seed corpora of FuzzParseTCP and
// FuzzInput from the encoders (with -update-corpus). FuzzInputULP's
// checked-in corpus came from fuzzing and is left alone.
func TestWriteFuzzCorpus(t *testing.T) {
	fuzzcorpus.Updating(t)
	seeds := parseTCPSeeds()
	fuzzcorpus.Write(t, "FuzzParseTCP", append(seeds, seeds[2][:hdr.TCPMinSize+tsOptLen-1]))

	r := newRig(t, defaultRigOpts())
	var in [][]byte
	for _, p := range []pseg{
		{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: []byte("data")},
		{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN | hdr.TCPFlagPSH, wnd: 100, payload: []byte("fin")},
		{seq: 5000, flags: hdr.TCPFlagRST},
		{seq: 5000, ack: 1400, flags: hdr.TCPFlagACK, wnd: 7, sack: []sackBlock{{1100, 1200}, {1300, 1400}}},
	} {
		_, tcp := r.build(p)
		in = append(in, tcp)
	}
	fuzzcorpus.Write(t, "FuzzInput", in, "bool(true)")
}
