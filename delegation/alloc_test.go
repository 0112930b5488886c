package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// quietRig is a rig whose transmit hook keeps nothing, for allocation
// counting.
func quietRig(t testing.TB, o rigOpts) *rig {
	r := newRig(t, o)
	r.env.transmit = func([]byte) error { return nil }
	return r
}

// TestAllocsReceiveInOrder: in-order segments placed into user buffers
// (with the host reposting them), ACKed every second segment.
func TestAllocsReceiveInOrder(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	o := defaultRigOpts()
	o.host.userBufs, o.host.userSize = 8, 16<<10
	r := quietRig(t, o)
	r.h.start()
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: pattern(1448, 1)})
	sq := uint32(5000)
	ts := uint32(8000)
	step := func() {
		be.PutUint32(tcp[4:], sq)
		be.PutUint32(tcp[hdr.TCPMinSize+4:], ts) // TSval (NOP NOP TS first)
		tcp[16], tcp[17] = 0, 0
		be.PutUint16(tcp[16:], hdr.TransportChecksum(hdr.ProtoTCP, ipB, ipA, tcp))
		r.e.Input(0, ip, tcp)
		r.h.drain()
		sq += 1448
		ts++
	}
	for i := 0; i < 100; i++ { // warm up
		step()
	}
	if n := testing.AllocsPerRun(2000, step); n != 0 {
		t.Fatalf("%v allocations per received segment", n)
	}
	if r.h.recvd < 2000*1448 || r.e.Counters().AcksSent < 1000 {
		t.Fatalf("received %d, acks %d", r.h.recvd, r.e.Counters().AcksSent)
	}
}

// TestAllocsReceiveOutOfOrder: every other segment arrives before its
// predecessor (out-of-order queue, SACK, hole fill).
func TestAllocsReceiveOutOfOrder(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	o := defaultRigOpts()
	o.host.userBufs, o.host.userSize = 8, 16<<10
	r := quietRig(t, o)
	r.h.start()
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: pattern(1000, 1)})
	sq := uint32(5000)
	ts := uint32(8000)
	send := func(s uint32) {
		be.PutUint32(tcp[4:], s)
		be.PutUint32(tcp[hdr.TCPMinSize+4:], ts)
		tcp[16], tcp[17] = 0, 0
		be.PutUint16(tcp[16:], hdr.TransportChecksum(hdr.ProtoTCP, ipB, ipA, tcp))
		r.e.Input(0, ip, tcp)
		r.h.drain()
		ts++
	}
	step := func() {
		send(sq + 1000)
		send(sq)
		sq += 2000
	}
	for i := 0; i < 100; i++ {
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Fatalf("%v allocations per out-of-order pair", n)
	}
	if c := r.e.Counters(); c.OOOSegments < 1000 || c.RxBytes != uint64(sq-5000) || c.OOOBytesRestored != c.RxBytes/2 {
		t.Fatalf("counters %+v", c)
	}
}

// TestAllocsSend: ACKs open the window, the engine segments the host's
// buffer by DMA and transmits.
func TestAllocsSend(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	r := quietRig(t, defaultRigOpts())
	const bufLen = 1 << 20
	buf, err := r.env.arena.Alloc(bufLen, 64)
	if err != nil {
		t.Fatal(err)
	}
	queue := func() {
		tx := rings.Tx{Addr: buf, Len: bufLen, Flags: rings.TxPush}
		if st := r.e.Send(0, &tx); st != rings.StatusOK {
			t.Fatalf("send: %v", st)
		}
	}
	queue()
	queue()
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	ack := uint32(1000)
	ts := uint32(8000)
	step := func() {
		ack += 2 * 1448
		be.PutUint32(tcp[8:], ack)
		be.PutUint32(tcp[hdr.TCPMinSize+4:], ts)
		tcp[16], tcp[17] = 0, 0
		be.PutUint16(tcp[16:], hdr.TransportChecksum(hdr.ProtoTCP, ipB, ipA, tcp))
		before := r.e.Counters().TxSegments
		r.e.Input(0, ip, tcp)
		if r.e.Counters().TxSegments == before {
			t.Fatal("no segment sent")
		}
		for r.env.ntfCount > 0 {
			n, _ := r.env.popNotify()
			if n.Flags&rings.NtfAckThreshold != 0 && r.info().TxQueued < 2 {
				queue() // the same buffer again: the stream continues
			}
		}
		ts++
	}
	for i := 0; i < 100; i++ {
		step()
	}
	if n := testing.AllocsPerRun(2000, step); n != 0 {
		t.Fatalf("%v allocations per ACK + send", n)
	}
}

// TestAllocsTimers: RTO, delayed ACK and timer heap churn.
func TestAllocsTimers(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	o := defaultRigOpts()
	o.cfg.MaxRetries = 1 << 20
	o.cfg.MaxRTO = 400e6
	r := quietRig(t, o)
	buf, _ := r.env.arena.Alloc(4096, 64)
	tx := rings.Tx{Addr: buf, Len: 4096}
	r.e.Send(0, &tx)
	step := func() {
		r.now = r.e.NextDeadline()
		r.e.Tick(r.now)
		for r.env.ntfCount > 0 {
			r.env.popNotify()
		}
	}
	for i := 0; i < 10; i++ {
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Fatalf("%v allocations per timer run", n)
	}
}
