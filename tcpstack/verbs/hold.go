package verbs

// Early data: bytes a peer sends to an RDMA listener before the host has
// delegated its end (its MPA request, when the initiator is quicker than
// our accept) are held off netstack by the driver's legacy receive filter
// and handed to the unit behind the connection's CREATE_QP (RX_INJECT), so
// the MPA request reaches the QP, never netstack, and nothing waits for
// the peer to retransmit it.

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// listenKey names an RDMA listener: its local address and port.
type listenKey struct {
	ip   netip.Addr
	port uint16
}

// earlyFlow is what the driver holds for one RDMA connection to a
// listener until its delegation; forward means the OFFLOAD that took the
// held frames was submitted, and later ones are injected at once.
type earlyFlow struct {
	frames  [][]byte
	bytes   int
	forward bool
	idx     uint32 // the connection index, once forward
}

// holdEarlyData is the driver's legacy receive filter while RDMA listeners
// exist: it takes the TCP segments with payload addressed to an RDMA
// listener. Such bytes can only belong to a connection netstack accepted
// and the host has not delegated yet (afterwards the device steers the flow
// to its engine), and they are the peer's MPA request, which must reach the
// QP, not netstack: netstack never sees them (so RCV.NXT, and the state
// block, stop before them), and the frames are held (hold) until the
// connection's OFFLOAD and CREATE_QP, behind which they are injected.
// Interrupt goroutine: it never blocks.
func (v *Provider) holdEarlyData(frame []byte) bool {
	m := v.listenSnap.Load()
	if m == nil || len(*m) == 0 {
		return false
	}
	key, n, ok := earlySegment(frame)
	if !ok {
		return false
	}
	if _, ok := (*m)[listenKey{key.LocalIP, key.LocalPort}]; !ok {
		return false
	}
	v.hold(key, frame[:n])
	return true
}

// earlySegment reads a received frame that may be early data: an
// unfragmented IPv4 or IPv6 TCP segment with payload. It returns the
// segment's connection, the frame's length without Ethernet padding, and
// whether it is one.
func earlySegment(frame []byte) (hdr.Tuple, int, bool) {
	eth, err := hdr.ParseEthernet(frame)
	if err != nil {
		return hdr.Tuple{}, 0, false
	}
	switch eth.Type() {
	case hdr.EtherTypeIPv4:
		ip, tcp, err := hdr.ParseTCPFrame(frame)
		if err != nil || len(tcp.Payload()) == 0 {
			return hdr.Tuple{}, 0, false
		}
		return ip.RxTuple(tcp), hdr.EthernetSize + len(ip), true
	case hdr.EtherTypeIPv6:
		ip, err := hdr.ParseIPv6(eth.Payload())
		if err != nil {
			return hdr.Tuple{}, 0, false
		}
		var c hdr.IPv6Chain
		if hdr.WalkIPv6(ip, &c) != nil {
			return hdr.Tuple{}, 0, false
		}
		seg, ok := hdr.IPv6TCPSegment(ip, &c)
		if !ok {
			return hdr.Tuple{}, 0, false
		}
		tcp, err := hdr.ParseTCP(seg)
		if err != nil || len(tcp.Payload()) == 0 {
			return hdr.Tuple{}, 0, false
		}
		return ip.RxTuple(tcp), hdr.EthernetSize + len(ip), true
	}
	return hdr.Tuple{}, 0, false
}

// hold keeps a copy of an early frame of flow key for its delegation, or,
// once that was submitted, injects it at once (RX_INJECT, without waiting).
func (v *Provider) hold(key hdr.Tuple, frame []byte) {
	f := bytes.Clone(frame) // the legacy buffer goes back to the device
	v.copied(len(f))
	v.mu.Lock()
	ef := v.early[key]
	if ef == nil {
		if len(v.early) >= maxEarlyFlows {
			v.mu.Unlock()
			v.earlyDropped.Add(1)
			return
		}
		ef = &earlyFlow{}
		v.early[key] = ef
	}
	if ef.forward {
		inject := []tcpstack.HostCommand{{Cmd: rings.Command{Opcode: rings.OpRxInject, Conn: ef.idx}, Param: f}}
		if v.host.SubmitAsync(inject, nil) == nil {
			v.earlyInjected.Add(1)
			v.copied(len(f)) // into host memory, by the command path
		} else {
			v.earlyDropped.Add(1)
		}
		v.mu.Unlock()
		return
	}
	if len(ef.frames) >= maxEarlyFrames || ef.bytes+len(f) > maxEarlyBytes {
		v.mu.Unlock()
		v.earlyDropped.Add(1)
		return
	}
	ef.frames = append(ef.frames, f)
	ef.bytes += len(f)
	hook := v.onEarlyHold
	v.mu.Unlock()
	v.earlyHeld.Add(1)
	if hook != nil {
		hook(key)
	}
}

// forgetEarly drops what is held for flow key.
func (v *Provider) forgetEarly(key hdr.Tuple) {
	v.mu.Lock()
	delete(v.early, key)
	v.mu.Unlock()
}

// listenOn declares (attr) or forgets (nil) an RDMA listener on keys (its
// port on each of the host's addresses): all of them, or, when one is
// taken, none.
func (v *Provider) listenOn(keys []listenKey, attr *QPAttr) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if attr != nil {
		for _, k := range keys {
			if v.listen[k] != nil {
				return fmt.Errorf("verbs: port %d of %v already has an RDMA listener", k.port, k.ip)
			}
		}
		for _, k := range keys {
			v.listen[k] = attr
		}
	} else {
		for _, k := range keys {
			delete(v.listen, k)
			for f := range v.early {
				if f.LocalIP == k.ip && f.LocalPort == k.port {
					delete(v.early, f)
				}
			}
		}
	}
	snap := make(map[listenKey]bool, len(v.listen))
	for k := range v.listen {
		snap[k] = true
	}
	v.listenSnap.Store(&snap)
	if len(snap) > 0 {
		v.host.SetRxHold(v.holdEarlyData)
	} else {
		v.host.SetRxHold(nil)
	}
	return nil
}

// ---- protection domains and host memory ----------------------------------
