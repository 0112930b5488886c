package main

// Reading the demo's captures for TestDemoReportCrossCheck: a classic pcap
// parser (the format port.Recorder writes) and what the test needs to know
// of each frame, decoded here from the bytes on the wire, not from any
// counter of the hosts.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"sort"
	"testing"
	"time"
)

var (
	macA = [6]byte{2, 0, 0, 0, 0, 1}
	macB = [6]byte{2, 0, 0, 0, 0, 2}
)

// capFrame is one captured frame.
type capFrame struct {
	ts   time.Time
	data []byte
	src  [6]byte

	tcp              bool
	ipID             uint16
	df               bool // IPv4 Don't Fragment
	sport, dport     uint16
	seq, ack         uint32
	flags            uint8
	win              uint16
	payload          []byte
	engine           bool // sent by a delegated TCP engine (see classifyEngine)
	retrans          bool // re-sends sequence space already sent (see markRetrans)
	rxIdx, matchedTx int  // position among the frames received; the sender's frame it is (-1: none)
}

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
)

// seqLen is the sequence space the segment occupies.
func (f *capFrame) seqLen() uint32 {
	n := uint32(len(f.payload))
	if f.flags&tcpSYN != 0 {
		n++
	}
	if f.flags&tcpFIN != 0 {
		n++
	}
	return n
}

// readPcap reads a classic pcap file of Ethernet frames (either byte order,
// micro- or nanosecond timestamps).
func readPcap(path string) ([]*capFrame, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 24 {
		return nil, fmt.Errorf("%s: %d bytes, no pcap header", path, len(b))
	}
	var bo binary.ByteOrder
	var nanos bool
	switch m := binary.LittleEndian.Uint32(b); m {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo, nanos = binary.LittleEndian, m == 0xa1b23c4d
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo, nanos = binary.BigEndian, m == 0x4d3cb2a1
	default:
		return nil, fmt.Errorf("%s: magic %#x is not pcap", path, m)
	}
	if lt := bo.Uint32(b[20:]); lt != 1 {
		return nil, fmt.Errorf("%s: link type %d, want Ethernet", path, lt)
	}
	var out []*capFrame
	for off := 24; off < len(b); {
		if len(b)-off < 16 {
			return nil, fmt.Errorf("%s: truncated record header at %d", path, off)
		}
		sec, frac := bo.Uint32(b[off:]), bo.Uint32(b[off+4:])
		incl, orig := int(bo.Uint32(b[off+8:])), int(bo.Uint32(b[off+12:]))
		off += 16
		if incl != orig || len(b)-off < incl {
			return nil, fmt.Errorf("%s: record at %d: %d of %d bytes captured", path, off, incl, orig)
		}
		ns := int64(frac)
		if !nanos {
			ns *= 1000
		}
		f := &capFrame{ts: time.Unix(int64(sec), ns), data: b[off : off+incl], rxIdx: -1, matchedTx: -1}
		f.parse()
		out = append(out, f)
		off += incl
	}
	return out, nil
}

// parse decodes the Ethernet, IPv4 and TCP headers it needs.
func (f *capFrame) parse() {
	d := f.data
	if len(d) < 14 {
		return
	}
	copy(f.src[:], d[6:12])
	if binary.BigEndian.Uint16(d[12:]) != 0x0800 || len(d) < 14+20 {
		return
	}
	ip := d[14:]
	ihl, tot := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
	if ip[9] != 6 || tot > len(ip) || ihl+20 > tot {
		return
	}
	tcp := ip[ihl:tot]
	doff := int(tcp[12]>>4) * 4
	if doff < 20 || doff > len(tcp) {
		return
	}
	f.tcp = true
	f.ipID, f.df = binary.BigEndian.Uint16(ip[4:]), ip[6]&0x40 != 0
	f.sport, f.dport = binary.BigEndian.Uint16(tcp[0:]), binary.BigEndian.Uint16(tcp[2:])
	f.seq, f.ack = binary.BigEndian.Uint32(tcp[4:]), binary.BigEndian.Uint32(tcp[8:])
	f.flags, f.win = tcp[13], binary.BigEndian.Uint16(tcp[14:])
	f.payload = tcp[doff:]
}

// sentBy returns the frames of c that host mac sent, in order.
func sentBy(c []*capFrame, mac [6]byte) []*capFrame {
	var out []*capFrame
	for _, f := range c {
		if f.src == mac {
			out = append(out, f)
		}
	}
	return out
}

// receivedBy returns the frames of c (host mac's capture) that it received.
func receivedBy(c []*capFrame, mac [6]byte) []*capFrame {
	var out []*capFrame
	for _, f := range c {
		if f.src != mac {
			f.rxIdx = len(out)
			out = append(out, f)
		}
	}
	return out
}

// classifyEngine marks the frames one host sent that its delegated TCP
// engine built. The engine sets DF and numbers its segments from 1 on each
// connection (its frame with ID 0 is the one after its frame with ID
// 65535); netstack sends a connection's packets with DF and IP ID 0, and
// its resets for segments of no connection without DF (with an ID of its
// own). (netstack can send on a 4-tuple again once the engine is done
// with it: a RST to a segment that came after the connection was
// released.)
func classifyEngine(sent []*capFrame) {
	lastID := map[[2]uint16]uint16{}
	for _, f := range sent {
		if !f.tcp {
			continue
		}
		k := [2]uint16{f.sport, f.dport}
		last, seen := lastID[k]
		f.engine = f.df && (f.ipID != 0 || seen && last == 0xFFFF)
		if f.engine {
			lastID[k] = f.ipID
		}
	}
}

// markRetrans marks, in the frames one host sent, each segment that carries
// sequence space (data or FIN) starting below the highest sequence number
// already sent on its flow: a retransmission, whoever sent it. A SYN sent
// again is not marked: netstack does not count its handshake's
// retransmissions (and the engines never send a SYN).
func markRetrans(sent []*capFrame) {
	high := map[[2]uint16]uint32{}
	for _, f := range sent {
		n := f.seqLen()
		if !f.tcp || n == 0 || f.flags&tcpRST != 0 {
			continue
		}
		k := [2]uint16{f.sport, f.dport}
		h, ok := high[k]
		if ok && int32(f.seq-h) < 0 && f.flags&tcpSYN == 0 {
			f.retrans = true
		}
		if end := f.seq + n; !ok || int32(end-h) > 0 {
			high[k] = end
		}
	}
}

// inWindow returns the frames with a timestamp in (from, to].
func inWindow(c []*capFrame, from, to time.Time) []*capFrame {
	var out []*capFrame
	for _, f := range c {
		if f.ts.After(from) && !f.ts.After(to) {
			out = append(out, f)
		}
	}
	return out
}

// stream reassembles the bytes one direction of a TCP connection carried,
// from the sender's frames: each byte once, from the SYN's ISN + 1 to the
// FIN (or the highest byte sent). It reports an error for a hole.
func stream(sent []*capFrame, sport, dport uint16) ([]byte, error) {
	ps, haveSYN := segments(sent, sport, dport)
	if !haveSYN {
		return nil, fmt.Errorf("no SYN from port %d to %d", sport, dport)
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].off < ps[j].off })
	var out []byte
	for _, p := range ps {
		switch {
		case p.off > int64(len(out)):
			return out, fmt.Errorf("hole at stream offset %d (next segment at %d)", len(out), p.off)
		case p.off+int64(len(p.f.payload)) > int64(len(out)):
			out = append(out, p.f.payload[int64(len(out))-p.off:]...)
		}
	}
	return out, nil
}

// firstSentAt returns when the sender first sent stream offset off of the
// connection (sport to dport): the timestamp of the first frame that
// carried that byte.
func firstSentAt(sent []*capFrame, sport, dport uint16, off int64) (time.Time, bool) {
	ps, _ := segments(sent, sport, dport)
	for _, p := range ps {
		if p.off <= off && off < p.off+int64(len(p.f.payload)) {
			return p.f.ts, true
		}
	}
	return time.Time{}, false
}

// segment is a frame that carried stream data, at its stream offset.
type segment struct {
	off int64 // from the SYN's ISN + 1
	f   *capFrame
}

// segments returns, in the order sent, the frames of one direction of a
// TCP connection (sport to dport) that carried data after its SYN, and
// whether there was a SYN.
func segments(sent []*capFrame, sport, dport uint16) (ps []segment, haveSYN bool) {
	var isn uint32
	for _, f := range sent {
		if !f.tcp || f.sport != sport || f.dport != dport {
			continue
		}
		if f.flags&tcpSYN != 0 {
			isn, haveSYN = f.seq, true
			continue
		}
		if haveSYN && len(f.payload) > 0 {
			ps = append(ps, segment{int64(f.seq - isn - 1), f})
		}
	}
	return ps, haveSYN
}

// wireMatch pairs the frames one port sent with the frames the other port
// received, by their bytes, and counts what the wire did in between: frames
// that never arrived, frames that arrived after a frame sent later
// (overtaken), frames that arrived twice, and frames that arrived changed.
type wireMatch struct {
	lost, overtaken, late, duplicated, corrupted int
	// twins counts frames received right behind a frame with the same
	// bytes that was sent right before them: if the first was held and
	// its twin overtook it, the captures cannot tell (the match puts
	// them in order), so each is a reordering the captures may hide.
	twins int
}

// matchWire matches sent (in order) against received (in order). A frame
// the reordering impairment held is overtaken by the next frame sent,
// unless none came within the hold's limit and the timer released it: it
// then arrives holdMax after it was sent, overtaken by nothing (late).
//
// Frames with the same bytes (netstack's duplicate ACKs, a handshake
// segment sent again) are told apart by order and time: an arrival in
// order is the first such frame sent less than holdMax before it (else the
// last one sent before it: the earlier ones were lost), and only a frame
// with other bytes overtakes one, so that twins are not taken for
// reordering. Which of two twins sent back to back was held is beyond
// the captures: such pairs are counted (twins), a bound.
func matchWire(sent, received []*capFrame, holdMax time.Duration) wireMatch {
	var m wireMatch
	byBytes := map[string][]int{}
	for i, f := range sent {
		byBytes[string(f.data)] = append(byBytes[string(f.data)], i)
	}
	matched := make([]bool, len(sent))
	seen := map[string]bool{}
	// The latest frame matched, and the latest with other bytes than it.
	maxIdx, maxOther := -1, -1
	var maxKey string
	prevIdx, prevKey := -2, ""
	for _, r := range received {
		k := string(r.data)
		q := byBytes[k]
		if len(q) == 0 {
			if seen[k] {
				m.duplicated++
			} else {
				m.corrupted++
			}
			continue
		}
		ahead := maxIdx // the latest frame with other bytes that arrived
		if k == maxKey {
			ahead = maxOther
		}
		j := -1
		for c := sort.SearchInts(q, ahead+1); c < len(q) && !sent[q[c]].ts.After(r.ts); c++ {
			j = c
			if r.ts.Sub(sent[q[c]].ts) < holdMax {
				break
			}
		}
		if j < 0 {
			j = 0
		}
		i := q[j]
		byBytes[k] = append(q[:j:j], q[j+1:]...)
		seen[k] = true
		matched[i] = true
		r.matchedTx = i
		if i == prevIdx+1 && k == prevKey {
			m.twins++
		}
		prevIdx, prevKey = i, k
		switch {
		case i < ahead:
			m.overtaken++
		case r.ts.Sub(sent[i].ts) >= holdMax-200*time.Microsecond &&
			(i+1 == len(sent) || sent[i+1].ts.Sub(sent[i].ts) >= holdMax-500*time.Microsecond):
			// Held, and released by the timer: nothing was sent
			// behind it for holdMax. (A frame that merely waited at
			// a slow receiver had others sent right behind it.)
			m.late++
		}
		switch {
		case i > maxIdx:
			if k != maxKey {
				maxOther = maxIdx
			}
			maxIdx, maxKey = i, k
		case k != maxKey && i > maxOther:
			maxOther = i
		}
	}
	for _, ok := range matched {
		if !ok {
			m.lost++
		}
	}
	return m
}

// mpaStream is what one direction of an RDMA connection carried, decoded
// from its bytes: MPA frames (revision 1, CRC, no markers) of DDP/RDMAP
// messages.
type mpaStream struct {
	fpdus, crcErrors        int
	tagged                  map[uint32]int // payload bytes of RDMA Writes, by STag
	sendPayload             int            // payload bytes of the Sends (opcodes 3-6)
	readResponsePayload     int
	lastSegments            int // DDP segments with the L (last) bit: whole messages
	readRequests, writeMsgs int
	readResponses           int
	writes                  []mpaWrite
}

type mpaWrite struct {
	stag uint32
	to   uint64
	data []byte
	off  int64 // stream offset of the FPDU
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// parseMPA decodes b, the bytes of one direction, starting with its MPA
// request or reply frame.
func parseMPA(b []byte) (*mpaStream, error) {
	s := &mpaStream{tagged: map[uint32]int{}}
	if len(b) < 20 || !(bytes.HasPrefix(b, []byte("MPA ID Req Frame")) || bytes.HasPrefix(b, []byte("MPA ID Rep Frame"))) {
		return nil, fmt.Errorf("stream does not start with an MPA request or reply")
	}
	off := 20 + int(binary.BigEndian.Uint16(b[18:]))
	for off < len(b) {
		if len(b)-off < 2 {
			return s, fmt.Errorf("a truncated FPDU at %d", off)
		}
		ulpdu := int(binary.BigEndian.Uint16(b[off:]))
		total := (2 + ulpdu + 3) &^ 3
		if len(b)-off < total+4 {
			return s, fmt.Errorf("FPDU at %d: %d bytes, %d left", off, total+4, len(b)-off)
		}
		fpdu := b[off : off+total+4]
		if crc32.Checksum(fpdu[:total], castagnoli) != binary.LittleEndian.Uint32(fpdu[total:]) {
			s.crcErrors++
		}
		s.fpdus++
		d := fpdu[2 : 2+ulpdu]
		ctl, op := d[0], d[1]&0x0f
		if ctl&0x40 != 0 {
			s.lastSegments++
		}
		if ctl&0x80 != 0 { // tagged: STag, TO, payload
			stag, to, pay := binary.BigEndian.Uint32(d[2:]), binary.BigEndian.Uint64(d[6:]), d[14:]
			switch op {
			case 0:
				s.tagged[stag] += len(pay)
				s.writes = append(s.writes, mpaWrite{stag, to, pay, int64(off)})
				if ctl&0x40 != 0 {
					s.writeMsgs++
				}
			case 2:
				s.readResponsePayload += len(pay)
				if ctl&0x40 != 0 {
					s.readResponses++
				}
			}
		} else {
			switch {
			case op >= 3 && op <= 6:
				s.sendPayload += len(d) - 18
			case op == 1:
				s.readRequests++
			}
		}
		off += total + 4
	}
	return s, nil
}

// TestMatchWire: what the wire's captures can and cannot show of its
// reordering. A frame overtaken by one with other bytes is seen; one
// overtaken only by its twin (same bytes, sent right behind it) is not,
// and the pair is counted as a bound; a frame released by the hold's timer
// arrives late.
func TestMatchWire(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	f := func(b string, us int) *capFrame { return &capFrame{data: []byte(b), ts: at(us)} }
	const hold = 10 * time.Millisecond
	for _, c := range []struct {
		name       string
		sent, recv []*capFrame
		want       wireMatch
	}{
		{"in order", []*capFrame{f("a", 0), f("b", 10)}, []*capFrame{f("a", 5), f("b", 15)}, wireMatch{}},
		{"overtaken", []*capFrame{f("a", 0), f("b", 10)}, []*capFrame{f("b", 15), f("a", 16)}, wireMatch{overtaken: 1}},
		// The first "d" held, the second overtook it: the captures show
		// two "d"s in order.
		{"twin", []*capFrame{f("a", 0), f("d", 10), f("d", 20), f("b", 30)},
			[]*capFrame{f("a", 5), f("d", 25), f("d", 26), f("b", 35)}, wireMatch{twins: 1}},
		{"late", []*capFrame{f("a", 0), f("b", 20000)}, []*capFrame{f("a", 10000), f("b", 20005)}, wireMatch{late: 1}},
		{"lost and corrupted", []*capFrame{f("a", 0), f("b", 10)}, []*capFrame{f("x", 15)}, wireMatch{lost: 2, corrupted: 1}},
	} {
		if got := matchWire(c.sent, c.recv, hold); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
