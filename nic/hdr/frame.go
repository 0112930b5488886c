package hdr

// A whole Ethernet/IPv4/TCP frame: the one parse the host driver, its
// receive filters and the tests' sniffers share (a legacy frame is walked
// once, not once per consumer), and the one builder every test peer and
// tool uses to put a segment on a wire.

// ParseTCPFrame checks that b is an Ethernet II frame carrying a whole,
// unfragmented IPv4 TCP segment and returns the datagram (b's IPv4 part up
// to its total length: trailing Ethernet padding is not in it) and the
// segment (header, options and payload). Checksums are not verified (the
// NIC verifies them on receive; TCP.ChecksumOK and IPv4.ChecksumOK do).
func ParseTCPFrame(b []byte) (IPv4, TCP, error) {
	eth, err := ParseEthernet(b)
	if err != nil {
		return nil, nil, err
	}
	if eth.Type() != EtherTypeIPv4 {
		return nil, nil, ErrNotTCP
	}
	ip, err := ParseIPv4(eth.Payload())
	if err != nil {
		return nil, nil, err
	}
	if ip.Proto() != ProtoTCP || ip.IsFragment() {
		return nil, nil, ErrNotTCP
	}
	tcp, err := ParseTCP(ip.Payload())
	if err != nil {
		return nil, nil, err
	}
	return ip, tcp, nil
}

// ParseTCPFrameRx is ParseTCPFrame for either family: b is an Ethernet II
// frame carrying a whole, unfragmented TCP segment over IPv4, or over IPv6
// behind any extension headers WalkIPv6 takes. It fills *k with the
// tuple of the connection that receives the segment (the destination is
// local) and returns the segment. It does not allocate: the host's flow
// tracker runs it on every frame.
func ParseTCPFrameRx(b []byte, k *Tuple) (TCP, error) {
	eth, err := ParseEthernet(b)
	if err != nil {
		return nil, err
	}
	switch eth.Type() {
	case EtherTypeIPv4:
		ip, err := ParseIPv4(eth.Payload())
		if err != nil {
			return nil, err
		}
		if ip.Proto() != ProtoTCP || ip.IsFragment() {
			return nil, ErrNotTCP
		}
		t, err := ParseTCP(ip.Payload())
		if err != nil {
			return nil, err
		}
		ip.ReadRxTuple(k, t)
		return t, nil
	case EtherTypeIPv6:
		ip, err := ParseIPv6(eth.Payload())
		if err != nil {
			return nil, err
		}
		var c IPv6Chain
		if err := WalkIPv6(ip, &c); err != nil {
			return nil, err
		}
		seg, ok := IPv6TCPSegment(ip, &c)
		if !ok {
			return nil, ErrNotTCP
		}
		t, err := ParseTCP(seg)
		if err != nil {
			return nil, err
		}
		ip.ReadRxTuple(k, t)
		return t, nil
	}
	return nil, ErrNotTCP
}

// TCPFrameFields is a whole Ethernet/IPv4/TCP frame to build. TCP's
// HeaderLen is ignored: Encode sets it from Options.
type TCPFrameFields struct {
	SrcMAC, DstMAC MAC
	Src, Dst       IPv4Addr
	ID             uint16
	TTL            uint8 // 0 is IPv4DefaultTTL
	DontFragment   bool
	TCP            TCPFields
	// Options are the TCP options (the PutTCPOpt functions write them),
	// padded with End of Option List to a multiple of 4 by Encode; at most
	// TCPMaxSize-TCPMinSize bytes.
	Options []byte
	Payload []byte
}

// Len is the length of the frame Encode writes.
func (f *TCPFrameFields) Len() int {
	return EthernetSize + IPv4MinSize + f.tcpHeaderLen() + len(f.Payload)
}

func (f *TCPFrameFields) tcpHeaderLen() int { return TCPMinSize + (len(f.Options)+3)&^3 }

// Encode writes the frame at the start of b, which must hold Len() bytes,
// with both checksums computed, and returns its length. It panics on
// options longer than a TCP header can carry: a builder's bug, not input.
func (f *TCPFrameFields) Encode(b []byte) int {
	th := f.tcpHeaderLen()
	if th > TCPMaxSize {
		panic("hdr: TCP options longer than 40 bytes")
	}
	n := f.Len()
	b = b[:n]
	eth := EthernetFields{Dst: f.DstMAC, Src: f.SrcMAC, Type: EtherTypeIPv4}
	eth.Encode(b)
	ttl := f.TTL
	if ttl == 0 {
		ttl = IPv4DefaultTTL
	}
	var ff uint16
	if f.DontFragment {
		ff = IPv4FlagDF
	}
	ipf := IPv4Fields{TotalLen: uint16(n - EthernetSize), ID: f.ID, FlagsFrag: ff, TTL: ttl, Proto: ProtoTCP, Src: f.Src, Dst: f.Dst}
	ip := IPv4(b[EthernetSize:])
	ipf.Encode(ip)
	ip.UpdateChecksum()
	tf := f.TCP
	tf.HeaderLen = th
	seg := TCP(ip[IPv4MinSize:])
	tf.Encode(seg)
	o := copy(seg[TCPMinSize:th], f.Options)
	clear(seg[TCPMinSize+o : th])
	copy(seg[th:], f.Payload)
	seg.UpdateChecksum(f.Src, f.Dst)
	return n
}

// Append appends the frame to b and returns the extended slice.
func (f *TCPFrameFields) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, f.Len())...)
	f.Encode(b[n:])
	return b
}
