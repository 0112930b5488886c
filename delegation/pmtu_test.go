package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// pmtuRig is a rig with 8 KiB sent and unacknowledged (six full segments
// of 1448 bytes: MSS 1460 less the timestamp option).
func pmtuRig(t *testing.T) *rig {
	r := newRig(t, defaultRigOpts())
	r.in(pseg{seq: r.peerSeq, ack: r.info().SndUna, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	buf, _ := r.env.arena.Alloc(8192, 64)
	if st := r.e.Send(0, &rings.Tx{Addr: buf, Len: 8192}); st != rings.StatusOK {
		t.Fatal(st)
	}
	sent := r.take()
	if len(sent) != 6 || len(sent[0].payload) != 1448 {
		t.Fatalf("%d segments, first %d bytes; want 6 of 1448", len(sent), len(sent[0].payload))
	}
	return r
}

// TestPathMTUUpdate: an ICMP "fragmentation needed" quoting a sequence
// number in flight lowers the MSS and resends what is in flight in the new
// size; a stale, forged or malformed one changes nothing; a tiny one lowers
// it only to the floor; a larger one never raises it.
func TestPathMTUUpdate(t *testing.T) {
	r := pmtuRig(t)
	una, max := r.info().SndUna, r.info().SndMax
	refused := []struct {
		name        string
		quoted, mtu uint32
		want        rings.Status
	}{
		{"stale: already acknowledged", una - 1, 1000, rings.StatusBadState},
		{"forged: never sent", max, 1000, rings.StatusBadState},
		{"forged: far away", una + 1<<30, 1000, rings.StatusBadState},
		{"below IPv4's minimum", una, 67, rings.StatusBadParam},
		{"above IPv4's maximum", una, 65536, rings.StatusBadParam},
	}
	for _, c := range refused {
		if st, mss := r.e.PathMTU(0, c.quoted, c.mtu); st != c.want || mss != 1460 {
			t.Errorf("%s: %v (MSS %d), want %v (MSS 1460)", c.name, st, mss, c.want)
		}
		if p := r.info().SegPayload; p != 1448 {
			t.Fatalf("%s: segment payload %d, want 1448 unchanged", c.name, p)
		}
		r.expectNone(c.name)
	}
	if st, _ := r.e.PathMTU(9, una, 1000); st != rings.StatusBadConn {
		t.Errorf("unknown connection: %v", st)
	}

	// Valid: quoting the second segment, the path carries 1000 bytes.
	if st, mss := r.e.PathMTU(0, una+1448, 1000); st != rings.StatusOK || mss != 960 {
		t.Fatal(st, mss)
	}
	if p := r.info().SegPayload; p != 1000-40-12 {
		t.Fatalf("segment payload %d, want %d", p, 1000-40-12)
	}
	re := r.take()
	if len(re) == 0 || uint32(re[0].seq) != una {
		t.Fatalf("after the MSS dropped: %d segments, want a resend from SND.UNA %d", len(re), una)
	}
	for _, s := range re {
		if len(s.payload) > 948 {
			t.Fatalf("segment at %d of %d bytes after the path MTU dropped to 1000", s.seq, len(s.payload))
		}
	}

	// Larger: never raised. Tiny: floored at 552.
	if st, _ := r.e.PathMTU(0, una, 1400); st != rings.StatusOK || r.info().SegPayload != 948 {
		t.Fatalf("a larger MTU: %v, payload %d, want 948", st, r.info().SegPayload)
	}
	r.take()
	if st, mss := r.e.PathMTU(0, una, 68); st != rings.StatusOK || mss != PathMTUFloor-40 {
		t.Fatal(st, mss)
	}
	if p := r.info().SegPayload; p != PathMTUFloor-40-12 {
		t.Fatalf("MTU 68: segment payload %d, want the floor's %d", p, PathMTUFloor-40-12)
	}

	// Everything acknowledged: no quote is in flight any more.
	r.take()
	r.in(pseg{seq: r.peerSeq, ack: una + 8192, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if st, _ := r.e.PathMTU(0, una+8000, 600); st != rings.StatusBadState {
		t.Fatalf("a quote of acknowledged data: %v", st)
	}
}
