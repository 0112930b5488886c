package tcpstack

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
)

// Device is what the driver needs of the NIC: its identity, its ring and
// vector registers, and its doorbell, all in rings types (the ABI), so
// the host never names a device package. The in-process NIC implements
// it, and so does board's client of a NIC in another process (split mode,
// over shared memory and eventfds).
type Device interface {
	MAC() [6]byte
	MTU() int
	Start(rc rings.RingConfig, vec rings.Vectors) error
	Doorbell() rings.Doorbell
	Stop() error
}

// TxChecksummer is a Device that can say whether it fills in the
// checksums of legacy frames sent with rings.TxCsum (docs/rings.md
// "Transmit checksum offload"): after Start, once the driver's features
// are settled. A Device without the method gets none, and netstack
// computes every checksum itself.
type TxChecksummer interface {
	TxChecksum() bool
}

// DriverConfig sizes the driver's rings and buffers.
type DriverConfig struct {
	CommandEntries uint32 // default 64
	TxEntries      uint32 // default 1024
	RxEntries      uint32 // default 1024
	// SpinPolls is how many empty polls the interrupt handler makes before
	// it sleeps. Default 32.
	SpinPolls int
	// NoGRO stops the interrupt handler coalescing the TCP segments of
	// one flow that a batch of notifications brings (generic receive
	// offload, gVisor's stack/gro, as its fdbased endpoint does) into one
	// packet of up to 64 KiB. GRO is on by default: netstack's TCP then
	// processes a burst once, which nearly doubles its receive rate from
	// a TAP with offloads.
	NoGRO bool
	// Yield, when set, is called by the interrupt handler after each
	// packet it hands netstack and each notification of a delegated
	// connection: a lockstep harness (board/lockstep) holds it there
	// until the host has done all that packet caused, so that how many
	// segments netstack's processor takes in one pass does not depend on
	// timing.
	Yield func() `json:"-"`
	// Clock, when set, is the host's clock for its own timers (command,
	// transmit-space and delegation waits, Host.NewTimer) and the
	// handshake round trip the flow tracker measures for OFFLOAD: a
	// lockstep run's virtual clock. Default: the real one.
	Clock tcpip.Clock `json:"-"`
}

func (c *DriverConfig) setDefaults() {
	if c.CommandEntries == 0 {
		c.CommandEntries = 64
	}
	if c.TxEntries == 0 {
		c.TxEntries = 1024
	}
	if c.RxEntries == 0 {
		c.RxEntries = 1024
	}
	if c.SpinPolls == 0 {
		c.SpinPolls = 32
	}
}

// Driver is the host's NIC driver: a gVisor stack.LinkEndpoint whose frames
// cross the device's legacy transmit and receive rings as DMA buffers in
// host memory. Transmit copies each frame once into a ring buffer; receive
// copies each frame once out of a legacy buffer into a netstack packet
// buffer. Those are the only copies on the legacy path.
type Driver struct {
	cfg  DriverConfig
	mem  *rings.Arena
	dev  Device
	mtu  uint32
	mac  tcpip.LinkAddress
	rc   rings.RingConfig
	door rings.Doorbell

	irq     *rings.Bell // notification vector
	txSpace *rings.Bell
	cmdDone *rings.Bell

	txMu      sync.Mutex
	tx        *rings.Producer
	txBufBase rings.Addr
	txBufMem  []byte
	bufSize   int

	rx        *rings.Producer // only the interrupt goroutine touches it after start
	rxBufBase rings.Addr
	rxBufMem  []byte

	// txCsum: the device fills in TCP and UDP checksums (TxCsum), so
	// netstack leaves them to it (CapabilityTXChecksumOffload). Set
	// before netstack sees the driver, never changed.
	txCsum bool

	ntf *rings.Consumer

	cmd *rings.Producer // under cp.mu
	cp  cmdPath         // the command path (cmdpath.go)
	txw txWait          // transmit-space waiters and backlog, under txMu

	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher
	// gro coalesces the legacy frames of a batch of notifications for
	// netstack; only the interrupt goroutine uses it (inGRO), and it
	// flushes at the end of every batch.
	gro     gro.GRO
	groDisp groCounter
	inGRO   bool
	onClose func()

	// Delegated-connection notifications go here (set by the offload layer).
	delegated atomic.Pointer[func(*rings.Notification)]
	// rxHold, when set, sees every legacy frame before netstack and the
	// flow tracker; frames it returns true for are its own (the verbs
	// layer takes payload sent to an RDMA listener before the connection
	// is delegated, and hands it to the unit behind the QP's CREATE_QP).
	rxHold atomic.Pointer[func([]byte) bool]
	// netstackDrop, when set (tests), sees every legacy frame after the
	// flow tracker and drops those it returns true for, as netstack
	// drops a segment it was handed (a listener completing a handshake
	// from a SYN cookie drops data racing it).
	netstackDrop atomic.Pointer[func([]byte) bool]

	flows   flowTracker
	txFrags txFragments // UDP fragments held for their checksum (txcsum.go), under txMu
	frags   fragReasm   // TCP fragments, reassembled before netstack (fragments.go)
	ackFix  ackRepair
	stats   driverCounters
	closing atomic.Bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
	once    sync.Once
}

type driverCounters struct {
	txFrames, txBytes, txRingFull, txDropped        atomic.Uint64
	txCsum                                          atomic.Uint64 // legacy frames sent with TxCsum
	rxFrames, rxBytes, rxErrors, ntfs, ntfRingErrs  atomic.Uint64
	rxTooLarge, rxHeld, rxHeldBytes                 atomic.Uint64
	groIn, groInBytes, groOut, groOutBytes          atomic.Uint64 // packets (and their network bytes) into and out of GRO
	commands                                        atomic.Uint64
	copyBytes, rdmaCopyBytes                        atomic.Uint64
	irqNotify, irqTxSpace, irqCommand               countedVector
	doorbell                                        countedDoorbell
	rdmaBells                                       atomic.Uint64 // RDMA doorbell register writes (QP doorbells, CQ arms)
	ntfKinds                                        ntfCounters
	ntfOutOfSeq, ntfImpossible, ntfUnknown, ntfLate atomic.Uint64
	postPartial, postOverclaim, txRefused           atomic.Uint64
	userBufReqs, userBufPosted, zeroCopyBytes       atomic.Uint64
	fastRecoveries                                  atomic.Uint64
	connQueries, connQueryBad                       atomic.Uint64 // QUERY_CONN (connquery.go)
}

var _ stack.LinkEndpoint = (*Driver)(nil)

// NewDriver allocates the rings and buffers in host memory, programs the
// device and starts the interrupt handler.
func NewDriver(mem *rings.Arena, dev Device, cfg DriverConfig) (*Driver, error) {
	cfg.setDefaults()
	mac := dev.MAC()
	d := &Driver{
		cfg: cfg, mem: mem, dev: dev, mtu: uint32(dev.MTU()),
		mac: tcpip.LinkAddress(mac[:]),
		irq: rings.NewBell(), txSpace: rings.NewBell(), cmdDone: rings.NewBell(),
		done: make(chan struct{}),
	}
	d.gro.Init(!cfg.NoGRO)
	d.frags.now, d.frags.deliver = d.nanos, d.deliverWhole
	if cfg.Clock != nil {
		d.flows.now = d.nanos
	}
	// Every ring the driver opens kicks the device through it: counted.
	d.door = d.stats.doorbell.on(dev.Doorbell())
	// Buffers hold a whole frame, rounded to a cache line.
	d.bufSize = (dev.MTU() + header.EthernetMinimumSize + rings.CacheLine - 1) &^ (rings.CacheLine - 1)
	var err error
	alloc := func(count, size uint32) rings.Layout {
		if err != nil {
			return rings.Layout{}
		}
		var l rings.Layout
		l, err = rings.AllocRing(mem, count, size)
		return l
	}
	d.rc = rings.RingConfig{
		Command: alloc(cfg.CommandEntries, rings.CommandEntrySize),
		// Every posted legacy buffer can produce one notification, plus
		// command and delegated events: size the ring so legacy traffic
		// alone can never fill it.
		Notify: alloc(nextPow2(2*cfg.RxEntries+cfg.CommandEntries), rings.NotificationEntrySize),
		Tx:     alloc(cfg.TxEntries, rings.TxDescSize),
		Rx:     alloc(cfg.RxEntries, rings.RxDescSize),
	}
	if err != nil {
		return nil, fmt.Errorf("driver: rings: %w", err)
	}
	if d.txBufBase, d.txBufMem, err = d.allocBufs(cfg.TxEntries); err != nil {
		return nil, err
	}
	if d.rxBufBase, d.rxBufMem, err = d.allocBufs(cfg.RxEntries); err != nil {
		return nil, err
	}
	if d.tx, err = rings.NewProducer(mem, d.rc.Tx, 32, d.door); err != nil {
		return nil, err
	}
	if d.rx, err = rings.NewProducer(mem, d.rc.Rx, 32, d.door); err != nil {
		return nil, err
	}
	// Commands publish explicitly (Command publishes each, commandBatch
	// a whole batch at once), so the batch is the whole ring.
	if d.cmd, err = rings.NewProducer(mem, d.rc.Command, d.rc.Command.Count, d.door); err != nil {
		return nil, err
	}
	if err := d.initCommands(); err != nil {
		return nil, err
	}
	if d.ntf, err = rings.NewConsumer(mem, d.rc.Notify, 32, d.door); err != nil {
		return nil, err
	}
	// Post every receive buffer before the device starts.
	for i := uint32(0); i < cfg.RxEntries; i++ {
		d.postRx(i)
	}
	d.rx.Publish()
	vec := rings.Vectors{Notify: d.stats.irqNotify.on(d.irq), TxSpace: d.stats.irqTxSpace.on(d.txSpace),
		Command: d.stats.irqCommand.on(d.cmdDone)}
	if err := dev.Start(d.rc, vec); err != nil {
		return nil, err
	}
	if c, ok := dev.(TxChecksummer); ok {
		d.txCsum = c.TxChecksum()
	}
	d.wg.Add(2)
	go d.interrupts()
	go d.vectors()
	return d, nil
}

func (d *Driver) allocBufs(n uint32) (rings.Addr, []byte, error) {
	size := int(n) * d.bufSize
	a, err := d.mem.Alloc(size, rings.CacheLine)
	if err != nil {
		return 0, nil, fmt.Errorf("driver: buffers: %w", err)
	}
	m, err := d.mem.Map(a, size)
	return a, m, err
}

func (d *Driver) rxBuf(id uint32) []byte {
	off := int(id) * d.bufSize
	return d.rxBufMem[off : off+d.bufSize : off+d.bufSize]
}

func (d *Driver) postRx(id uint32) {
	e := d.rx.Next()
	if e == nil {
		// There are exactly RxEntries buffers and slots and the device
		// releases a slot before reporting its buffer, so this means a
		// device protocol error: count it and lose the buffer, not the host.
		d.stats.rxErrors.Add(1)
		return
	}
	r := rings.Rx{BufID: id, Addr: d.rxBufBase + rings.Addr(int(id)*d.bufSize), Len: uint32(d.bufSize)}
	r.Encode(rings.RxDesc(e))
	d.rx.Commit()
}

// RingConfig returns where the driver put the rings.
func (d *Driver) RingConfig() rings.RingConfig { return d.rc }

// Memory returns host memory.
func (d *Driver) Memory() *rings.Arena { return d.mem }

// interrupts is the interrupt handler: it drains the notification ring,
// hands legacy frames to netstack, reposts their buffers and sleeps on the
// notification vector when there is nothing to do.
func (d *Driver) interrupts() {
	defer d.wg.Done()
	var n rings.Notification
	for !d.closing.Load() {
		got, err := d.ntf.Burst(256)
		if err != nil {
			d.stats.ntfRingErrs.Add(1)
			if errors.Is(err, rings.ErrPhase) {
				// Skip the bad entry rather than spin on it
				// (Park would find it available again at once).
				d.ntf.PopN(1)
			} else {
				// A producer index more than a ring ahead: nothing
				// can be read until the device fixes it; look again
				// on its next interrupt or in a millisecond, without
				// spinning a CPU on it.
				d.irq.Wait(time.Millisecond)
			}
			continue
		}
		head := d.ntf.Head()
		d.startGRO()
		for i := range got {
			_ = n.Decode(rings.NotificationEntry(d.ntf.Entry(head + uint32(i))))
			d.stats.ntfKinds.count(&n)
			d.handle(&n)
		}
		d.flushGRO()
		d.ntf.PopN(got)
		d.stats.ntfs.Add(uint64(got))
		if got > 0 {
			d.ntf.Release()
			d.rx.Publish()
			continue
		}
		// Interrupts are counted as they arrive (countedVector), not
		// here: Park also returns true for work found while spinning.
		d.ntf.Park(d.irq, d.cfg.SpinPolls, 0)
	}
}

func (d *Driver) handle(n *rings.Notification) {
	if n.Conn != rings.NoConn {
		if h := d.delegated.Load(); h != nil {
			(*h)(n)
			if d.cfg.Yield != nil {
				d.cfg.Yield()
			}
		}
		return
	}
	switch {
	case n.Flags&rings.NtfLegacyUpload != 0:
		frame, ok := d.legacyData(n.Aux, n.Len)
		if !ok {
			return
		}
		d.deliver(frame)
		d.postRx(n.Aux)
	case n.Flags&rings.NtfFrameTooLarge != 0:
		// The device dropped a frame longer than the buffer and gave the
		// buffer back unwritten: repost it. (Every buffer is bufSize,
		// a whole MTU frame, so only a device bug gets here.)
		d.stats.rxTooLarge.Add(1)
		if n.Aux < d.cfg.RxEntries {
			d.postRx(n.Aux)
		} else {
			d.stats.rxErrors.Add(1)
		}
	case n.Flags&rings.NtfError != 0:
		d.stats.rxErrors.Add(1)
		if n.Aux < d.cfg.RxEntries {
			d.postRx(n.Aux)
		}
	}
}

func (d *Driver) deliver(frame []byte) {
	d.stats.rxFrames.Add(1)
	d.stats.rxBytes.Add(uint64(len(frame)))
	d.deliverFrame(frame, d.inGRO)
	if d.cfg.Yield != nil && !d.inGRO {
		d.cfg.Yield() // (through GRO: as the coalescer hands each packet up)
	}
}

// redeliver hands netstack frames the driver held back while their flow
// was frozen (counted when they first arrived).
func (d *Driver) redeliver(frames [][]byte) {
	for _, f := range frames {
		d.deliverFrame(f, false) // not on the interrupt goroutine: never through its GRO
	}
}

// deliverFrame hands a legacy frame to netstack; viaGRO (the interrupt
// goroutine in a batch) lets the coalescer take it.
func (d *Driver) deliverFrame(frame []byte, viaGRO bool) {
	d.mu.RLock()
	disp := d.dispatcher
	d.mu.RUnlock()
	if disp == nil || len(frame) < header.EthernetMinimumSize {
		return
	}
	if h := d.rxHold.Load(); h != nil && (*h)(frame) {
		return
	}
	if d.frags.take(frame) {
		return
	}
	if d.flows.observe(frame, false) {
		return
	}
	if h := d.netstackDrop.Load(); h != nil && (*h)(frame) {
		return
	}
	if fix := d.ackFix.inbound(frame); fix != nil {
		// netstack would ignore this segment's ACK (see ackRepair):
		// hand it an acceptable copy of the headers first.
		d.deliverToStack(disp, fix, viaGRO)
	}
	d.deliverToStack(disp, frame, viaGRO)
}

// deliverWhole hands netstack a frame the driver reassembled from
// fragments (fragments.go), of a flow no delegated connection has.
func (d *Driver) deliverWhole(frame []byte) { d.deliverFrame(frame, false) }

// FragStats returns the counts of the TCP fragments the driver reassembled.
func (d *Driver) FragStats() FragStats { return d.frags.stats() }

// deliverToStack makes the one receive copy of a frame and hands it to
// netstack.
func (d *Driver) deliverToStack(disp stack.NetworkDispatcher, frame []byte, viaGRO bool) {
	// The one receive copy: out of the DMA buffer (which goes straight
	// back to the device) into netstack's own buffer.
	d.stats.copyBytes.Add(uint64(len(frame)))
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
	defer pkt.DecRef()
	if !d.ParseHeader(pkt) {
		return
	}
	proto := pkt.NetworkProtocolNumber
	pkt.RXChecksumValidated = true // the device verified IPv4 and TCP/UDP checksums
	if viaGRO {
		d.stats.groIn.Add(1)
		d.stats.groInBytes.Add(uint64(pkt.Data().Size()))
		d.gro.Enqueue(pkt) // takes its own reference if it keeps pkt
		return
	}
	disp.DeliverNetworkPacket(proto, pkt)
}

// startGRO begins a batch of legacy frames on the interrupt goroutine:
// until flushGRO, deliverToStack hands them to the coalescer.
func (d *Driver) startGRO() {
	if d.cfg.NoGRO {
		return
	}
	d.mu.RLock()
	disp := d.dispatcher
	d.mu.RUnlock()
	d.inGRO = disp != nil
	if d.inGRO && d.groDisp.NetworkDispatcher != disp {
		d.groDisp = groCounter{disp, &d.stats, d.cfg.Yield}
		d.gro.Dispatcher = &d.groDisp
	}
}

// groCounter is netstack's dispatcher behind the coalescer, counting what
// comes out of it (DriverStats.RxGROMerged).
type groCounter struct {
	stack.NetworkDispatcher
	s     *driverCounters
	yield func() // DriverConfig.Yield
}

func (g *groCounter) DeliverNetworkPacket(p tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	g.s.groOut.Add(1)
	g.s.groOutBytes.Add(uint64(pkt.Data().Size()))
	g.NetworkDispatcher.DeliverNetworkPacket(p, pkt)
	if g.yield != nil {
		g.yield()
	}
}

// flushGRO hands netstack what the batch coalesced.
func (d *Driver) flushGRO() {
	if d.inGRO {
		d.inGRO = false
		flushAllGRO(&d.gro, &d.stats.groOut)
	}
}

// flushAllGRO empties the coalescer. gVisor's GRO.Flush hands up only the
// oldest packet of each of its buckets: it walks a bucket's list with
// Next() after removing the entry, which clears the entry's links. A
// second flow held in the same bucket then stayed there until a later
// batch, or for good when its sender waited on it (the churn test's
// stalled connections). So flush until a pass delivers nothing; out
// counts the packets the dispatcher received.
func flushAllGRO(g *gro.GRO, out *atomic.Uint64) {
	for {
		before := out.Load()
		g.Flush()
		if out.Load() == before {
			return
		}
	}
}

// WritePackets implements stack.LinkWriter: each frame is copied into the
// transmit buffer of the next free ring slot; the batch is published once,
// and the device is kicked only if it sleeps.
func (d *Driver) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	d.txMu.Lock()
	defer d.txMu.Unlock()
	n := 0
	for _, pkt := range pkts.AsSlice() {
		size := pkt.Size()
		if size > d.bufSize {
			d.stats.txDropped.Add(1)
			continue
		}
		e := d.tx.Next()
		if e == nil {
			e = d.waitTxSpace()
			if e == nil {
				d.stats.txDropped.Add(1)
				break
			}
		}
		slot := d.tx.Tail() & (d.cfg.TxEntries - 1)
		off := int(slot) * d.bufSize
		buf := d.txBufMem[off : off+d.bufSize]
		w := 0
		for _, s := range pkt.AsSlices() {
			w += copy(buf[w:], s)
		}
		if d.txCsum {
			if held, complete := d.txFrags.hold(buf[:w]); held {
				// A fragment of a UDP datagram whose checksum
				// netstack left to the device (txcsum.go): it goes
				// with the last, the checksum filled in.
				if complete {
					d.sendHeldFragments()
				}
				n++
				continue
			}
		}
		if d.flows.observe(buf[:w], true) {
			// A frame of a delegated (or being delegated) flow: netstack
			// no longer owns it, so its output (the RST of the abort
			// included) must never reach the wire.
			n++
			continue
		}
		d.ackFix.outbound(buf[:w])
		var fl rings.TxFlags
		if d.txCsum && txChecksumNeeded(buf[:w]) {
			fl = rings.TxCsum
			d.stats.txCsum.Add(1)
		}
		d.commitTx(e, off, w, fl)
		n++
	}
	d.tx.Publish()
	if n == 0 && pkts.Len() > 0 {
		return 0, &tcpip.ErrWouldBlock{}
	}
	return n, nil
}

// commitTx posts the w-byte frame in the transmit buffer at off in slot e
// (txMu held).
func (d *Driver) commitTx(e []byte, off, w int, fl rings.TxFlags) {
	d.stats.copyBytes.Add(uint64(w))
	t := rings.Tx{Conn: rings.NoConn, Addr: d.txBufBase + rings.Addr(off), Len: uint32(w), Flags: fl}
	t.Encode(rings.TxDesc(e))
	d.tx.Commit()
	d.stats.txFrames.Add(1)
	d.stats.txBytes.Add(uint64(w))
}

// legacyTxWait bounds how long a legacy frame waits for a transmit slot:
// a device that stays stuck that long loses the frame (TCP retransmits it)
// rather than netstack's goroutine.
const legacyTxWait = 100 * time.Millisecond

// waitTxSpace publishes what is queued (so the device has work) and waits
// for the device to release slots; called and returning with txMu held (it
// lets go of it while it sleeps, so delegated senders and the vector that
// reports the space are not held up). nil after legacyTxWait or on close.
func (d *Driver) waitTxSpace() []byte {
	d.stats.txRingFull.Add(1)
	d.tx.Publish()
	for i := 0; i < 16; i++ {
		if e := d.tx.Next(); e != nil {
			return e
		}
		runtime.Gosched()
	}
	timer := d.newTimer(legacyTxWait)
	defer timer.Stop()
	for {
		if e := d.tx.Next(); e != nil {
			return e
		}
		if d.closing.Load() {
			return nil
		}
		ch := d.txSpaceChLocked()
		d.txMu.Unlock()
		expired := false
		select {
		case <-ch:
		case <-d.done:
		case <-timer.C:
			expired = true
		}
		d.txMu.Lock()
		if expired {
			return d.tx.Next()
		}
	}
}

// SetDelegatedHandler installs the receiver of notifications that name a
// delegated connection.
func (d *Driver) SetDelegatedHandler(h func(*rings.Notification)) { d.delegated.Store(&h) }

// setRxHold installs (or with nil removes) the legacy receive filter.
func (d *Driver) setRxHold(h func([]byte) bool) {
	if h == nil {
		d.rxHold.Store(nil)
		return
	}
	// Counted here, where the filter is installed, so that the receive
	// path stays as it is: a held frame is in RxFrames but netstack never
	// sees it.
	counted := func(frame []byte) bool {
		if !h(frame) {
			return false
		}
		d.stats.rxHeld.Add(1)
		d.stats.rxHeldBytes.Add(uint64(len(frame)))
		return true
	}
	d.rxHold.Store(&counted)
}

// MTU implements stack.LinkEndpoint.
func (d *Driver) MTU() uint32 { return d.mtu }

// SetMTU implements stack.LinkEndpoint; the MTU is the device's.
func (d *Driver) SetMTU(uint32) {}

// MaxHeaderLength implements stack.LinkEndpoint.
func (d *Driver) MaxHeaderLength() uint16 { return header.EthernetMinimumSize }

// LinkAddress implements stack.LinkEndpoint.
func (d *Driver) LinkAddress() tcpip.LinkAddress { return d.mac }

// SetLinkAddress implements stack.LinkEndpoint; the address is the device's.
func (d *Driver) SetLinkAddress(tcpip.LinkAddress) {}

// Capabilities implements stack.LinkEndpoint: ARP resolution, receive
// checksum offload (the device drops frames with bad checksums) and, when
// the device has it, transmit checksum offload (txcsum.go).
func (d *Driver) Capabilities() stack.LinkEndpointCapabilities {
	c := stack.CapabilityResolutionRequired | stack.CapabilityRXChecksumOffload
	if d.txCsum {
		c |= stack.CapabilityTXChecksumOffload
	}
	return c
}

// Attach implements stack.LinkEndpoint.
func (d *Driver) Attach(disp stack.NetworkDispatcher) {
	d.mu.Lock()
	d.dispatcher = disp
	d.mu.Unlock()
}

// IsAttached implements stack.LinkEndpoint.
func (d *Driver) IsAttached() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.dispatcher != nil
}

// Wait implements stack.LinkEndpoint.
func (d *Driver) Wait() {}

// ARPHardwareType implements stack.LinkEndpoint.
func (d *Driver) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareEther }

// AddHeader implements stack.LinkEndpoint.
func (d *Driver) AddHeader(pkt *stack.PacketBuffer) {
	eth := header.Ethernet(pkt.LinkHeader().Push(header.EthernetMinimumSize))
	eth.Encode(&header.EthernetFields{
		SrcAddr: pkt.EgressRoute.LocalLinkAddress,
		DstAddr: pkt.EgressRoute.RemoteLinkAddress,
		Type:    pkt.NetworkProtocolNumber,
	})
}

// ParseHeader implements stack.LinkEndpoint.
func (d *Driver) ParseHeader(pkt *stack.PacketBuffer) bool {
	hdr, ok := pkt.LinkHeader().Consume(header.EthernetMinimumSize)
	if !ok {
		return false
	}
	pkt.NetworkProtocolNumber = header.Ethernet(hdr).Type()
	return true
}

// Close implements stack.LinkEndpoint: it stops the interrupt handler and
// the device.
func (d *Driver) Close() {
	d.once.Do(func() {
		d.mu.RLock()
		f := d.onClose
		d.mu.RUnlock()
		if f != nil {
			f()
		}
		d.closing.Store(true)
		close(d.done)
		d.irq.Kick()
		d.cp.wakeVector()
		d.wg.Wait()
		_ = d.dev.Stop()
	})
}

// SetOnCloseAction implements stack.LinkEndpoint.
func (d *Driver) SetOnCloseAction(f func()) {
	d.mu.Lock()
	d.onClose = f
	d.mu.Unlock()
}

func nextPow2(v uint32) uint32 {
	n := uint32(1)
	for n < v {
		n <<= 1
	}
	return n
}

// legacyData returns the first n bytes of legacy receive buffer id, which
// holds payload the unit uploaded for a delegated connection. Interrupt
// goroutine only.
func (d *Driver) legacyData(id, n uint32) ([]byte, bool) {
	if id >= d.cfg.RxEntries || int(n) > d.bufSize {
		d.stats.rxErrors.Add(1)
		return nil, false
	}
	return d.rxBuf(id)[:n], true
}

// repostLegacy gives legacy buffer id back to the device. Interrupt
// goroutine only.
func (d *Driver) repostLegacy(id uint32) { d.postRx(id) }
