package hdr

// refChecksum is RFC 1071 the slow way: 16-bit words into a 32-bit sum,
// folded until it fits. The reference every fast path is checked against.
func refChecksum(b []byte, initial uint32) uint16 {
	sum := initial
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

var (
	macA  = MAC{0x02, 0, 0, 0, 0, 0x0a}
	macB  = MAC{0x02, 0, 0, 0, 0, 0x0b}
	addrA = IPv4Addr{10, 0, 0, 1}
	addrB = IPv4Addr{10, 0, 0, 2}
)

// tcpFrame builds Ethernet + IPv4 (ipOpts behind the fixed header) + TCP
// (tcpOpts, padded with NOPs to a multiple of 4) + payload, every checksum
// right, and returns the frame with the offsets of its IPv4 and TCP headers.
func tcpFrame(ipOpts, tcpOpts []byte, payload int, flags uint8) (f []byte, ipOff, tcpOff int) {
	ihl := IPv4MinSize + len(ipOpts)
	thl := TCPMinSize + (len(tcpOpts)+3)&^3
	f = make([]byte, EthernetSize+ihl+thl+payload)
	(&EthernetFields{Dst: macB, Src: macA, Type: EtherTypeIPv4}).Encode(f)
	ip := IPv4(f[EthernetSize:])
	(&IPv4Fields{HeaderLen: ihl, TotalLen: uint16(ihl + thl + payload), ID: 7, FlagsFrag: IPv4FlagDF,
		TTL: IPv4DefaultTTL, Proto: ProtoTCP, Src: addrA, Dst: addrB}).Encode(ip)
	copy(ip[IPv4MinSize:], ipOpts)
	ip.UpdateChecksum()
	t := TCP(ip[ihl:])
	(&TCPFields{SrcPort: 40000, DstPort: 80, Seq: 0x01020304, Ack: 0xa0b0c0d0, HeaderLen: thl,
		Flags: flags, Window: 65535}).Encode(t)
	o := t[TCPMinSize:thl]
	for i := range o {
		o[i] = TCPOptNOP
	}
	copy(o, tcpOpts)
	for i := range payload {
		t[thl+i] = byte(i * 7)
	}
	t.UpdateChecksum(addrA, addrB)
	return f, EthernetSize, EthernetSize + ihl
}

// synOptions is a Linux SYN's options: MSS, SACK permitted, timestamps,
// NOP, window scale.
func synOptions() []byte {
	o := make([]byte, 20)
	n := PutTCPOptMSS(o, 1460)
	n += PutTCPOptSACKPermitted(o[n:])
	n += PutTCPOptTimestamp(o[n:], 0x11223344, 0)
	o[n] = TCPOptNOP
	n++
	n += PutTCPOptWS(o[n:], 7)
	return o[:n]
}

// sackOptions is NOP NOP TS NOP NOP SACK with n blocks.
func sackOptions(n int) []byte {
	o := make([]byte, 12+4+8*n)
	o[0], o[1] = TCPOptNOP, TCPOptNOP
	PutTCPOptTimestamp(o[2:], 1000, 2000)
	o[12], o[13] = TCPOptNOP, TCPOptNOP
	PutTCPOptSACK(o[14:], n)
	for i := range n {
		PutTCPSACKBlock(o[14:], i, uint32(100*i+1), uint32(100*i+50))
	}
	return o
}
