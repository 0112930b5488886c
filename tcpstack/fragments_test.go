package tcpstack

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
)

// fragPort splits every second TCP data frame written to it into two IPv4
// fragments, as a router with a smaller MTU on the path would.
type fragPort struct {
	port.Port
	n int
}

func (p *fragPort) WriteFrame(f []byte) error {
	ip, tcp, err := hdr.ParseTCPFrame(f)
	if err != nil || len(tcp.Payload()) < 64 {
		return p.Port.WriteFrame(f)
	}
	if p.n++; p.n%2 == 0 {
		return p.Port.WriteFrame(f)
	}
	ihl, data := ip.HeaderLen(), ip.Payload()
	cut := (len(data) / 2) &^ 7
	for i, part := range [][]byte{data[:cut], data[cut:]} {
		fr := append(append([]byte(nil), f[:hdr.EthernetSize+ihl]...), part...)
		h := hdr.IPv4(fr[hdr.EthernetSize:])
		h.SetTotalLen(uint16(ihl + len(part)))
		ff := uint16(0)
		if i == 0 {
			ff = hdr.IPv4FlagMF
		} else {
			ff = uint16(cut / 8)
		}
		h.SetFlagsFrag(ff)
		h.UpdateChecksum()
		if err := p.Port.WriteFrame(fr); err != nil {
			return err
		}
	}
	return nil
}

// fragHosts is plainHosts with B's frames fragmented on the way to A.
func fragHosts(t *testing.T) (a, b *Host) {
	return offloadPair(t, OffloadConfig{}, nil, func(p port.Port) port.Port { return &fragPort{Port: p} })
}

// TestFragmentsOfDelegatedFlow: half of the peer's segments arrive as two
// IPv4 fragments each. The device uploads them as legacy frames; the host
// reassembles them and hands the delegated connection's segments to the
// device (RX_INJECT). Nothing is lost: the stream arrives intact, with no
// fragment dropped.
func TestFragmentsOfDelegatedFlow(t *testing.T) {
	const total = 512 << 10
	a, b := fragHosts(t)
	dc, peer := delegatedPair(t, a, b, 5104)
	want := make([]byte, total)
	pattern(want, 0)
	go peer.Write(want)
	got := make([]byte, total)
	if _, err := io.ReadFull(dc, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("stream corrupted")
	}
	s := a.Driver.FragStats()
	if s.Injected == 0 || s.Dropped != 0 || s.Reassembled < s.Injected {
		t.Fatalf("fragments %+v: want segments injected, none dropped", s)
	}
}

// TestFragmentsOfNetstackFlow: the same on a connection netstack runs:
// the reassembled segments go to netstack.
func TestFragmentsOfNetstackFlow(t *testing.T) {
	const total = 256 << 10
	a, b := fragHosts(t)
	l, err := b.Listen(5105)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			acc <- c
		}
	}()
	c, err := a.Dial(context.Background(), netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), 5105))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := waitRes(t, acc, "accept")
	defer peer.Close()
	want := make([]byte, total)
	pattern(want, 0)
	go peer.Write(want)
	got := make([]byte, total)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("stream corrupted")
	}
	if s := a.Driver.FragStats(); s.Reassembled == 0 || s.Injected != 0 || s.Dropped != 0 {
		t.Fatalf("fragments %+v", s)
	}
}

// TestFragmentReassemblyBadInput: overlapping fragments drop their
// datagram, fragments past 64 KiB are refused, and a datagram that never
// completes gives way after the timeout; each counted, nothing delivered.
func TestFragmentReassemblyBadInput(t *testing.T) {
	var r fragReasm
	now := int64(0)
	var delivered int
	r.now = func() int64 { return now }
	r.deliver = func([]byte) { delivered++ }
	frag := func(id uint16, off int, mf bool, n int) []byte {
		f := make([]byte, hdr.EthernetSize+hdr.IPv4MinSize+n)
		f[12], f[13] = 0x08, 0x00
		h := hdr.IPv4(f[hdr.EthernetSize:])
		h.SetHeaderLen(hdr.IPv4MinSize)
		h.SetTotalLen(uint16(hdr.IPv4MinSize + n))
		h.SetID(id)
		h.SetProto(hdr.ProtoTCP)
		ff := uint16(off / 8)
		if mf {
			ff |= hdr.IPv4FlagMF
		}
		h.SetFlagsFrag(ff)
		return f
	}
	if !r.take(frag(1, 0, true, 16)) || !r.take(frag(1, 8, true, 16)) { // overlap
		t.Fatal("fragments not taken")
	}
	if r.stats().Dropped != 1 {
		t.Fatalf("overlap: %+v", r.stats())
	}
	r.take(frag(2, 65528, false, 16)) // past 64 KiB
	if r.stats().Dropped != 2 {
		t.Fatalf("too long: %+v", r.stats())
	}
	r.take(frag(3, 0, true, 16))
	now += fragTimeout + 1
	r.take(frag(4, 0, true, 16)) // the next fragment finds 3 expired
	if r.stats().Dropped != 3 || len(r.dgs) != 1 {
		t.Fatalf("timeout: %+v, %d held", r.stats(), len(r.dgs))
	}
	for id := uint16(10); id < 10+fragMaxDatagrams; id++ {
		r.take(frag(id, 0, true, 16))
	}
	if r.stats().Dropped != 4 || len(r.dgs) != fragMaxDatagrams {
		t.Fatalf("eviction: %+v, %d held", r.stats(), len(r.dgs))
	}
	if delivered != 0 || r.stats().Reassembled != 0 {
		t.Fatalf("delivered %d", delivered)
	}
	// A whole frame is not a fragment: not taken.
	if r.take(frag(5, 0, false, 16)) {
		t.Fatal("took an unfragmented frame")
	}
}
