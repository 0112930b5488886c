package tcpstack

import (
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// IPv4 fragments of TCP segments. The offload engine never reassembles:
// the device uploads every fragment as a legacy frame (NoConn), including
// those of a delegated connection, whose netstack endpoint is gone. Handed
// to netstack, such a segment would be reassembled there and then lost
// (no endpoint; its RST kept off the wire by the frozen flow). So the
// driver reassembles TCP fragments itself, before the flow tracker and
// netstack see them, and hands the whole segment to whoever owns its flow:
// a delegated connection gets it through RX_INJECT (the device steers it
// to the connection as if it had just arrived, checksums checked), any
// other goes to netstack as one unfragmented frame.
//
// Reassembly follows RFC 791 with today's hardening: a fragment that
// overlaps one already held drops the whole datagram (as Linux does since
// CVE-2018-5391); at most fragMaxDatagrams datagrams are held, each at
// most fragTimeout (Linux's ipfrag_time), the oldest giving way to a new
// one. Every drop is counted (FragStats).

const (
	fragMaxDatagrams = 16
	fragTimeout      = 30e9 // ns
	fragMaxPayload   = 65535 - hdr.IPv4MinSize
	fragUnits        = (fragMaxPayload + 7) / 8 // 8-byte fragment units
)

// FragStats counts the TCP fragments the driver reassembled.
type FragStats struct {
	Fragments   uint64 // fragments taken
	Reassembled uint64 // datagrams completed
	Injected    uint64 // of those, handed to a delegated connection (RX_INJECT)
	Dropped     uint64 // datagrams dropped: overlap, too long, timed out, evicted, or too large to inject
}

// fragDatagram is one datagram being reassembled.
type fragDatagram struct {
	key     fragKey
	head    []byte // Ethernet and IPv4 header of the first fragment
	gotHead bool   // the first fragment came
	payload []byte // fragMaxPayload bytes
	have    [(fragUnits + 63) / 64]uint64
	total   int // payload length, -1 until the last fragment comes
	since   int64
}

type fragKey struct {
	src, dst hdr.IPv4Addr
	id       uint16
}

// fragReasm is the driver's reassembly table.
type fragReasm struct {
	mu   sync.Mutex
	dgs  []*fragDatagram
	free []*fragDatagram
	// inject, when set (by the offloader), takes a reassembled frame of
	// a delegated connection; false: not delegated.
	inject atomic.Pointer[func(frame []byte, key hdr.Tuple) bool]
	// now is the driver's clock; deliver hands netstack a whole frame.
	now     func() int64
	deliver func([]byte)

	frags, done, injected, dropped atomic.Uint64
}

// take reports whether frame is a TCP fragment, which it then keeps; a
// datagram it completes goes to the inject hook or to deliver.
func (r *fragReasm) take(frame []byte) bool {
	if len(frame) < hdr.EthernetSize+hdr.IPv4MinSize || hdr.Ethernet(frame).Type() != hdr.EtherTypeIPv4 {
		return false
	}
	ip := hdr.IPv4(frame[hdr.EthernetSize:])
	if !ip.IsFragment() || ip.Proto() != hdr.ProtoTCP || ip.HeaderLen() < hdr.IPv4MinSize ||
		int(ip.TotalLen()) > len(ip) || int(ip.TotalLen()) < ip.HeaderLen() {
		return false
	}
	r.frags.Add(1)
	r.mu.Lock()
	whole := r.add(frame, ip, r.now())
	r.mu.Unlock()
	if whole != nil {
		r.done.Add(1)
		r.hand(whole)
	}
	return true
}

// add files one fragment; it returns the whole frame when the datagram is
// complete. mu held.
func (r *fragReasm) add(frame []byte, ip hdr.IPv4, now int64) []byte {
	k := fragKey{src: ip.Src(), dst: ip.Dst(), id: ip.ID()}
	var dg *fragDatagram
	for i := 0; i < len(r.dgs); i++ {
		d := r.dgs[i]
		if now-d.since > fragTimeout {
			r.drop(i)
			i--
			continue
		}
		if d.key == k {
			dg = d
		}
	}
	if dg == nil {
		if len(r.dgs) == fragMaxDatagrams {
			r.drop(0) // the oldest
		}
		dg = r.newDatagram(k, now)
	}
	data := ip[ip.HeaderLen():ip.TotalLen()]
	off, last := ip.FragOffset(), !ip.MF()
	end := off + len(data)
	if end > fragMaxPayload || (!last && len(data)%8 != 0) || (last && dg.total >= 0) ||
		(dg.total >= 0 && end > dg.total) {
		r.dropDatagram(dg)
		return nil
	}
	for u := off / 8; u < (end+7)/8; u++ {
		if dg.have[u/64]&(1<<(u%64)) != 0 {
			r.dropDatagram(dg) // overlap
			return nil
		}
		dg.have[u/64] |= 1 << (u % 64)
	}
	copy(dg.payload[off:], data)
	if last {
		dg.total = end
	}
	if off == 0 {
		dg.head = append(dg.head[:0], frame[:hdr.EthernetSize+ip.HeaderLen()]...)
		dg.gotHead = true
	}
	if !dg.gotHead || dg.total < 0 {
		return nil
	}
	for u := 0; u < (dg.total+7)/8; u++ {
		if dg.have[u/64]&(1<<(u%64)) == 0 {
			return nil
		}
	}
	// Whole: one unfragmented frame.
	out := make([]byte, 0, len(dg.head)+dg.total)
	out = append(append(out, dg.head...), dg.payload[:dg.total]...)
	h := hdr.IPv4(out[hdr.EthernetSize:])
	h.SetTotalLen(uint16(h.HeaderLen() + dg.total))
	h.SetFlagsFrag(0)
	h.UpdateChecksum()
	r.remove(dg)
	return out
}

func (r *fragReasm) newDatagram(k fragKey, now int64) *fragDatagram {
	var dg *fragDatagram
	if n := len(r.free); n > 0 {
		dg, r.free = r.free[n-1], r.free[:n-1]
		payload, head := dg.payload, dg.head[:0]
		*dg = fragDatagram{payload: payload, head: head}
	} else {
		dg = &fragDatagram{payload: make([]byte, fragMaxPayload)}
	}
	dg.key, dg.total, dg.since = k, -1, now
	r.dgs = append(r.dgs, dg)
	return dg
}

func (r *fragReasm) drop(i int) { r.dropDatagram(r.dgs[i]) }

func (r *fragReasm) dropDatagram(dg *fragDatagram) {
	r.dropped.Add(1)
	r.remove(dg)
}

func (r *fragReasm) remove(dg *fragDatagram) {
	for i, d := range r.dgs {
		if d == dg {
			r.dgs = append(r.dgs[:i], r.dgs[i+1:]...)
			r.free = append(r.free, dg)
			return
		}
	}
}

// hand gives a reassembled frame to its delegated connection, or else to
// netstack. Its TCP checksum is checked first: the device checks the
// transport checksum of unfragmented segments only.
func (r *fragReasm) hand(frame []byte) {
	ip := hdr.IPv4(frame[hdr.EthernetSize:])
	seg := ip.Payload()
	if len(seg) < hdr.TCPMinSize || !hdr.TransportChecksumOK(hdr.ProtoTCP, ip.Src(), ip.Dst(), seg) {
		r.dropped.Add(1)
		return
	}
	key := ip.RxTuple(hdr.TCP(seg))
	if f := r.inject.Load(); f != nil && (*f)(frame, key) {
		r.injected.Add(1)
		return
	}
	r.deliver(frame)
}

// stats returns the counters.
func (r *fragReasm) stats() FragStats {
	return FragStats{Fragments: r.frags.Load(), Reassembled: r.done.Load(), Injected: r.injected.Load(), Dropped: r.dropped.Load()}
}

// injectFragment hands a reassembled segment of a delegated connection to
// the device (RX_INJECT); false if no delegated connection has key. A
// frame longer than the device's MTU cannot be injected: dropped, counted.
func (o *offloader) injectFragment(frame []byte, key hdr.Tuple) bool {
	o.mu.Lock()
	var c *DelegatedConn
	for _, x := range o.conns {
		if x.key == key {
			c = x
			break
		}
	}
	o.mu.Unlock()
	if c == nil {
		return false
	}
	if len(frame) > int(o.drv.mtu)+hdr.EthernetSize {
		o.drv.frags.dropped.Add(1)
		return true
	}
	req := cmdReq{c: rings.Command{Opcode: rings.OpRxInject, Conn: c.idx}, param: frame}
	_ = o.drv.submitAsync([]cmdReq{req}, func([]rings.Command, error) {}) // a refusal is a loss TCP repairs
	return true
}
