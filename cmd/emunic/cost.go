package main

import (
	"fmt"
	"io"
	"time"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// hostSnap is what one host's counters said at one moment.
type hostSnap struct {
	ring      rings.RingCounters
	stat      [rings.NumStats]uint64
	drv       tcpstack.DriverStats
	eng       tcpstack.EngineCounters
	nsSent    uint64 // netstack TCP segments sent
	nsRetrans uint64 // netstack TCP segments retransmitted
}

// snapHost reads a host's counters: the device's from the counter area it
// publishes in host memory (as a driver reads a NIC's statistics DMA, the
// same in process and split), the driver's and netstack's directly.
func snapHost(h *tcpstack.Host) hostSnap {
	c, _ := h.Counters() // a host without an area reads as zeros, which the report shows
	s := hostSnap{ring: c.Rings, drv: h.Driver.Stats(), eng: c.Engine, stat: c.Stats}
	tcp := h.S.Stats().TCP
	s.nsSent, s.nsRetrans = tcp.SegmentsSent.Value(), tcp.Retransmits.Value()
	return s
}

// labSnap is both hosts' and the wire's counters at one moment.
type labSnap struct {
	a, b           hostSnap
	wireAB, wireBA port.Stats
	// at is when the counters were read: between the two reads that
	// agreed, so a frame recorded before it (a capture's timestamp) was
	// counted, and one recorded after it was not.
	at time.Time
}

// snapshot reads the lab's counters once the offload units have caught up:
// the ring and engine counters are copies each unit publishes when it goes
// idle, so it waits (bounded) until two reads in a row agree and each unit
// has published its copies since the last change it saw (or is parked):
// counters that merely stopped changing can be a copy the unit has not
// refreshed yet.
func (l *demoLab) snapshot() labSnap {
	read := func() labSnap {
		return labSnap{a: snapHost(l.a), b: snapHost(l.b), wireAB: l.pa.Stats(), wireBA: l.pb.Stats()}
	}
	prev, prevAt := read(), time.Now()
	if l.lockstep {
		// The hosts are quiet whenever this goroutine runs, and a wait
		// on the real clock would let the run's virtual clock go on by
		// however much it can meanwhile.
		prev.at = prevAt
		return prev
	}
	_, genA := l.a.CountersSettled(0)
	_, genB := l.b.CountersSettled(0)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
		cur := read()
		okA, nowA := l.a.CountersSettled(genA)
		okB, nowB := l.b.CountersSettled(genB)
		if cur == prev && okA && okB {
			break
		}
		if cur != prev {
			// Something moved: only a snapshot after this read covers it.
			genA, genB = nowA, nowB
		}
		prev, prevAt = cur, time.Now()
	}
	prev.at = prevAt.Add(time.Since(prevAt) / 2)
	return prev
}

// labDelta is what happened between two snapshots, summed over both hosts.
type labDelta struct {
	wireFrames    uint64 // frames put on the wire, both directions
	txEntries     uint64 // transmit ring entries (legacy frames and delegated buffers)
	rxEntries     uint64 // receive ring entries (legacy buffers filled)
	notifications uint64 // notification ring entries
	commands      uint64 // command ring entries
	interrupts    uint64 // interrupts raised by the devices
	nsSegments    uint64 // TCP segments netstack sent
	engSegments   uint64 // frames the delegated engines sent
	retransmitted uint64 // data and FIN segments netstack or the engines sent again (netstack does not count its SYN retransmissions)
}

func (s labSnap) sub(o labSnap) labDelta {
	var d labDelta
	d.wireFrames = s.wireAB.TxFrames - o.wireAB.TxFrames + s.wireBA.TxFrames - o.wireBA.TxFrames
	for _, p := range [][2]hostSnap{{s.a, o.a}, {s.b, o.b}} {
		n, b := p[0], p[1]
		d.txEntries += n.ring.Tx.Entries - b.ring.Tx.Entries
		d.rxEntries += n.ring.Rx.Entries - b.ring.Rx.Entries
		d.notifications += n.ring.Notify.Entries - b.ring.Notify.Entries
		d.commands += n.ring.Command.Entries - b.ring.Command.Entries
		d.interrupts += n.stat[rings.StatInterrupts] - b.stat[rings.StatInterrupts]
		d.nsSegments += n.nsSent - b.nsSent
		d.engSegments += n.eng.TxSegments - b.eng.TxSegments
		d.retransmitted += n.nsRetrans - b.nsRetrans + n.eng.TxRetransSegs - b.eng.TxRetransSegs
	}
	return d
}

// pathCostRows are the rows of the per-path table: a name and the figure.
var pathCostRows = []struct {
	name string
	get  func(labDelta) uint64
}{
	{"frames on the wire", func(d labDelta) uint64 { return d.wireFrames }},
	{"tx ring entries", func(d labDelta) uint64 { return d.txEntries }},
	{"rx ring entries", func(d labDelta) uint64 { return d.rxEntries }},
	{"notifications", func(d labDelta) uint64 { return d.notifications }},
	{"commands", func(d labDelta) uint64 { return d.commands }},
	{"interrupts", func(d labDelta) uint64 { return d.interrupts }},
	{"segments sent by netstack", func(d labDelta) uint64 { return d.nsSegments }},
	{"segments sent by the engines", func(d labDelta) uint64 { return d.engSegments }},
	{"segments retransmitted", func(d labDelta) uint64 { return d.retransmitted }},
}

// printPathCosts prints, side by side, what each path cost both hosts
// together: ring entries, interrupts, segments.
func printPathCosts(w io.Writer, results []transferResult) {
	fmt.Fprintln(w, "per path, both hosts together")
	t := &table{}
	head := []string{""}
	for _, r := range results {
		head = append(head, r.path)
	}
	t.row(head...)
	for _, f := range pathCostRows {
		cells := []string{f.name}
		for _, r := range results {
			cells = append(cells, u64(f.get(r.cost)))
		}
		t.row(cells...)
	}
	t.write(w)
}
