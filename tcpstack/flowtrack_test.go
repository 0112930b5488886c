package tcpstack

import (
	"encoding/binary"
	"net/netip"
	"reflect"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

var (
	hostIP = [4]byte{10, 0, 0, 1}
	peerIP = [4]byte{10, 0, 0, 2}
)

// tcpFrame builds an Ethernet/IPv4/TCP frame between the host
// (hostIP:40000, MAC :01) and the peer (peerIP:80, MAC :02) with the given
// options bytes.
func tcpFrame(outbound bool, seq, ack uint32, flags byte, wnd uint16, opts []byte, payload int) []byte {
	f := hdr.TCPFrameFields{SrcMAC: hdr.MAC{2, 0, 0, 0, 0, 1}, DstMAC: hdr.MAC{2, 0, 0, 0, 0, 2}, Src: hostIP, Dst: peerIP,
		TCP:     hdr.TCPFields{SrcPort: 40000, DstPort: 80, Seq: seq, Ack: ack, Flags: flags, Window: wnd},
		Options: opts, Payload: make([]byte, payload)}
	if !outbound {
		f.SrcMAC, f.DstMAC, f.Src, f.Dst = f.DstMAC, f.SrcMAC, f.Dst, f.Src
		f.TCP.SrcPort, f.TCP.DstPort = f.TCP.DstPort, f.TCP.SrcPort
	}
	return f.Append(nil)
}

var synOpts = []byte{
	2, 4, 0x05, 0xb4, // MSS 1460
	1, 3, 3, 7, // NOP, WS 7
	4, 2, // SACK permitted
	8, 10, 0, 0, 0, 100, 0, 0, 0, 0, // TS val 100
	1, 1, // NOP NOP
}

func tsOpt(val, ecr uint32) []byte {
	o := []byte{1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(o[4:], val)
	binary.BigEndian.PutUint32(o[8:], ecr)
	return o
}

func TestFlowTrackerLearnsHandshakeAndData(t *testing.T) {
	var tr flowTracker
	k := hdr.Tuple{LocalIP: netip.AddrFrom4(hostIP), RemoteIP: netip.AddrFrom4(peerIP), LocalPort: 40000, RemotePort: 80}
	tr.addNew(k)
	steps := []struct {
		out   bool
		frame []byte
	}{
		{true, tcpFrame(true, 1000, 0, hdr.TCPFlagSYN, 65535, synOpts, 0)},
		{false, tcpFrame(false, 5000, 1001, hdr.TCPFlagSYN|hdr.TCPFlagACK, 28960, []byte{2, 4, 0x05, 0x78, 1, 3, 3, 2, 4, 2, 8, 10, 0, 0, 0, 9, 0, 0, 0, 100}, 0)},
		{true, tcpFrame(true, 1001, 5001, hdr.TCPFlagACK, 512, tsOpt(101, 9), 0)},
		{true, tcpFrame(true, 1001, 5001, hdr.TCPFlagACK|0x08, 512, tsOpt(102, 9), 300)},
		{false, tcpFrame(false, 5001, 1301, hdr.TCPFlagACK, 229, tsOpt(10, 102), 1000)},
		{false, tcpFrame(false, 7001, 1301, hdr.TCPFlagACK, 229, tsOpt(11, 102), 500)}, // out of order: not in RCV.NXT
	}
	for i, s := range steps {
		if tr.observe(s.frame, s.out) {
			t.Fatalf("step %d dropped while not frozen", i)
		}
	}
	fi, ok := tr.snapshot(k)
	if !ok {
		t.Fatal("flow not tracked")
	}
	want := flowInfo{sawOurSyn: true, sawPeerSyn: true, ourMSS: 1460, peerMSS: 1400, ourWS: 7, peerWS: 2,
		ourSACK: true, peerSACK: true, ourTS: true, peerTS: true, irs: 5000, iss: 1000,
		sndNxt: 1301, sndUna: 1301, rcvNxt: 6001, peerWnd: 229, ourWnd: 512, ourLastTS: 102, peerLastTS: 11}
	got := fi
	if got.rtt <= 0 {
		t.Errorf("no handshake RTT measured")
	}
	got.localMAC, got.nextHopMAC, got.inSegments, got.outSegments, got.synAt, got.rtt = [6]byte{}, [6]byte{}, 0, 0, 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("learned\n%+v\nwant\n%+v", got, want)
	}
	if fi.nextHopMAC != [6]byte{2, 0, 0, 0, 0, 2} || fi.localMAC != [6]byte{2, 0, 0, 0, 0, 1} {
		t.Errorf("MACs %x %x", fi.localMAC, fi.nextHopMAC)
	}

	// Frozen: no frame of the flow gets through, either way. The peer's
	// are held while the delegation is in progress (given back on
	// thawing), dropped and counted once it is decided; ours are dropped.
	tr.freeze(k, true)
	if !tr.observe(steps[4].frame, false) || !tr.observe(steps[3].frame, true) {
		t.Fatal("frozen flow let a frame through")
	}
	if fi, _ := tr.snapshot(k); len(fi.held) != 1 || fi.droppedIn != 0 || fi.droppedOut != 1 {
		t.Errorf("held %d, drops in %d out %d", len(fi.held), fi.droppedIn, fi.droppedOut)
	}
	if fi, _ := tr.freeze(k, false); len(fi.held) != 1 || string(fi.held[0]) != string(steps[4].frame) {
		t.Fatal("thawing did not give back the held frame")
	}
	tr.freeze(k, true)
	if tr.observe(steps[4].frame, false); len(tr.takeHeld(k)) != 1 {
		t.Fatal("takeHeld did not return the held frame")
	}
	if !tr.observe(steps[4].frame, false) {
		t.Fatal("frozen flow let a frame through")
	}
	if fi, _ := tr.snapshot(k); len(fi.held) != 0 || fi.droppedIn != 1 {
		t.Errorf("after the delegation was decided: held %d, drops in %d", len(fi.held), fi.droppedIn)
	}

	// Other flows are untouched.
	other := tcpFrame(true, 1, 0, hdr.TCPFlagSYN, 100, nil, 0)
	binary.BigEndian.PutUint16(other[14+20:], 40001)
	if tr.observe(other, true) {
		t.Error("an untracked flow was dropped")
	}
}

func TestFlowTrackerListener(t *testing.T) {
	var tr flowTracker
	tr.listenOn(netip.AddrFrom4(hostIP), 40000, true)
	syn := tcpFrame(false, 5000, 0, hdr.TCPFlagSYN, 100, nil, 0)
	tr.observe(syn, false)
	k := hdr.Tuple{LocalIP: netip.AddrFrom4(hostIP), RemoteIP: netip.AddrFrom4(peerIP), LocalPort: 40000, RemotePort: 80}
	if fi, ok := tr.snapshot(k); !ok || !fi.sawPeerSyn || fi.rcvNxt != 5001 {
		t.Fatalf("SYN to a tracked listener: %+v %v", fi, ok)
	}
	// A bare ACK to the port does not create a flow.
	tr.remove(k)
	tr.observe(tcpFrame(false, 5000, 0, hdr.TCPFlagACK, 100, nil, 0), false)
	if _, ok := tr.snapshot(k); ok {
		t.Fatal("a non-SYN created a tracked flow")
	}
	tr.listenOn(netip.AddrFrom4(hostIP), 40000, false)
	tr.observe(syn, false)
	if _, ok := tr.snapshot(k); ok {
		t.Fatal("tracked after the listener closed")
	}
	if n := tr.n.Load(); n != 0 {
		t.Fatalf("tracked count %d after everything was removed", n)
	}
}

// FuzzParseTCPFrame: no input panics, and what parses lies in the frame.
func FuzzParseTCPFrame(f *testing.F) {
	f.Add(tcpFrame(true, 1, 2, hdr.TCPFlagSYN, 3, synOpts, 0))
	f.Add(tcpFrame(false, 1, 2, hdr.TCPFlagACK, 3, tsOpt(1, 2), 10))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s tcpSeg
		if parseTCPFrame(b, &s) && s.payload < 0 {
			t.Fatalf("negative payload %d", s.payload)
		}
		var tr flowTracker
		tr.listenOn(netip.AddrFrom4(hostIP), 40000, true)
		tr.observe(b, false)
		tr.observe(b, true)
	})
}

// TestFlowTrackerSYNRetransmitted: netstack's handshake timer resends the
// SYN just as the SYN-ACK arrives, and the tracker sees the resent SYN after
// the SYN-ACK. SND.UNA stays past the SYN (it went back to the ISS, and a
// DialOffload then waited for an ACK that never came), and the handshake
// gives no RTT sample (Karn: the ACK may be the first SYN's or the second's).
func TestFlowTrackerSYNRetransmitted(t *testing.T) {
	for _, synAckFirst := range []bool{true, false} {
		var tr flowTracker
		k := hdr.Tuple{LocalIP: netip.AddrFrom4(hostIP), RemoteIP: netip.AddrFrom4(peerIP), LocalPort: 40000, RemotePort: 80}
		tr.addNew(k)
		syn := tcpFrame(true, 1000, 0, hdr.TCPFlagSYN, 65535, synOpts, 0)
		synAck := tcpFrame(false, 5000, 1001, hdr.TCPFlagSYN|hdr.TCPFlagACK, 28960, []byte{2, 4, 0x05, 0x78, 4, 2}, 0)
		tr.observe(syn, true)
		if synAckFirst {
			tr.observe(synAck, false)
			tr.observe(syn, true)
		} else {
			tr.observe(syn, true)
			tr.observe(synAck, false)
		}
		fi, _ := tr.snapshot(k)
		if fi.sndUna != 1001 || fi.sndNxt != 1001 || fi.iss != 1000 || !fi.sawOurSyn || !fi.sawPeerSyn {
			t.Errorf("SYN-ACK first %v: SND.UNA %d SND.NXT %d ISS %d, want 1001 1001 1000", synAckFirst, fi.sndUna, fi.sndNxt, fi.iss)
		}
		if !synAckFirst && fi.rtt != 0 {
			t.Errorf("an RTT of %v from a retransmitted SYN's ACK", fi.rtt)
		}
	}
}

// A peer's SYN on a delegated flow (frozen, holding over) is a new
// connection's: the unit passes a SYN up only for a tuple it has let go
// (its TIME_WAIT record reopened). It goes to netstack, the old entry
// goes (counted), and the new flow is tracked for the listener; the old
// connection's late release leaves the new entry alone. Anything else of
// the flow stays dropped while the old entry lives.
func TestFlowTrackerSYNReopensDelegatedFlow(t *testing.T) {
	var tr flowTracker
	// The flow is the peer's connection to a tracked listener on our
	// port 40000 (the frames' host side).
	tr.listenOn(netip.AddrFrom4(hostIP), 40000, true)
	k := hdr.Tuple{LocalIP: netip.AddrFrom4(hostIP), RemoteIP: netip.AddrFrom4(peerIP), LocalPort: 40000, RemotePort: 80}
	tr.addNew(k)
	old := tr.entry(k)
	tr.freeze(k, true)
	tr.takeHeld(k) // delegated: frozen for good
	// Not a SYN, or a SYN-ACK or an RST with SYN: dropped as the old flow's.
	for _, f := range [][]byte{
		tcpFrame(false, 5001, 1301, hdr.TCPFlagACK, 229, tsOpt(11, 102), 10),
		tcpFrame(false, 5000, 1001, hdr.TCPFlagSYN|hdr.TCPFlagACK, 229, synOpts, 0),
		tcpFrame(false, 5000, 0, hdr.TCPFlagSYN|hdr.TCPFlagRST, 229, nil, 0),
	} {
		if !tr.observe(f, false) {
			t.Fatalf("frame %x of the delegated flow let through", f[hdr.EthernetSize+hdr.IPv4MinSize+13])
		}
	}
	// Our own SYN on it too (netstack has no business there).
	if !tr.observe(tcpFrame(true, 1000, 0, hdr.TCPFlagSYN, 65535, synOpts, 0), true) {
		t.Fatal("our SYN on the delegated flow let through")
	}
	if tr.reopened.Load() != 0 || tr.entry(k) != old {
		t.Fatal("the old entry went early")
	}
	// The peer's new SYN.
	if tr.observe(tcpFrame(false, 90000, 0, hdr.TCPFlagSYN, 65535, synOpts, 0), false) {
		t.Fatal("the new connection's SYN dropped")
	}
	cur := tr.entry(k)
	if cur == nil || cur == old || !cur.sawPeerSyn || cur.irs != 90000 || cur.frozen || tr.reopened.Load() != 1 {
		t.Fatalf("entry %+v, reopened %d", cur, tr.reopened.Load())
	}
	if n := tr.n.Load(); n != 2 { // the listener and the new flow
		t.Fatalf("tracker count %d", n)
	}
	// The old connection's release comes late: the new flow stays.
	tr.removeEntry(k, old)
	if tr.entry(k) != cur {
		t.Fatal("the old connection's release removed the new flow")
	}
}
