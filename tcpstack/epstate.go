package tcpstack

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// epState is what the host reads of a netstack TCP endpoint's protocol
// state: the sequence numbers, windows and options the flow tracker
// otherwise learns from the frames it sees. It is read where the tracker
// has nothing (a flow it missed, an ICMP quoting a connection it does not
// track).
type epState struct {
	state          tcp.EndpointState
	sndUna, sndNxt uint32
	sndWnd         uint32 // the peer's window, bytes
	sndWndScale    uint8
	maxPayload     int // payload bytes in a full segment, options taken off
	rcvNxt, rcvAcc uint32
	rcvWndScale    uint8
	sackOK, tsOK   bool
	tsRecent       uint32 // TS.Recent: the peer's last TSval
	tsVal          uint32 // the TSval netstack would send now
	srtt           int64  // ns; 0: not measured
	rcvQueued      int    // bytes received and not yet read
}

// errEndpointState is readEndpointState's error when the endpoint is not a
// netstack TCP endpoint whose state it can read (another gVisor version's
// layout, a closed endpoint).
var errEndpointState = errors.New("netstack endpoint state unreadable")

// readEndpointState reads ep's protocol state under the endpoint's lock,
// so its parts are of one moment: no segment is processed meanwhile.
//
// gVisor keeps the sender's and receiver's state (TCPSenderState,
// TCPReceiverState, exported types) behind unexported fields; they are
// read through reflection, checked for the type expected, so that a
// gVisor whose layout differs is an error here (and a test failure), never
// a misread.
// now is netstack's clock (its TSvals count from it).
func readEndpointState(ep tcpip.Endpoint, now tcpip.MonotonicTime) (epState, error) {
	e, ok := ep.(*tcp.Endpoint)
	if !ok || e == nil {
		return epState{}, fmt.Errorf("%w: %T is not a TCP endpoint", errEndpointState, ep)
	}
	// The receive queue's size takes its own locks (and LockUser):
	// read first; with nothing processed meanwhile it is the same after.
	rcq, err := e.GetSockOptInt(tcpip.ReceiveQueueSizeOption)
	if err != nil {
		return epState{}, fmt.Errorf("%w: receive queue: %v", errEndpointState, err)
	}
	e.LockUser()
	defer e.UnlockUser()
	st := epState{state: e.EndpointState(), rcvQueued: rcq}
	switch st.state {
	case tcp.StateEstablished, tcp.StateCloseWait, tcp.StateFinWait1, tcp.StateFinWait2,
		tcp.StateClosing, tcp.StateLastAck:
	default:
		return st, fmt.Errorf("%w: endpoint %v", errEndpointState, st.state)
	}
	v := reflect.ValueOf(e).Elem()
	snd, ok1 := embedded[tcp.TCPSenderState](v, "snd", "TCPSenderState")
	rcv, ok2 := embedded[tcp.TCPReceiverState](v, "rcv", "TCPReceiverState")
	if !ok1 || !ok2 {
		return st, fmt.Errorf("%w: sender or receiver not found", errEndpointState)
	}
	st.sndUna, st.sndNxt = uint32(snd.SndUna), uint32(snd.SndNxt)
	st.sndWnd, st.sndWndScale = uint32(snd.SndWnd), snd.SndWndScale
	st.maxPayload = snd.MaxPayloadSize
	st.rcvNxt, st.rcvAcc, st.rcvWndScale = uint32(rcv.RcvNxt), uint32(rcv.RcvAcc), rcv.RcvWndScale
	in := &e.TCPEndpointStateInner
	st.sackOK, st.tsOK, st.tsRecent = in.SACKPermitted, in.SendTSOk, in.RecentTS
	if st.tsOK {
		st.tsVal = in.TSOffset.TSVal(now)
	}
	// The RTT sits behind its own mutex (the sender's rtt); the SRTT
	// moves with every ACK and seeds only the engine's first RTO, so an
	// unlocked read of the one word is enough, and it is left out.
	return st, nil
}

// embedded returns a pointer to the T embedded as field inner in the struct
// the pointer field ptr of v points to, and whether it is there with that
// type.
func embedded[T any](v reflect.Value, ptr, inner string) (*T, bool) {
	p := v.FieldByName(ptr)
	if !p.IsValid() || p.Kind() != reflect.Pointer || p.IsNil() {
		return nil, false
	}
	f := p.Elem().FieldByName(inner)
	if !f.IsValid() || f.Type() != reflect.TypeFor[T]() || !f.CanAddr() {
		return nil, false
	}
	return (*T)(unsafe.Pointer(f.UnsafeAddr())), true
}

// optionOverhead is the option bytes netstack takes off its MSS for every
// segment (its maxOptionSize: the timestamp option, 12 bytes, and room for
// as many SACK blocks as fit in the 40), so that the MSS the peer
// announced is maxPayload plus it.
func (s *epState) optionOverhead() int {
	switch {
	case s.tsOK && s.sackOK:
		return 40
	case s.sackOK:
		return 36
	case s.tsOK:
		return 12
	}
	return 0
}
