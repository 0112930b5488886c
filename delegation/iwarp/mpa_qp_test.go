package iwarp

import (
	"bytes"
	"testing"
)

// drain returns everything the QP transmits now.
func drain(qp *QP) []byte {
	var out []byte
	buf := make([]byte, 4096)
	for {
		n := qp.Transmit(buf)
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

func TestMPARequestRejected(t *testing.T) {
	good := func() []byte {
		f := MPAFrameFields{CRC: true, Rev: 1, PrivateData: []byte("pd")}
		b := make([]byte, f.Len())
		f.Encode(b)
		return b
	}
	cases := map[string]func([]byte) []byte{
		"wrong key":      func(b []byte) []byte { b[4] = 'X'; return b },
		"reply key":      func(b []byte) []byte { copy(b, MPAKeyReply); return b },
		"revision 3":     func(b []byte) []byte { b[MPAOffRev] = 3; return b },
		"S, 2 bytes":     func(b []byte) []byte { b[MPAOffRev], b[MPAOffFlags] = 2, b[MPAOffFlags]|MPAFlagEnhanced; return b },
		"revision 0":     func(b []byte) []byte { b[MPAOffRev] = 0; return b },
		"markers":        func(b []byte) []byte { b[MPAOffFlags] |= MPAFlagMarkers; return b },
		"oversize pd":    func(b []byte) []byte { b[MPAOffPDLen], b[MPAOffPDLen+1] = 0x02, 0x01; return b },
		"maximum pd 64K": func(b []byte) []byte { b[MPAOffPDLen], b[MPAOffPDLen+1] = 0xFF, 0xFF; return b },
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			b := newHost(t, "B", hostOpts{})
			if err := b.qp.Accept([]byte("would accept")); err != nil {
				t.Fatal(err)
			}
			req := mut(good())
			for _, c := range req { // one byte at a time
				b.qp.Receive([]byte{c})
			}
			out := drain(b.qp)
			var rep MPAFrameFields
			n, err := rep.Decode(out)
			if err != nil || n != len(out) {
				t.Fatalf("reply %d %v: % x", n, err, out)
			}
			if !rep.Reply || !rep.Reject || rep.Markers || (rep.Rev != 1 && req[MPAOffRev] < 2) || (rep.Rev != 2 && req[MPAOffRev] >= 2) || len(rep.PrivateData) != 0 {
				t.Fatalf("reply %+v", rep)
			}
			if b.qp.State() != StateError || !b.hasEvent(EvRejected) || !b.qp.WantClose() {
				t.Fatalf("state %v events %v", b.qp.State(), b.evs)
			}
			// Nothing more is ever sent, whatever arrives.
			b.qp.Receive(make([]byte, 100))
			if len(drain(b.qp)) != 0 {
				t.Fatal("output after reject")
			}
		})
	}
}

func TestMPAAcceptAfterEvent(t *testing.T) {
	a := newHost(t, "A", hostOpts{initiator: true, pdata: []byte("hello")})
	b := newHost(t, "B", hostOpts{})
	l := newLink(t, a, b, 1)
	if err := a.qp.Connect(); err != nil {
		t.Fatal(err)
	}
	l.run()
	if !b.hasEvent(EvConnectRequest) || b.qp.State() != StateIdle || string(b.qp.PeerPrivateData()) != "hello" {
		t.Fatalf("responder: %v %v %q", b.evs, b.qp.State(), b.qp.PeerPrivateData())
	}
	if a.qp.State() != StateRTR {
		t.Fatalf("initiator %v", a.qp.State())
	}
	if err := b.qp.Accept([]byte("welcome")); err != nil {
		t.Fatal(err)
	}
	l.run()
	if a.qp.State() != StateRTS || string(a.qp.PeerPrivateData()) != "welcome" || !a.hasEvent(EvEstablished) {
		t.Fatalf("initiator %v %q", a.qp.State(), a.qp.PeerPrivateData())
	}
	// The responder may not send before the initiator's first FPDU.
	b.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 1})
	l.run()
	if b.qp.State() != StateRTR || len(b.poll()) != 0 {
		t.Fatal("responder sent before the first FPDU")
	}
	a.postRecv(9)
	b.postRecv(8)
	a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 2})
	l.run()
	if b.qp.State() != StateRTS {
		t.Fatal("responder not in RTS after the first FPDU")
	}
	wantCompletion(t, a.poll(), Completion{Opcode: WCSend, WRID: 2}, Completion{Opcode: WCRecv, WRID: 9})
	wantCompletion(t, b.poll(), Completion{Opcode: WCRecv, WRID: 8}, Completion{Opcode: WCSend, WRID: 1})
}

func TestMPARejectByResponder(t *testing.T) {
	a := newHost(t, "A", hostOpts{initiator: true})
	b := newHost(t, "B", hostOpts{})
	l := newLink(t, a, b, 2)
	_ = a.qp.Connect()
	l.run()
	if err := b.qp.Reject([]byte("go away")); err != nil {
		t.Fatal(err)
	}
	a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 5})
	l.run()
	if !a.hasEvent(EvRejected) || a.qp.State() != StateError || string(a.qp.PeerPrivateData()) != "go away" {
		t.Fatalf("initiator %v %v %q", a.evs, a.qp.State(), a.qp.PeerPrivateData())
	}
	if !b.hasEvent(EvRejected) || b.qp.State() != StateError {
		t.Fatal("responder")
	}
	a.qp.Poll()
	wantCompletion(t, a.poll(), Completion{Opcode: WCSend, Status: WCWRFlushErr, WRID: 5})
}

func TestMPABadReply(t *testing.T) {
	for name, mut := range map[string]func(*MPAFrameFields){
		"request key":       func(f *MPAFrameFields) { f.Reply = false },
		"markers":           func(f *MPAFrameFields) { f.Markers = true },
		"revision 3":        func(f *MPAFrameFields) { f.Rev = 3 },
		"revision 0":        func(f *MPAFrameFields) { f.Rev = 0 },
		"enhanced, no data": func(f *MPAFrameFields) { f.Rev, f.Enhanced = 2, true },
		"enhanced, 3 bytes": func(f *MPAFrameFields) { f.Rev, f.Enhanced, f.PrivateData = 2, true, []byte{0, 1, 0} },
	} {
		t.Run(name, func(t *testing.T) {
			a := newHost(t, "A", hostOpts{initiator: true})
			_ = a.qp.Connect()
			req := drain(a.qp)
			if !bytes.HasPrefix(req, []byte(MPAKeyRequest)) || req[MPAOffFlags] != MPAFlagCRC|MPAFlagEnhanced {
				t.Fatalf("request % x", req)
			}
			f := MPAFrameFields{Reply: true, CRC: true, Rev: 1}
			mut(&f)
			b := make([]byte, f.Len())
			f.Encode(b)
			a.qp.Receive(b)
			if a.qp.State() != StateError || !a.hasEvent(EvError) || a.qp.Err() == nil || !a.qp.WantClose() {
				t.Fatalf("state %v events %v err %v", a.qp.State(), a.evs, a.qp.Err())
			}
		})
	}
}

func TestDataBeforeReply(t *testing.T) {
	b := newHost(t, "B", hostOpts{})
	f := MPAFrameFields{CRC: true, Rev: 1}
	req := make([]byte, f.Len()+10)
	f.Encode(req)
	b.qp.Receive(req) // the request and 10 bytes the initiator had no right to send yet
	if b.qp.State() != StateError || !b.hasEvent(EvError) {
		t.Fatalf("state %v events %v", b.qp.State(), b.evs)
	}
}
