package tcpstack

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/emunic/emunic/nic/hdr"
)

// A flow the tracker missed (its SYN never seen: the table was full, or
// an entry went before its connection was accepted) is not refused
// delegation: its state is learned from the connection itself, netstack's
// endpoint, which holds every number the tracker would have snooped: the
// sequence numbers, the windows and their scales, the options in force.
// The flow is frozen first, so from then on netstack neither receives nor
// sends on it, and the endpoint's state is read under its lock, so it is of
// one moment; it is read again after the receive queue is peeked, until
// nothing moved (a segment handed to netstack just before the freeze may
// still be in its processing).
//
// Only what the handshake alone said is not in the endpoint: the MSS the
// peer announced is netstack's segment size plus the option room it keeps
// (epState.optionOverhead), capped by the MTU as always.

// errNotTracked is why freeze found no flow (wrapped with ErrNotDelegated):
// delegate then learns it.
var errNotTracked = errors.New("not tracked")

// FlowsLearned counts the connections whose flow the tracker had missed
// and whose delegation state was learned from netstack's endpoint (ready
// to install: the OFFLOAD may still be refused).
func (h *Host) FlowsLearned() uint64 { return h.Driver.flows.learnedFlows.Load() }

// learn makes flow q.key's tracker entry from netstack's endpoint ep and
// returns it frozen and quiet, with the bytes netstack holds unread: what
// freeze and drain return for a tracked flow. written is what the
// application wrote: a connection it wrote to cannot be learned (netstack
// does not say what of it is still unsent), nor one not established.
func (q *quiescer) learn(ep tcpip.Endpoint, written uint64) (flowInfo, []byte, error) {
	o, t := q.o, &q.o.drv.flows
	if written != 0 {
		return flowInfo{}, nil, fmt.Errorf("%w: flow %v not tracked, and the application wrote to it", ErrNotDelegated, q.key)
	}
	t.addLearned(q.key)
	for {
		t.freeze(q.key, true)
		st, err := readEndpointState(ep, t.stackNow())
		if err == nil && st.state != tcp.StateEstablished && st.state != tcp.StateCloseWait {
			err = fmt.Errorf("endpoint %v", st.state)
		}
		if err != nil {
			o.thaw(q.key)
			return flowInfo{}, nil, fmt.Errorf("%w: flow %v not tracked, and its endpoint: %v", ErrNotDelegated, q.key, err)
		}
		fi := t.setLearned(q.key, o.drv.learnedInfo(q.key, &st))
		if st.sndUna != st.sndNxt {
			// Data in flight: let netstack finish it (the entry now
			// follows the flow's ACKs) and look again.
			o.thaw(q.key)
			acked, _ := t.ackedChan(q.key)
			select {
			case <-acked:
				continue
			case <-q.deadline.C:
				return fi, nil, fmt.Errorf("%w: %d bytes still unacknowledged (a flow learned from netstack)", ErrNotDelegated, st.sndNxt-st.sndUna)
			}
		}
		var buf bytes.Buffer
		_, _ = ep.Read(&buf, tcpip.ReadOptions{Peek: true})
		again, err := readEndpointState(ep, t.stackNow())
		if err == nil && again.state == st.state && again.rcvNxt == st.rcvNxt && again.sndNxt == st.sndNxt &&
			again.sndUna == st.sndUna && buf.Len() == st.rcvQueued {
			t.learnedFlows.Add(1)
			return fi, buf.Bytes(), nil
		}
		// netstack moved meanwhile: wait for it to settle (frozen, it
		// only finishes what it was handed) and read it all again.
		settle := o.drv.newTimer(time.Millisecond)
		select {
		case <-q.readable:
		case <-settle.C:
		case <-q.deadline.C:
			settle.Stop()
			o.thaw(q.key)
			return fi, nil, fmt.Errorf("%w: a flow learned from netstack did not settle", ErrNotDelegated)
		}
		settle.Stop()
	}
}

// learnedInfo is flow k's tracker state as netstack's endpoint state st
// says it.
func (d *Driver) learnedInfo(k hdr.Tuple, st *epState) flowInfo {
	fi := flowInfo{
		sawOurSyn: true, sawPeerSyn: true, learned: true,
		peerMSS: uint16(min(st.maxPayload+st.optionOverhead(), 0xFFFF)),
		ourWS:   -1, peerWS: -1,
		ourSACK: st.sackOK, peerSACK: st.sackOK,
		ourTS: st.tsOK, peerTS: st.tsOK,
		sndUna: st.sndUna, sndNxt: st.sndNxt, rcvNxt: st.rcvNxt,
		peerWnd:    uint16(min(st.sndWnd>>st.sndWndScale, 0xFFFF)),
		ourWnd:     uint16(min((st.rcvAcc-st.rcvNxt)>>st.rcvWndScale, 0xFFFF)),
		ourLastTS:  st.tsVal,
		peerLastTS: st.tsRecent,
		peerFin:    st.state == tcp.StateCloseWait,
	}
	if st.sndWndScale != 0 || st.rcvWndScale != 0 {
		fi.ourWS, fi.peerWS = int8(st.rcvWndScale), int8(st.sndWndScale)
	}
	// The numbers the tracker counts bytes from: nothing sent since the
	// "SYN", and what netstack holds unread received since.
	fi.iss = st.sndNxt - 1
	fi.irs = st.rcvNxt - 1 - uint32(st.rcvQueued)
	if fi.peerFin {
		fi.irs--
	}
	copy(fi.localMAC[:], d.mac)
	if nh := d.flows.nextHop; nh != nil {
		fi.nextHopMAC, _ = nh(k.RemoteIP)
	}
	return fi
}

// addLearned makes an entry for flow k, unless it has one: from here on
// the driver sees (and, frozen, holds) its frames.
func (t *flowTracker) addLearned(k hdr.Tuple) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.flows == nil {
		t.flows = make(map[hdr.Tuple]*flowInfo)
	}
	if _, ok := t.flows[k]; !ok {
		t.flows[k] = &flowInfo{ourWS: -1, peerWS: -1}
		t.n.Add(1)
	}
}

// setLearned puts what was learned of flow k into its entry, keeping what
// the entry holds of the flow's life (frozen, held frames, waiters, the
// next-hop MAC if frames showed it), and returns the entry's state.
func (t *flowTracker) setLearned(k hdr.Tuple, fi flowInfo) flowInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flows[k]
	if !ok {
		return fi
	}
	if fi.nextHopMAC == ([6]byte{}) {
		fi.nextHopMAC = f.nextHopMAC
	}
	fi.frozen, fi.held, fi.heldBytes, fi.holdOff, fi.acked, fi.dconn = f.frozen, f.held, f.heldBytes, f.holdOff, f.acked, f.dconn
	fi.droppedIn, fi.droppedOut, fi.inSegments, fi.outSegments = f.droppedIn, f.droppedOut, f.inSegments, f.outSegments
	*f = fi
	return fi
}

// nextHopMAC is the MAC netstack's neighbour table (ARP's, or neighbour
// discovery's for IPv6) has for the next hop to remote (the flow tracker's
// nextHop, for learned flows).
func (h *Host) nextHopMAC(remote netip.Addr) ([6]byte, bool) {
	var mac [6]byte
	local, ok := h.sourceFor(remote)
	if !ok {
		return mac, false
	}
	proto := netProto(remote)
	r, terr := h.S.FindRoute(nicID, tcpipAddr(local), tcpipAddr(remote), proto, false)
	if terr != nil {
		return mac, false
	}
	hop := r.NextHop()
	r.Release()
	if hop.Len() == 0 {
		hop = tcpipAddr(remote)
	}
	ns, terr := h.S.Neighbors(nicID, proto)
	if terr != nil {
		return mac, false
	}
	for _, n := range ns {
		if n.Addr == hop && len(n.LinkAddr) == len(mac) {
			copy(mac[:], n.LinkAddr)
			return mac, true
		}
	}
	return mac, false
}
