package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/services"
)

// TestDemoReportCrossCheck runs the demo (netstack, delegated and RDMA
// paths, small, with a capture at each host's port) and checks every figure
// of the per-path table, the transfer table, the wire table, the ring and
// driver tables, the device and engine counters and the RDMA report
// against a count taken somewhere else: frames and bytes in the captures
// (decoded here: who sent each frame, which TCP stream bytes and MPA
// messages it carried), the ring indices the host side wrote in host
// memory, the drivers' and netstack's own counters. A figure computed from
// a counter is never checked against that counter. Once over a clean wire
// and once with loss and reordering.
func TestDemoReportCrossCheck(t *testing.T) {
	for _, tc := range []struct {
		name          string
		loss, reorder float64
		bytes         int64
	}{
		{"clean", 0, 0, 1 << 20},
		{"lossy", 2, 2, 512 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultDemoConfig()
			cfg.Bytes, cfg.Loss, cfg.Reorder, cfg.Seed, cfg.RDMA = tc.bytes, tc.loss, tc.reorder, 5, true
			cfg.Idle = 20 * time.Second
			crossCheckDemo(t, cfg)
		})
	}
}

// ringIdx is the ring indices one host's driver wrote in host memory: the
// producer indices of the rings it fills, the consumer index of the one it
// drains.
type ringIdx struct {
	cmdPI, txPI, rxPI, ntfCI uint32
	rxPosted                 uint32 // receive buffers posted before the device started
	// left is the notifications the device published that the driver
	// had not consumed (between CI and the device's PI): at the end,
	// those of frames that arrived while the hosts stopped. txLeft and
	// txLeftLegacy, txLeftBytes are the transmit descriptors the device
	// had not consumed, and those of them that are legacy frames.
	left                 []rings.Notification
	txLeft, txLeftLegacy uint64
	txLeftBytes          uint64
}

func readRingIdx(t *testing.T, h *tcpstack.Host) ringIdx {
	rc := h.Driver.RingConfig()
	load := func(l rings.Layout, off int) uint32 {
		b, err := h.Mem.Map(l.Base+rings.Addr(off), 4)
		if err != nil {
			t.Fatal(err)
		}
		// The index words are written atomically by their owner.
		return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[0])))
	}
	x := ringIdx{cmdPI: load(rc.Command, rings.OffProducerIndex), txPI: load(rc.Tx, rings.OffProducerIndex),
		rxPI: load(rc.Rx, rings.OffProducerIndex), ntfCI: load(rc.Notify, rings.OffConsumerIndex), rxPosted: rc.Rx.Count}
	for i := load(rc.Tx, rings.OffConsumerIndex); i != x.txPI; i++ {
		e, err := h.Mem.Map(rc.Tx.Base+rings.HeaderSize+rings.Addr((i&(rc.Tx.Count-1))*rc.Tx.EntrySize), int(rc.Tx.EntrySize))
		if err != nil {
			t.Fatal(err)
		}
		x.txLeft++
		if d := rings.TxDesc(e); d.Conn() == rings.NoConn {
			x.txLeftLegacy++
			x.txLeftBytes += uint64(d.Len())
		}
	}
	l := rc.Notify
	for i := x.ntfCI; i != load(l, rings.OffProducerIndex); i++ {
		e, err := h.Mem.Map(l.Base+rings.HeaderSize+rings.Addr((i&(l.Count-1))*l.EntrySize), int(l.EntrySize))
		if err != nil {
			t.Fatal(err)
		}
		var n rings.Notification
		_ = n.Decode(rings.NotificationEntry(e))
		x.left = append(x.left, n)
	}
	return x
}

// leftUploads counts the unconsumed notifications that hold a legacy
// receive buffer, and those (with their bytes) that are legacy frames.
func (x ringIdx) leftUploads() (buffers, frames, frameBytes uint64) {
	for _, n := range x.left {
		if n.Flags&(rings.NtfLegacyUpload|rings.NtfFrameTooLarge) != 0 || n.Conn == rings.NoConn && n.Flags&rings.NtfError != 0 {
			buffers++
		}
		if n.Conn == rings.NoConn && n.Flags&rings.NtfLegacyUpload != 0 {
			frames++
			frameBytes += uint64(n.Len)
		}
	}
	return
}

// stageView is what the test reads at each boundary besides the ring
// indices: netstack's own counters of the packets its NIC took.
type stageView struct {
	idx       [2]ringIdx
	nsRxPkts  [2]uint64
	nsRxBytes [2]uint64
	drv       [2]tcpstack.DriverStats
}

func readStage(t *testing.T, l *demoLab) stageView {
	var v stageView
	for i, h := range []*tcpstack.Host{l.a, l.b} {
		v.idx[i] = readRingIdx(t, h)
		for _, n := range h.S.NICInfo() {
			v.nsRxPkts[i] += n.Stats.Rx.Packets.Value()
			v.nsRxBytes[i] += n.Stats.Rx.Bytes.Value()
		}
		v.drv[i] = h.Driver.Stats()
	}
	return v
}

// splitLateFrames bounds the frames a split device's port delivered into
// its socket after the device stopped reading it.
const splitLateFrames = 4

// checker compares a figure of the report with an independent count.
type checker struct {
	t      *testing.T
	n      int
	failed bool
}

func (c *checker) eq(what string, report, independent uint64, source string) {
	c.t.Helper()
	c.n++
	if report != independent {
		c.failed = true
		c.t.Errorf("%s: the report says %d, %s says %d", what, report, source, independent)
	}
}

func (c *checker) ok(what string, cond bool, format string, args ...any) {
	c.t.Helper()
	c.n++
	if !cond {
		c.failed = true
		c.t.Errorf("%s: %s", what, fmt.Sprintf(format, args...))
	}
}

func sumLen(fs []*capFrame) (n uint64) {
	for _, f := range fs {
		n += uint64(len(f.data))
	}
	return n
}

func count(fs []*capFrame, pred func(*capFrame) bool) (n uint64) {
	for _, f := range fs {
		if pred(f) {
			n++
		}
	}
	return n
}

func crossCheckDemo(t *testing.T, cfg demoConfig) {
	dir := t.TempDir()
	cfg.Pcap = filepath.Join(dir, "a.pcap")
	var lab *demoLab
	var stages []stageView
	cfg.hooks = &demoHooks{pcapB: filepath.Join(dir, "b.pcap"), observe: func(l *demoLab, stage int) {
		lab = l
		if stage != len(stages) {
			t.Errorf("observe: stage %d after %d stages", stage, len(stages))
		}
		stages = append(stages, readStage(t, l))
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := runDemoReport(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if len(stages) != len(rep.results)+1 {
		t.Fatalf("%d stages observed for %d paths", len(stages), len(rep.results))
	}
	final := [2]ringIdx{readRingIdx(t, lab.a), readRingIdx(t, lab.b)}
	capA, err := readPcap(cfg.Pcap)
	if err != nil {
		t.Fatal(err)
	}
	capB, err := readPcap(cfg.hooks.pcapB)
	if err != nil {
		t.Fatal(err)
	}
	sent := [2][]*capFrame{sentBy(capA, macA), sentBy(capB, macB)}
	recv := [2][]*capFrame{receivedBy(capA, macA), receivedBy(capB, macB)}
	for h := range 2 {
		classifyEngine(sent[h])
		markRetrans(sent[h])
	}
	text := out.String()
	c := &checker{t: t}

	checkPaths(c, rep, stages, sent)
	checkPrintedPaths(c, rep, text)
	checkTransfers(c, rep, text, sent)
	checkWire(c, rep, sent, recv)
	checkHosts(c, rep, lab, stages, final, sent, recv)
	c.eq("pcap: frames at host A's port", rep.pcapFrames, uint64(len(capA)), "the records in A's capture file")
	c.ok("pcap line", strings.Contains(text, fmt.Sprintf("pcap: %d frames at host A's port", len(capA))), "not printed with %d frames", len(capA))
	t.Logf("%d figures checked against independent counts", c.n)
	if c.failed {
		t.Logf("the report:\n%s", text)
	}
}

// checkPaths: the per-path table, path by path, against the frames the
// captures saw between the path's boundaries and the host-side ring
// indices and driver counters at those boundaries.
func checkPaths(c *checker, rep *demoReport, stages []stageView, sent [2][]*capFrame) {
	for i, r := range rep.results {
		p := r.path + ": "
		before, after := stages[i], stages[i+1]
		var frames []*capFrame
		for h := range 2 {
			frames = append(frames, inWindow(sent[h], r.before.at, r.after.at)...)
		}
		idx := func(get func(ringIdx) uint32) (n uint64) {
			for h := range 2 {
				n += uint64(get(after.idx[h]) - get(before.idx[h]))
			}
			return n
		}
		drv := func(get func(tcpstack.DriverStats) uint64) (n uint64) {
			for h := range 2 {
				n += get(after.drv[h]) - get(before.drv[h])
			}
			return n
		}
		c.eq(p+"frames on the wire", r.cost.wireFrames, uint64(len(frames)), "the captures (frames each port sent)")
		c.eq(p+"tx ring entries", r.cost.txEntries, idx(func(x ringIdx) uint32 { return x.txPI }),
			"the transmit descriptors the drivers produced (producer index in host memory)")
		c.eq(p+"rx ring entries", r.cost.rxEntries, idx(func(x ringIdx) uint32 { return x.rxPI }),
			"the receive buffers the drivers got back and reposted (producer index in host memory)")
		c.eq(p+"notifications", r.cost.notifications, idx(func(x ringIdx) uint32 { return x.ntfCI }),
			"the notifications the drivers consumed (consumer index in host memory)")
		c.eq(p+"notifications", r.cost.notifications, drv(func(s tcpstack.DriverStats) uint64 { return s.Notifications }),
			"the drivers' count of notifications handled")
		c.eq(p+"commands", r.cost.commands, idx(func(x ringIdx) uint32 { return x.cmdPI }),
			"the commands the drivers produced (producer index in host memory)")
		c.eq(p+"interrupts", r.cost.interrupts, drv(func(s tcpstack.DriverStats) uint64 { return s.Interrupts }),
			"the interrupts the drivers received")
		c.eq(p+"segments sent by netstack", r.cost.nsSegments,
			count(frames, func(f *capFrame) bool { return f.tcp && !f.engine })+
				drv(func(s tcpstack.DriverStats) uint64 { return s.FrozenDropsOut + s.TxDropped }),
			"netstack's TCP frames in the captures plus the frames the drivers kept off the wire")
		c.eq(p+"segments sent by the engines", r.cost.engSegments, count(frames, func(f *capFrame) bool { return f.engine }),
			"the engines' frames in the captures")
		c.eq(p+"segments retransmitted", r.cost.retransmitted, count(frames, func(f *capFrame) bool { return f.retrans }),
			"the segments in the captures that re-send sequence space")
	}
}

// checkPrintedPaths: the per-path table as printed holds the figures
// checked as data. It takes the rows (names and fields) from the table's
// own pathCostRows: what it checks is the printing, read back from the
// text; the figures themselves are checked against independent counts in
// checkPaths.
func checkPrintedPaths(c *checker, rep *demoReport, text string) {
	for _, row := range pathCostRows {
		var want []string
		for _, r := range rep.results {
			want = append(want, u64(row.get(r.cost)))
		}
		got := strings.Fields(strings.TrimPrefix(strings.TrimSpace(reportRow(text, row.name+"  ")), row.name))
		c.ok("printed per-path row "+row.name, strings.Join(got, " ") == strings.Join(want, " "), "%q, the data says %q", got, want)
	}
}

// flowFrom returns the source port of host A's connection to B's port
// dport (its SYN in A's capture).
func flowFrom(sentA []*capFrame, dport uint16) (uint16, bool) {
	for _, f := range sentA {
		if f.tcp && f.dport == dport && f.flags&tcpSYN != 0 {
			return f.sport, true
		}
	}
	return 0, false
}

// checkTransfers: the transfer table against the bytes the captures
// carried: the A -> B stream of each TCP path reassembled and hashed, and
// the RDMA Writes into the throughput region decoded (MPA, DDP, RDMAP) and
// placed into an image of the region.
func checkTransfers(c *checker, rep *demoReport, text string, sent [2][]*capFrame) {
	for _, r := range rep.results {
		p := r.path + ": "
		var dport uint16
		switch {
		case r.rdma != nil:
			dport = demoPortRDMA
		case strings.HasPrefix(r.path, "netstack"):
			dport = demoPort
		default:
			dport = demoPortOffload
		}
		sport, ok := flowFrom(sent[0], dport)
		if !ok {
			c.ok(p+"connection", false, "no SYN to port %d in A's capture", dport)
			continue
		}
		data, err := stream(sent[0], sport, dport)
		c.ok(p+"A -> B stream", err == nil, "%v", err)
		var got []byte // what the receiver's memory holds, from the capture
		var nbytes uint64
		if r.rdma == nil {
			got, nbytes = data, uint64(len(data))
		} else {
			ms, err := parseMPA(data)
			if err != nil {
				c.ok(p+"MPA stream", false, "%v", err)
				continue
			}
			c.eq(p+"MPA CRC errors in the capture", 0, uint64(ms.crcErrors), "CRC-32C over the captured FPDUs")
			nbytes = uint64(ms.tagged[r.rdma.regionSTag])
			got = make([]byte, r.rdma.region)
			for _, w := range ms.writes {
				if w.stag == r.rdma.regionSTag {
					copy(got[w.to-r.rdma.regionTO:], w.data)
				}
			}
			got = got[:min(int(nbytes), len(got))]
			checkRDMA(c, r.rdma, ms, sent)
		}
		c.eq(p+"bytes", uint64(r.bytes), nbytes, "the payload bytes in the capture")
		sum := sha256.Sum256(got)
		c.ok(p+"sha-256", sum == r.received && sum == r.sent, "the capture's bytes hash to %x, the receiver's to %x, the sender's to %x",
			sum[:8], r.received[:8], r.sent[:8])
		row := reportRow(text, r.path+"  ")
		c.ok(p+"printed row", strings.Contains(row, services.Size(nbytes)) && strings.Contains(row, fmt.Sprintf("match %x", sum[:6])),
			"%q lacks %s and match %x", row, services.Size(nbytes), sum[:6])
		// The time runs from before the first write to after the last
		// byte arrived: it spans the first transmissions of the first and
		// the last byte (of the RDMA Writes into the region, on the RDMA
		// path; the opcode checks before them are not timed).
		from, to := int64(0), int64(len(data))-1
		if r.rdma != nil {
			from, to = -1, -1
			ms, _ := parseMPA(data)
			for _, w := range ms.writes {
				if w.stag == r.rdma.regionSTag {
					if from < 0 {
						from = w.off
					}
					to = w.off
				}
			}
		}
		first, ok1 := firstSentAt(sent[0], sport, dport, from)
		last, ok2 := firstSentAt(sent[0], sport, dport, to)
		c.ok(p+"time", ok1 && ok2 && r.elapsed >= last.Sub(first), "%v, but the capture shows data for %v", r.elapsed, last.Sub(first))
		c.ok(p+"cpu", r.cpu > 0, "%v: the process used no CPU time?", r.cpu)
	}
}

// checkRDMA: the RDMA report's per-QP device statistics against the MPA
// streams decoded from the capture (A's QP sent the A -> B stream and
// received the B -> A one), and its host-copy figure.
func checkRDMA(c *checker, rr *rdmaReport, ab *mpaStream, sent [2][]*capFrame) {
	sport, _ := flowFrom(sent[0], demoPortRDMA)
	baBytes, err := stream(sent[1], demoPortRDMA, sport)
	c.ok("RDMA: B -> A stream", err == nil, "%v", err)
	abBytes, _ := stream(sent[0], sport, demoPortRDMA)
	ba, err := parseMPA(baBytes)
	if err != nil {
		c.ok("RDMA: B -> A MPA stream", false, "%v", err)
		return
	}
	c.ok("RDMA: QP statistics", rr.haveStats, "not read")
	q := "RDMA per QP: "
	c.eq(q+"A tx_fpdus", rr.qpA.TxFPDUs, uint64(ab.fpdus), "FPDUs in the capture, A -> B")
	c.eq(q+"B rx_fpdus", rr.qpB.RxFPDUs, uint64(ab.fpdus), "FPDUs in the capture, A -> B")
	c.eq(q+"B tx_fpdus", rr.qpB.TxFPDUs, uint64(ba.fpdus), "FPDUs in the capture, B -> A")
	c.eq(q+"A rx_fpdus", rr.qpA.RxFPDUs, uint64(ba.fpdus), "FPDUs in the capture, B -> A")
	c.eq(q+"A tx_bytes", rr.qpA.TxBytes, uint64(len(abBytes)), "stream bytes in the capture, A -> B")
	c.eq(q+"B rx_bytes", rr.qpB.RxBytes, uint64(len(abBytes)), "stream bytes in the capture, A -> B")
	c.eq(q+"B tx_bytes", rr.qpB.TxBytes, uint64(len(baBytes)), "stream bytes in the capture, B -> A")
	c.eq(q+"A rx_bytes", rr.qpA.RxBytes, uint64(len(baBytes)), "stream bytes in the capture, B -> A")
	var writes uint64
	for _, n := range ab.tagged {
		writes += uint64(n)
	}
	c.eq(q+"B placed", rr.qpB.Placed, writes+uint64(ab.sendPayload), "RDMA Write and Send payload in the capture, A -> B")
	c.eq(q+"A sourced", rr.qpA.Sourced, writes+uint64(ab.sendPayload), "RDMA Write and Send payload in the capture, A -> B")
	c.eq(q+"A placed", rr.qpA.Placed, uint64(ba.readResponsePayload+ba.sendPayload), "Read Response and Send payload in the capture, B -> A")
	c.eq(q+"B sourced", rr.qpB.Sourced, uint64(ba.readResponsePayload+ba.sendPayload), "Read Response and Send payload in the capture, B -> A")
	c.eq(q+"B rx_messages", rr.qpB.RxMessages, uint64(ab.lastSegments), "DDP segments with the Last flag in the capture, A -> B")
	c.eq(q+"A rx_messages", rr.qpA.RxMessages, uint64(ba.lastSegments), "DDP segments with the Last flag in the capture, B -> A")
	c.eq(q+"B read_requests_recv", rr.qpB.ReadRequestsRecv, uint64(ab.readRequests), "Read Requests in the capture, A -> B")
	c.eq(q+"B read_responses_sent", rr.qpB.ReadResponsesSent, uint64(ba.readResponses), "Read Responses in the capture, B -> A")
	c.eq(q+"crc_errors", rr.qpA.CRCErrors+rr.qpB.CRCErrors, uint64(ab.crcErrors+ba.crcErrors), "CRC-32C over the captured FPDUs")
	c.eq("RDMA host copies (A + B)", rr.copyA+rr.copyB, 0, "the RDMA part posts no inline data and no private data, and moves no legacy frame")
}

// checkWire: the wire table against the two captures: what each port sent,
// matched frame by frame with what the other port received.
func checkWire(c *checker, rep *demoReport, sent, recv [2][]*capFrame) {
	for d, w := range []struct {
		name   string
		tx, rx port.Stats // the sending and the receiving port
		dev    *hostReport
	}{{"wire A -> B", rep.wireAB, rep.hosts[1].port, &rep.hosts[0]}, {"wire B -> A", rep.wireBA, rep.hosts[0].port, &rep.hosts[1]}} {
		tx, rx := sent[d], recv[1-d]
		m := matchWire(tx, rx, port.DefaultReorderHoldMax)
		c.eq(w.name+" frames", w.tx.TxFrames, uint64(len(tx)), "the sender's capture")
		c.eq(w.name+" bytes", w.tx.TxBytes, sumLen(tx), "the sender's capture")
		// TxDropClosed counts the frames held on the wire when the
		// sending port closed, and the writes the closed port refused
		// (the sending device counted those as port errors; they are in
		// no capture).
		heldAtClose := w.tx.TxDropClosed - w.dev.stat[rings.StatTxDropPortError]
		// Frames sent and never received: lost to the impairment, or to
		// one of the other drops the drop table lists by name.
		// A frame the receiving port delivered while its recorder was
		// closing is in no capture (the recorder had stopped writing).
		unrecorded := w.rx.RxFrames - uint64(len(rx))
		c.ok(w.name+" frames received", unrecorded <= 1, "the receiving port delivered %d, its capture holds %d", w.rx.RxFrames, len(rx))
		other := heldAtClose + w.tx.TxDropLinkDown + w.tx.TxDropQueueFull + w.tx.TxErrors +
			w.rx.RxDropQueueFull + w.rx.RxDropClosed + w.rx.RxDropTooBig + unrecorded
		c.eq(w.name+" lost", w.tx.TxDropLoss+other, uint64(m.lost), "frames in the sender's capture missing from the receiver's (plus the other drops)")
		// A held frame arrives behind a later one, or was dropped when the
		// sending port closed; or, released by the hold's timer, it
		// arrives late and overtaken by nothing (as does a frame that
		// waited long at a slow receiver: those are only a bound); or,
		// held when the receiving port closed, it was counted among the
		// link-down drops with the frames sent after it; or, overtaken
		// only by a twin with the same bytes (a duplicate ACK sent
		// twice in a row), it is beyond the captures (wireMatch.twins).
		lo := uint64(m.overtaken) + heldAtClose
		if hi := lo + uint64(m.late) + uint64(m.twins) + w.tx.TxDropLinkDown; hi == lo {
			c.eq(w.name+" reordered", w.tx.Reordered, lo, "frames the receiver's capture shows overtaken or held back")
		} else {
			c.ok(w.name+" reordered", w.tx.Reordered >= lo && w.tx.Reordered <= hi,
				"%d, the captures show %d overtaken or dropped held, %d late, %d twins back to back (which of each was held is not in the captures), and %d more frames went when the far end closed",
				w.tx.Reordered, lo, m.late, m.twins, w.tx.TxDropLinkDown)
		}
		c.eq(w.name+" duplicated", w.tx.Duplicated, uint64(m.duplicated), "frames the receiver's capture shows twice")
		c.eq(w.name+" corrupted", w.tx.Corrupted, uint64(m.corrupted), "frames the receiver's capture shows changed")
	}
}

// checkHosts: the ring, driver, device and engine tables, host by host,
// with the final counters.
func checkHosts(c *checker, rep *demoReport, lab *demoLab, stages []stageView, final [2]ringIdx, sent, recv [2][]*capFrame) {
	last := stages[len(stages)-1]
	lastAt := rep.results[len(rep.results)-1].after.at
	for h, hr := range rep.hosts {
		n := hr.name + " "
		fi, rc, drv, st, eng := final[h], hr.ring, hr.drv, &hr.stat, hr.eng

		// rings (device side)
		c.eq(n+"command ring entries", rc.Command.Entries, uint64(fi.cmdPI), "the commands the driver produced (producer index in host memory)")
		c.eq(n+"command ring entries", rc.Command.Entries, drv.Commands, "the driver's count of commands")
		leftBufs, leftFrames, leftBytes := fi.leftUploads()
		c.eq(n+"notify ring entries", rc.Notify.Entries, uint64(fi.ntfCI)+uint64(len(fi.left)),
			"the notifications the driver consumed (consumer index in host memory), and those left when it stopped")
		c.eq(n+"tx ring entries", rc.Tx.Entries, uint64(fi.txPI)-fi.txLeft,
			"the descriptors the driver produced (producer index in host memory), less those left when the device stopped")
		c.eq(n+"rx ring entries", rc.Rx.Entries, uint64(fi.rxPI-fi.rxPosted)+leftBufs,
			"the buffers the driver reposted (producer index in host memory), and those reported in notifications left when it stopped")
		c.eq(n+"command ring kicks", rc.Command.Kicks, drv.CommandInterrupts, "the command-vector interrupts the driver received")
		c.eq(n+"notify ring kicks", rc.Notify.Kicks, drv.Interrupts, "the notification-vector interrupts the driver received")
		c.eq(n+"tx ring kicks", rc.Tx.Kicks, drv.TxSpaceInterrupts, "the transmit-space interrupts the driver received")
		c.eq(n+"rx ring kicks", rc.Rx.Kicks, 0, "the receive ring has no vector")
		for _, r := range []struct {
			name string
			s    rings.RingStats
		}{{"command", rc.Command}, {"notify", rc.Notify}, {"tx", rc.Tx}, {"rx", rc.Rx}} {
			c.eq(n+r.name+" ring publishes", r.s.Publishes, r.s.Kicks+r.s.Suppressed, "kicks + suppressed")
			c.ok(n+r.name+" ring publishes", r.s.Publishes <= r.s.Entries, "%d publishes for %d entries", r.s.Publishes, r.s.Entries)
			c.eq(n+r.name+" ring parks", r.s.Parks, 0, "the unit (it parks on its doorbell, never on a ring)")
			c.eq(n+r.name+" ring phase_errs", r.s.PhaseErrs, st[rings.StatRingPhaseErrors], "the device's ring_phase_errors")
		}
		c.eq(n+"consumer rings full", rc.Command.Full+rc.Tx.Full+rc.Rx.Full, 0, "a consumer is never full")
		c.ok(n+"notify ring full", rc.Notify.Full <= st[rings.StatNotifyDropRingFull], "%d full, %d notifications dropped as full",
			rc.Notify.Full, st[rings.StatNotifyDropRingFull])

		// driver (host side): what netstack sent is in the capture; what
		// it received, netstack counted itself (up to the last path's end;
		// what the capture shows after it is the hosts' closing frames).
		legacyOut := func(f *capFrame) bool { return !f.engine }
		tail := inWindow(recv[h], lastAt, time.Now().Add(time.Hour))
		c.eq(n+"driver tx_frames", drv.TxFrames, count(sent[h], legacyOut)+st[rings.StatTxDropBadDesc]+st[rings.StatTxDropPortError]+fi.txLeftLegacy,
			"netstack's frames in the capture (and those left in the ring when the device stopped)")
		var legacyBytes uint64
		for _, f := range sent[h] {
			if legacyOut(f) {
				legacyBytes += uint64(len(f.data))
			}
		}
		if drops := st[rings.StatTxDropBadDesc] + st[rings.StatTxDropPortError]; drops == 0 {
			c.eq(n+"driver tx_bytes", drv.TxBytes, legacyBytes+fi.txLeftBytes, "netstack's frames in the capture (and those left in the ring)")
		} else {
			c.ok(n+"driver tx_bytes", drv.TxBytes >= legacyBytes+fi.txLeftBytes && drv.TxBytes <= legacyBytes+fi.txLeftBytes+drops*uint64(lab.devA.MTU()+14),
				"%d, the capture shows %d (and %d frames the device dropped)", drv.TxBytes, legacyBytes+fi.txLeftBytes, drops)
		}
		// netstack's count is read at the last path's end, with the lab
		// quiet: the driver's count then must match it exactly. What the
		// driver took while the hosts stopped is at most the frames the
		// capture shows arriving after that (less those left in the
		// ring; the rest was still in the device's FIFO when it stopped).
		ld := last.drv[h]
		c.eq(n+"driver rx_frames (at the last path's end)", ld.RxFrames, last.nsRxPkts[h]-ld.ZeroWindowAckRepairs+ld.FrozenDropsIn+ld.RxHeld+ld.RxGROMerged,
			"netstack's count of packets received (less the ACK repairs' extra header copies, plus the frozen-flow drops, the frames held for an RDMA listener and the frames GRO merged into others)")
		c.ok(n+"driver rx_frames", drv.RxFrames >= ld.RxFrames && drv.RxFrames-ld.RxFrames <= uint64(len(tail))-leftFrames,
			"%d at the end, %d at the last path's end, %d frames arrived after it (%d left in the ring)", drv.RxFrames, ld.RxFrames, len(tail), leftFrames)
		// The bytes of the frozen-flow drops and of the ACK repairs'
		// header copies are known only as a bound.
		nsBytes := last.nsRxBytes[h] + 14*last.nsRxPkts[h] + ld.RxHeldBytes + ld.RxGROHeaderBytes + 14*ld.RxGROMerged
		if ld.ZeroWindowAckRepairs == 0 && ld.FrozenDropsIn == 0 {
			c.eq(n+"driver rx_bytes (at the last path's end)", ld.RxBytes, nsBytes, "netstack's count of bytes received, with the Ethernet headers")
		} else {
			c.ok(n+"driver rx_bytes (at the last path's end)", ld.RxBytes+(14+60)*ld.ZeroWindowAckRepairs >= nsBytes &&
				ld.RxBytes <= nsBytes+uint64(1514)*ld.FrozenDropsIn,
				"%d, netstack counted %d (%d frozen-flow drops, %d ACK repairs)", ld.RxBytes, nsBytes, ld.FrozenDropsIn, ld.ZeroWindowAckRepairs)
		}
		c.ok(n+"driver rx_bytes", drv.RxBytes >= ld.RxBytes && drv.RxBytes-ld.RxBytes <= sumLen(tail)-leftBytes,
			"%d at the end, %d at the last path's end, %d bytes arrived after it", drv.RxBytes, ld.RxBytes, sumLen(tail))
		c.eq(n+"driver notifications", drv.Notifications, uint64(fi.ntfCI), "the consumer index in host memory")
		c.eq(n+"driver commands", drv.Commands, uint64(fi.cmdPI), "the producer index in host memory")

		// device counters
		// Exact at the last path's end; at the very end the capture may
		// lack a frame the port delivered as its recorder closed.
		lhs := []hostSnap{rep.results[len(rep.results)-1].after.a, rep.results[len(rep.results)-1].after.b}[h]
		before := inWindow(recv[h], time.Time{}, lastAt)
		c.eq(n+"device rx_frames (at the last path's end)", lhs.stat[rings.StatRxFrames], uint64(len(before)), "the host's capture")
		c.eq(n+"device rx_bytes (at the last path's end)", lhs.stat[rings.StatRxBytes], sumLen(before), "the host's capture")
		if os.Getenv(board.SplitEnv) == "" {
			c.eq(n+"device rx_frames", st[rings.StatRxFrames], hr.port.RxFrames, "the frames its port delivered")
			c.eq(n+"device rx_bytes", st[rings.StatRxBytes], hr.port.RxBytes, "the bytes its port delivered")
			c.ok(n+"device rx_frames", st[rings.StatRxFrames] >= uint64(len(recv[h])) && st[rings.StatRxFrames]-uint64(len(recv[h])) <= 1,
				"%d, the host's capture holds %d", st[rings.StatRxFrames], len(recv[h]))
		} else {
			// A device in a process of its own reads its port from a
			// socket the port delivers into: a late frame (a
			// retransmission on the lossy wire) delivered as the
			// device stopped stays in the socket, counted by the
			// port and the capture, never by the device.
			c.ok(n+"device rx_frames", st[rings.StatRxFrames] <= hr.port.RxFrames && hr.port.RxFrames-st[rings.StatRxFrames] <= splitLateFrames,
				"%d, the port delivered %d (at most %d left in its socket when the device stopped)", st[rings.StatRxFrames], hr.port.RxFrames, splitLateFrames)
			c.ok(n+"device rx_bytes", st[rings.StatRxBytes] <= hr.port.RxBytes && hr.port.RxBytes-st[rings.StatRxBytes] <= splitLateFrames*1514,
				"%d, the port delivered %d", st[rings.StatRxBytes], hr.port.RxBytes)
			c.ok(n+"device rx_frames", st[rings.StatRxFrames] <= uint64(len(recv[h]))+1 && uint64(len(recv[h]))-min(uint64(len(recv[h])), st[rings.StatRxFrames]) <= splitLateFrames,
				"%d, the host's capture holds %d", st[rings.StatRxFrames], len(recv[h]))
		}
		c.eq(n+"device tx_frames", st[rings.StatTxFrames], uint64(len(sent[h])), "the host's capture")
		// Transmit checksum offload: netstack leaves the checksum of its
		// unfragmented TCP and UDP frames to the device (TxCsum).
		csumOut := func(f *capFrame) bool { return !f.engine && wantsTxCsum(f.data) }
		nCsum := count(sent[h], csumOut)
		c.ok(n+"device tx_csum", nCsum <= st[rings.StatTxCsum] && st[rings.StatTxCsum] <= nCsum+st[rings.StatTxDropPortError],
			"%d frames checksummed; netstack's TCP and UDP frames in the capture: %d (%d refused by the port)",
			st[rings.StatTxCsum], nCsum, st[rings.StatTxDropPortError])
		c.eq(n+"device tx_bytes", st[rings.StatTxBytes], sumLen(sent[h]), "the host's capture")
		c.eq(n+"device cmd_completed", st[rings.StatCmdCompleted], uint64(fi.cmdPI), "the commands the driver produced")
		c.eq(n+"device notify_posted", st[rings.StatNotifyPosted], uint64(fi.ntfCI)+uint64(len(fi.left)),
			"the notifications the driver consumed, and those left when it stopped")
		c.eq(n+"device interrupts", st[rings.StatInterrupts], drv.Interrupts, "the interrupts the driver received")
		c.ok(n+"device interrupts_coalesced", st[rings.StatInterrupts]+st[rings.StatInterruptsCoalesced] <= st[rings.StatNotifyPosted],
			"%d interrupts covering %d more notifications, of %d posted", st[rings.StatInterrupts], st[rings.StatInterruptsCoalesced], st[rings.StatNotifyPosted])
		// The device counts the driver's doorbell writes that found it
		// parked, its ring doorbell's and its RDMA doorbell registers';
		// the driver counts all of them (it writes a ring's when it saw
		// the device's NEED_WAKEUP, which the device may have withdrawn
		// since, and the RDMA registers whatever the device does).
		c.ok(n+"device doorbells", st[rings.StatDoorbells] <= drv.DoorbellKicks+drv.RDMADoorbells,
			"%d doorbells received while parked, the driver wrote %d to the ring doorbell and %d to the RDMA doorbell registers",
			st[rings.StatDoorbells], drv.DoorbellKicks, drv.RDMADoorbells)
		// Every other activity counter the report prints must be here:
		// a new one needs a check (or a reason it has none).
		noIndependentCount := map[rings.StatID]string{
			rings.StatParks:     "the unit's own sleeps: nothing outside it sees them",
			rings.StatTimerRuns: "the unit's timer passes: nothing outside it sees them",
		}
		checked := map[rings.StatID]bool{rings.StatRxFrames: true, rings.StatRxBytes: true, rings.StatTxFrames: true,
			rings.StatTxBytes: true, rings.StatCmdCompleted: true, rings.StatNotifyPosted: true, rings.StatInterrupts: true,
			rings.StatInterruptsCoalesced: true, rings.StatDoorbells: true, rings.StatTxCsum: true}
		for id := rings.StatID(0); id < rings.NumStats; id++ {
			if st[id] != 0 && !isDropOrError(id) && !checked[id] && noIndependentCount[id] == "" {
				c.ok(n+"device "+id.String(), false, "printed (%d) but not cross-checked", st[id])
			}
		}

		// delegated TCP engine: what it sent is in the capture, frame by
		// frame; what it received is the rest of what arrived.
		engOut := func(f *capFrame) bool { return f.engine }
		var engBytes, retransBytes uint64
		for _, f := range sent[h] {
			if f.engine {
				engBytes += uint64(len(f.payload))
				if f.retrans {
					retransBytes += uint64(len(f.payload))
				}
			}
		}
		c.eq(n+"engine tx_segments", eng.TxSegments, count(sent[h], engOut), "the engine's frames in the capture")
		c.eq(n+"engine tx_bytes", eng.TxBytes, engBytes, "the payload of the engine's frames in the capture")
		c.eq(n+"engine tx_retrans_segs", eng.TxRetransSegs, count(sent[h], func(f *capFrame) bool { return f.engine && f.retrans }),
			"the engine's frames in the capture that re-send sequence space")
		c.eq(n+"engine tx_retrans_byte", eng.TxRetransByte, retransBytes, "their payload")
		c.eq(n+"engine acks_sent", eng.AcksSent, count(sent[h], func(f *capFrame) bool {
			return f.engine && len(f.payload) == 0 && f.flags&(tcpSYN|tcpFIN|tcpRST) == 0
		}), "the engine's frames in the capture with no data, SYN, FIN or RST")
		c.eq(n+"engine zero_windows_sent", eng.ZeroWindowsSent, count(sent[h], func(f *capFrame) bool { return f.engine && f.win == 0 }),
			"the engine's frames in the capture advertising a zero window")
		// What arrived and was neither dropped by the device nor uploaded
		// to the driver went to the engine: exact at the last path's end
		// (everything consumed), a bound after it (the hosts stopped with
		// frames perhaps still in the device's FIFO).
		rxDrops := func(st *[rings.NumStats]uint64) (n uint64) {
			for id := rings.StatID(0); id < rings.NumStats; id++ {
				if strings.HasPrefix(id.String(), "rx_drop_") {
					n += st[id]
				}
			}
			return n
		}
		lh := []hostSnap{rep.results[len(rep.results)-1].after.a, rep.results[len(rep.results)-1].after.b}[h]
		arrived := uint64(len(recv[h]) - len(tail))
		c.eq(n+"engine rx_segments (at the last path's end)", lh.eng.RxSegments, arrived-ld.RxFrames-rxDrops(&lh.stat)+ld.RxHeld,
			"the frames in the capture the device neither dropped nor uploaded to the driver, and those the driver held and handed back")
		c.ok(n+"engine rx_segments", eng.RxSegments >= lh.eng.RxSegments && eng.RxSegments-lh.eng.RxSegments <= uint64(len(tail)),
			"%d at the end, %d at the last path's end, %d frames arrived after it", eng.RxSegments, lh.eng.RxSegments, len(tail))
		// In-order payload: each delegated flow's stream from the peer,
		// less what netstack had acknowledged before the delegation.
		var engRx, ulp uint64
		for _, fl := range engineFlows(sent[h]) {
			peer, err := stream(sent[1-h], fl[1], fl[0])
			c.ok(n+"engine rx_bytes", err == nil, "stream to port %d: %v", fl[0], err)
			engRx += uint64(len(peer)) - netstackAcked(sent[h], sent[1-h], fl)
			if fl[0] == demoPortRDMA || fl[1] == demoPortRDMA {
				mine, _ := stream(sent[h], fl[0], fl[1])
				ulp += uint64(len(mine))
			}
		}
		c.eq(n+"engine rx_bytes", eng.RxBytes, engRx, "the peer's stream bytes in the capture past what netstack acknowledged")
		c.eq(n+"engine ulp_pulled", eng.ULPPulled, ulp, "the RDMA connection's stream bytes in the capture")
		hostDrv := []*tcpstack.Host{lab.a, lab.b}[h].Driver
		nc := hostDrv.NotificationCounts()
		c.eq(n+"engine legacy_uploads", eng.LegacyUploads, nc.DelegatedFlag(rings.NtfLegacyUpload),
			"the LEGACY_UPLOAD notifications naming a connection the driver consumed")
		c.eq(n+"engine user_bufs_done", eng.UserBufsDone, nc.DelegatedFlag(rings.NtfUserBufDone),
			"the USER_BUF_DONE notifications the driver consumed")
		c.eq(n+"engine notify_posted", eng.NotifyPosted,
			nc.Delegated-nc.DelegatedFlag(rings.NtfQPEvent)-nc.DelegatedFlag(rings.NtfCQEvent),
			"the notifications naming a connection the driver consumed, less the RDMA QP and CQ events (the device's, not the engine's)")
		c.eq(n+"engine rx ring share", rc.Rx.Entries, drv.RxFrames+leftFrames+eng.LegacyUploads+drv.RxErrors+drv.RxFrameTooLarge,
			"the driver's legacy frames plus the engine's uploads")
		engChecked := map[string]bool{"rx_segments": true, "rx_bytes": true, "tx_segments": true, "tx_bytes": true,
			"tx_retrans_segs": true, "tx_retrans_byte": true, "acks_sent": true, "zero_windows_sent": true,
			"legacy_uploads": true, "user_bufs_done": true, "notify_posted": true, "ulp_pulled": true}
		// The engine's internal events: nothing outside the unit sees them
		// as such (a capture shows an RTO's retransmission, not the timer).
		internal := map[string]bool{"rto_expired": true, "rtt_samples": true, "delayed_acks": true, "dup_acks_rx": true,
			"fast_retransmits": true, "partial_acks": true, "ooo_segments": true, "ooo_bytes_restored": true,
			"notify_coalesced": true, "notify_full": true, "time_wait_expired": true, "time_wait_entered": true,
			"time_wait_reopened": true, "ulp_held": true, "tail_loss_probes": true, "spurious_timeouts": true,
			"sack_recoveries": true, "lost_retransmits": true, "spurious_recoveries": true, "rack_lost": true, "rack_timeouts": true, "rx_lro": true,
			"challenge_acks": true, "persist_probes": true, "keepalive_probes": true, "rst_accepted": true, "syn_received": true}
		for _, ec := range engineCounters(eng) {
			if ec.v != 0 && !ec.drop && !engChecked[ec.name] && !internal[ec.name] {
				c.ok(n+"engine "+ec.name, false, "printed (%d) but not cross-checked", ec.v)
			}
		}
	}
}

// engineFlows returns the flows (local port, remote port) on which host's
// engine sent frames: the connections delegated at that host.
func engineFlows(sent []*capFrame) [][2]uint16 {
	seen := map[[2]uint16]bool{}
	var out [][2]uint16
	for _, f := range sent {
		k := [2]uint16{f.sport, f.dport}
		if f.engine && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// netstackAcked is how many of the peer's stream bytes on flow fl (local,
// remote port) the host's netstack acknowledged before the engine took the
// flow: the bytes the engine never received.
func netstackAcked(mine, peer []*capFrame, fl [2]uint16) uint64 {
	var isn uint32
	have := false
	for _, f := range peer {
		if f.tcp && f.sport == fl[1] && f.dport == fl[0] && f.flags&tcpSYN != 0 {
			isn, have = f.seq, true
		}
	}
	var acked uint64
	for _, f := range mine {
		if have && f.tcp && !f.engine && f.sport == fl[0] && f.dport == fl[1] && f.flags&0x10 != 0 {
			acked = max(acked, uint64(f.ack-isn-1))
		}
	}
	return acked
}

// wantsTxCsum reports whether a legacy frame is one a host with transmit
// checksum offload sends with TxCsum: TCP or UDP, unfragmented, straight
// behind an IPv4 or IPv6 header. Parsed here by hand, apart from the
// driver's own test.
func wantsTxCsum(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	switch typ := uint16(f[12])<<8 | uint16(f[13]); {
	case typ == 0x0800 && len(f) >= 14+20:
		frag := (uint16(f[14+6])<<8 | uint16(f[14+7])) & 0x3FFF // MF and the offset
		return frag == 0 && (f[14+9] == 6 || f[14+9] == 17)
	case typ == 0x86DD && len(f) >= 14+40:
		return f[14+6] == 6 || f[14+6] == 17
	}
	return false
}
