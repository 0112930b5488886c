package tcpstack

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// cmdDev plays a misbehaving device on the command ring of a driver on a
// ringDevice: the test takes each command and decides what the device
// writes back, when, and where.
type cmdDev struct {
	t    *testing.T
	d    *Driver
	dev  *ringDevice
	cons *rings.Consumer
}

func newCmdDev(t *testing.T) (*cmdDev, *rings.Producer) {
	d, dev, ntf := driverOnRingDevice(t)
	cons, err := rings.NewConsumer(d.Memory(), dev.rc.Command, 1, dev.vec.Command)
	if err != nil {
		t.Fatal(err)
	}
	return &cmdDev{t: t, d: d, dev: dev, cons: cons}, ntf
}

// published waits until the host has published command index i.
func (c *cmdDev) published(i uint32) rings.Command {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for int32(c.cons.ProducerIndex()-i) <= 0 {
		if time.Now().After(deadline) {
			c.t.Fatalf("command %d never published", i)
		}
		// The host kicks the doorbell after a publish if we said we
		// sleep: a real wait, bounded by the deadline.
		c.cons.SetNeedWakeup(true)
		if int32(c.cons.ProducerIndex()-i) <= 0 {
			select {
			case <-c.dev.bell.C():
			case <-time.After(time.Until(deadline)):
			}
		}
		c.cons.SetNeedWakeup(false)
	}
	var cmd rings.Command
	_ = cmd.Decode(rings.CommandEntry(c.cons.Entry(i)))
	return cmd
}

// writeBack writes a status into entry i and sets DONE with phase (the
// entry's own when right is true), as a device would, in any order; it
// kicks the command vector.
func (c *cmdDev) writeBack(i uint32, st rings.Status, result uint64, right bool) {
	e := c.cons.Entry(i)
	rings.CommandEntry(e).SetWriteBack(st, result)
	p := c.cons.Phase(i)
	if !right {
		p ^= 1
	}
	ctlp := (*uint32)(unsafe.Pointer(&e[0]))
	ctl := atomic.LoadUint32(ctlp)&^(rings.CtlDone|rings.CtlDonePhase) | rings.CtlDone
	if p != 0 {
		ctl |= rings.CtlDonePhase
	}
	atomic.StoreUint32(ctlp, ctl)
	c.dev.vec.Command.Kick()
}

// release pops every entry up to (not including) i and releases them.
func (c *cmdDev) release(i uint32) {
	for c.cons.Head() != i {
		c.cons.Pop()
	}
	c.cons.Release()
}

// TestCommandTimeoutKeepsSlot: a device that does not answer. The waiter
// gets ErrCommandTimeout, but the command stays in flight: its slot and
// its parameter block are not reused by the commands that follow (which
// complete), and the late answer reaches the late function.
func TestCommandTimeoutKeepsSlot(t *testing.T) {
	c, _ := newCmdDev(t)
	d := c.d
	param := []byte("state block of connection 5")
	late := make(chan rings.Command, 1)
	_, err := func() (rings.Command, error) {
		one := []cmdReq{{c: rings.Command{Opcode: rings.OpOffload, Conn: 5}, param: param}}
		out := make([]rings.Command, 1)
		err := d.exec(one, out, 30*time.Millisecond, func(res []rings.Command, err error) {
			if err != nil {
				t.Errorf("late: %v", err)
			}
			late <- res[0]
		})
		return out[0], err
	}()
	if !errors.Is(err, ErrCommandTimeout) || errors.Is(err, ErrNotSubmitted) {
		t.Fatalf("err %v, want a timeout in flight", err)
	}
	first := c.published(0)
	blk, _ := d.Memory().Map(first.Addr, int(first.Len))
	if s := d.Stats(); s.CmdTimeouts != 1 || s.CmdInFlight != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Other commands, each with a parameter block of its own, go on.
	done := make(chan error, 4)
	for k := 1; k <= 4; k++ {
		go func() {
			p := []byte(strings.Repeat("x", k*10))
			out := make([]rings.Command, 1)
			err := d.exec([]cmdReq{{c: rings.Command{Opcode: rings.OpPostBuffers, Conn: uint32(k)}, param: p}}, out, 5*time.Second, nil)
			if err == nil && out[0].Status != rings.StatusBadConn {
				err = errors.New(out[0].Status.String())
			}
			done <- err
		}()
	}
	for i := uint32(1); i <= 4; i++ {
		cmd := c.published(i)
		if cmd.Addr == first.Addr {
			t.Fatalf("command %d shares the parameter block of the command in flight", i)
		}
		c.writeBack(i, rings.StatusBadConn, 0, true)
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if string(blk) != string(param) {
		t.Fatalf("the in-flight command's parameter block changed: %q", blk)
	}
	// The device released nothing (it answers in order): the later slots
	// come back only with the first.
	if s := d.Stats(); s.CmdInFlight != 1 {
		t.Fatalf("in flight %d, want the one unanswered command", s.CmdInFlight)
	}
	// The late answer.
	c.writeBack(0, rings.StatusOK, 7, true)
	c.release(5)
	select {
	case r := <-late:
		if r.Status != rings.StatusOK || r.Result != 7 || r.Opcode != rings.OpOffload {
			t.Fatalf("late write-back %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the late answer was not reaped")
	}
	testutil.WaitFor(t, "nothing in flight", func() bool { return d.Stats().CmdInFlight == 0 })
	if s := d.Stats(); s.CmdLate != 1 || s.CmdBadWriteBacks != 0 || s.CmdStrayDone != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestCommandErrorStatus: a status other than OK comes back to the caller
// and is counted.
func TestCommandErrorStatus(t *testing.T) {
	c, _ := newCmdDev(t)
	res := make(chan rings.Command, 1)
	go func() {
		r, err := c.d.Command(rings.Command{Opcode: rings.OpUpdate, Conn: 3, Arg0: 10}, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		res <- r
	}()
	c.published(0)
	c.writeBack(0, rings.StatusBadParam, 0, true)
	c.release(1)
	if r := <-res; r.Status != rings.StatusBadParam || r.Opcode != rings.OpUpdate || r.Arg0 != 10 {
		t.Fatalf("write-back %+v", r)
	}
	if s := c.d.Stats(); s.CmdFailed != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestCommandStrayAndBadWriteBacks: a DONE in a slot the host has not
// issued, and a DONE with the phase of another lap, are counted and never
// taken for a completion.
func TestCommandStrayAndBadWriteBacks(t *testing.T) {
	c, _ := newCmdDev(t)
	d := c.d
	// The device writes DONE, with the right phase, into slot 0 before
	// the host issued index 0.
	c.writeBack(0, rings.StatusOK, 99, true)
	testutil.WaitFor(t, "the stray DONE counted", func() bool { return d.Stats().CmdStrayDone == 1 })
	res := make(chan error, 1)
	var got rings.Command
	go func() {
		var err error
		got, err = d.Command(rings.Command{Opcode: rings.OpNop}, 5*time.Second)
		res <- err
	}()
	c.published(0)
	// A DONE with the wrong phase on the issued command: not trusted.
	c.writeBack(0, rings.StatusOK, 98, false)
	testutil.WaitFor(t, "the bad write-back counted", func() bool { return d.Stats().CmdBadWriteBacks == 1 })
	d.reap()
	select {
	case err := <-res:
		t.Fatalf("completed by a write-back with the wrong phase (%v, %+v)", err, got)
	default:
	}
	// A stray DONE on the next free slot (index 1), seen on the next
	// completion interrupt.
	c.writeBack(1, rings.StatusOK, 97, true)
	testutil.WaitFor(t, "the second stray DONE counted", func() bool { return d.Stats().CmdStrayDone == 2 })
	// The real answer.
	c.writeBack(0, rings.StatusOK, 5, true)
	c.release(1)
	if err := <-res; err != nil || got.Result != 5 {
		t.Fatalf("%v %+v", err, got)
	}
	// Index 1 is issued next: its stray DONE is cleared by the commit,
	// not taken for its completion.
	go func() {
		var err error
		got, err = d.Command(rings.Command{Opcode: rings.OpNop}, 5*time.Second)
		res <- err
	}()
	c.published(1)
	d.reap()
	select {
	case err := <-res:
		t.Fatalf("completed by the stray DONE (%v, %+v)", err, got)
	default:
	}
	c.writeBack(1, rings.StatusOK, 6, true)
	c.release(2)
	if err := <-res; err != nil || got.Result != 6 {
		t.Fatalf("%v %+v", err, got)
	}
	if s := d.Stats(); s.CmdStrayDone != 2 || s.CmdBadWriteBacks != 1 || d.CommandFault() == nil {
		t.Fatalf("stats %+v, fault %v", s, d.CommandFault())
	}
}

// TestCommandLost: a device that releases a slot without a write-back
// loses the command; its waiter hears so, and the slot is reused.
func TestCommandLost(t *testing.T) {
	c, _ := newCmdDev(t)
	res := make(chan error, 1)
	go func() {
		_, err := c.d.Command(rings.Command{Opcode: rings.OpNop}, 5*time.Second)
		res <- err
	}()
	c.published(0)
	c.release(1) // popped, no DONE
	c.dev.vec.Command.Kick()
	if err := <-res; !errors.Is(err, ErrCommandLost) {
		t.Fatalf("err %v, want ErrCommandLost", err)
	}
	if s := c.d.Stats(); s.CmdLost != 1 || s.CmdInFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestCommandQueueWhenRingFull: submissions that find the ring full wait
// in order (they never block the submitter) and go out as slots return.
func TestCommandQueueWhenRingFull(t *testing.T) {
	c, _ := newCmdDev(t)
	d := c.d
	n := int(d.rc.Command.Count) + 8
	order := make(chan uint32, n)
	for k := range n {
		err := d.submitAsync([]cmdReq{{c: rings.Command{Opcode: rings.OpNop, Conn: uint32(k)}}}, func(res []rings.Command, err error) {
			if err != nil || res[0].Status != rings.StatusOK {
				t.Errorf("command %d: %v %v", k, err, res[0].Status)
			}
			order <- res[0].Conn
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if s := d.Stats(); s.CmdInFlight != uint64(n) {
		t.Fatalf("in flight %d, want %d", s.CmdInFlight, n)
	}
	for i := uint32(0); i < uint32(n); i++ {
		if cmd := c.published(i); cmd.Conn != i {
			t.Fatalf("index %d carries command %d", i, cmd.Conn)
		}
		c.writeBack(i, rings.StatusOK, 0, true)
		c.release(i + 1)
	}
	for i := uint32(0); i < uint32(n); i++ {
		select {
		case k := <-order:
			if k != i {
				t.Fatalf("completion %d is command %d", i, k)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("completion %d missing", i)
		}
	}
}

// offloadRig is an offloader on a driver whose device is the test: it
// makes connections, takes the legacy buffers the driver posts and posts
// notifications.
type offloadRig struct {
	t   *testing.T
	c   *cmdDev
	o   *offloader
	ntf *rings.Producer
	rx  *rings.Consumer
	rcv map[uint32]uint32 // the next stream byte of each connection (post)
}

// newOffloadRig: two receive buffers of 4096 bytes per connection, and
// commands that wait an hour for the device.
func newOffloadRig(t *testing.T) *offloadRig {
	c, ntf := newCmdDev(t)
	o, err := newOffloader(c.d, OffloadConfig{MaxConns: 4, RecvBuffers: 2, RecvBufSize: 4096,
		SendBufSize: 64 << 10, CommandTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rx, err := rings.NewConsumer(c.d.Memory(), c.dev.rc.Rx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &offloadRig{t: t, c: c, o: o, ntf: ntf, rx: rx}
}

// conn makes delegated connection idx.
func (r *offloadRig) conn(idx uint32) *DelegatedConn {
	key := hdr.Tuple{LocalIP: netip.AddrFrom4([4]byte{10, 0, 0, 1}), RemoteIP: netip.AddrFrom4([4]byte{10, 0, 0, 2}), LocalPort: 1000 + uint16(idx), RemotePort: 80}
	dc, err := r.o.newConn(idx, key, &flowInfo{sndNxt: 1000})
	if err != nil {
		r.t.Fatal(err)
	}
	r.o.mu.Lock()
	r.o.conns[idx] = dc
	r.o.mu.Unlock()
	return dc
}

// takeRx takes the next legacy buffer the driver posted.
func (r *offloadRig) takeRx() uint32 {
	r.t.Helper()
	var e []byte
	testutil.WaitFor(r.t, "a legacy buffer", func() bool { e, _ = r.rx.Peek(); return e != nil })
	id := rings.RxDesc(e).BufID()
	r.rx.Pop()
	r.rx.Release()
	return id
}

// post posts a notification. One naming a connection carries the numbers
// a device would: Ack = the host's SND.UNA (when 0), and a data
// notification's Seq = the next byte of the connection's stream (when 0).
func (r *offloadRig) post(n rings.Notification) {
	r.o.mu.Lock()
	c := r.o.conns[n.Conn]
	r.o.mu.Unlock()
	if c != nil {
		if r.rcv == nil {
			r.rcv = map[uint32]uint32{}
		}
		c.mu.Lock()
		if n.Ack == 0 {
			n.Ack = c.sndISS + uint32(c.sndHead)
		}
		c.mu.Unlock()
		if n.Flags&(rings.NtfLegacyUpload|rings.NtfUserBufDone) != 0 && n.Seq == 0 {
			n.Seq = r.rcv[n.Conn]
			r.rcv[n.Conn] += n.Len
		}
	}
	n.Encode(rings.NotificationEntry(r.ntf.Next()))
	r.ntf.Commit()
	r.ntf.Publish()
}

// TestNotifyNeverWaitsForCommands: reposts and window credits are
// submitted from notifications and reads without waiting for the device.
// While the device sits on a POST_BUFFERS (the command timeout is an hour),
// legacy frames keep flowing through the interrupt goroutine; when the
// device then refuses the POST_BUFFERS, and later an UPDATE, the failure
// comes back from the connection's next Read or Write.
func TestNotifyNeverWaitsForCommands(t *testing.T) {
	r := newOffloadRig(t)
	c, d, o := r.c, r.c.d, r.o
	c1, c2 := r.conn(1), r.conn(2)
	post, takeRx := r.post, r.takeRx

	// Connection 1 gets its receive buffers from the pool (as one that
	// keeps receiving does: growRecv), and the device does not answer
	// the POST_BUFFERS.
	c1.mu.Lock()
	o.growRecv(c1)
	c1.mu.Unlock()
	if cmd := c.published(0); cmd.Opcode != rings.OpPostBuffers || cmd.Conn != 1 || cmd.Arg0 != 2 {
		t.Fatalf("command %+v", cmd)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := c1.Read(make([]byte, 10))
		readErr <- err
	}()
	// Legacy traffic goes on: more frames than there are legacy buffers,
	// so every one of them must have been handed back on the way.
	frames := 3 * int(d.cfg.RxEntries)
	for range frames {
		post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: rings.NoConn, Aux: takeRx(), Len: 60})
	}
	testutil.WaitFor(t, "the legacy frames handled", func() bool { return d.Stats().RxFrames == uint64(frames) })
	// The device refuses the POST_BUFFERS (NO_RESOURCES would be a
	// partial acceptance, posted again later: see
	// TestPostBuffersPartialAcceptance): the blocked Read returns it.
	c.writeBack(0, rings.StatusBadAddress, 0, true)
	c.release(1)
	select {
	case err := <-readErr:
		if err == nil || !strings.Contains(err.Error(), "POST_BUFFERS") || !strings.Contains(err.Error(), "BAD_ADDRESS") {
			t.Fatalf("Read: %v, want the POST_BUFFERS failure", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read did not return the POST_BUFFERS failure")
	}

	// Connection 2 gets a quarter of its receive buffer (2 x 4096) in
	// legacy buffers; reading them credits the window (UPDATE), which
	// the device refuses.
	post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 2, Aux: takeRx(), Len: 1000})
	post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 2, Aux: takeRx(), Len: 1048})
	buf := make([]byte, 2048)
	if n, err := io.ReadFull(c2, buf); n != 2048 || err != nil {
		t.Fatalf("Read %d, %v", n, err)
	}
	if cmd := c.published(1); cmd.Opcode != rings.OpUpdate || cmd.Conn != 2 || cmd.Arg0 != 2048 {
		t.Fatalf("command %+v", cmd)
	}
	c.writeBack(1, rings.StatusBadParam, 0, true)
	c.release(2)
	testutil.WaitFor(t, "the UPDATE failure recorded", func() bool {
		c2.mu.Lock()
		defer c2.mu.Unlock()
		return c2.cmdErr != nil
	})
	if _, err := c2.Write([]byte("x")); err == nil || !strings.Contains(err.Error(), "UPDATE") {
		t.Fatalf("Write: %v, want the UPDATE failure", err)
	}
	if _, err := c2.Read(buf); err == nil || !strings.Contains(err.Error(), "BAD_PARAM") {
		t.Fatalf("Read: %v, want the UPDATE failure", err)
	}
	if s := d.Stats(); s.CmdFailed != 2 || s.RxErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestCommandBatchWaitsForRoom: a batch that finds fewer free slots than
// it has commands waits, then goes out whole as soon as the device has
// released enough (the consumer index is re-read, not a cached copy).
func TestCommandBatchWaitsForRoom(t *testing.T) {
	c, _ := newCmdDev(t)
	d := c.d
	n := uint32(d.rc.Command.Count) - 1
	for k := uint32(0); k < n; k++ {
		if err := d.submitAsync([]cmdReq{{c: rings.Command{Opcode: rings.OpNop, Conn: k}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	res := make(chan error, 1)
	go func() {
		out := make([]rings.Command, 2)
		err := d.exec([]cmdReq{{c: rings.Command{Opcode: rings.OpNop, Conn: 100}}, {c: rings.Command{Opcode: rings.OpNop, Conn: 101}}},
			out, 5*time.Second, nil)
		if err == nil && (out[0].Conn != 100 || out[1].Conn != 101 || out[1].Status != rings.StatusOK) {
			err = errors.New("wrong write-backs")
		}
		res <- err
	}()
	for i := uint32(0); i < n; i++ {
		c.published(i)
		c.writeBack(i, rings.StatusOK, 0, true)
	}
	c.release(n)
	for i := n; i < n+2; i++ {
		if cmd := c.published(i); cmd.Conn != 100+i-n {
			t.Fatalf("index %d: %+v", i, cmd)
		}
		c.writeBack(i, rings.StatusOK, 0, true)
	}
	c.release(n + 2)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// TestWriteWaitsForTransmitRing: a Write that finds the transmit ring full
// waits for the device, however slow (longer than the 100 ms the legacy
// path gives a frame), until its deadline or Close; it never fails on its
// own.
func TestWriteWaitsForTransmitRing(t *testing.T) {
	c, _ := newCmdDev(t)
	d := c.d
	o, err := newOffloader(d, OffloadConfig{MaxConns: 2, RecvBuffers: 1, RecvBufSize: 4096,
		SendBufSize: 64 << 10, MaxTxDescBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := o.newConn(1, hdr.Tuple{LocalPort: 1, RemotePort: 2}, &flowInfo{sndNxt: 1000})
	if err != nil {
		t.Fatal(err)
	}
	o.conns[1] = dc
	tx, err := rings.NewConsumer(d.Memory(), c.dev.rc.Tx, 1, c.dev.vec.TxSpace)
	if err != nil {
		t.Fatal(err)
	}
	ring := int(d.cfg.TxEntries)
	// More descriptors than the ring holds: the Write waits for room.
	p := make([]byte, 2*ring*1024)
	full := func() bool { return d.Stats().TxRingFull > 0 }

	// A deadline ends the wait (long enough for the ring's worth to be
	// queued first on a loaded machine under the race detector).
	if err := dc.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := dc.Write(p)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n != ring*1024 {
		t.Fatalf("Write %d, %v; want %d bytes queued and the deadline", n, err, ring*1024)
	}
	_ = dc.SetWriteDeadline(time.Time{})

	// No deadline: the device frees slots only after 150 ms, and the Write
	// is still waiting for them.
	res := make(chan error, 1)
	go func() {
		_, err := dc.Write(p[:ring*1024])
		res <- err
	}()
	testutil.WaitFor(t, "the Write waiting for the ring", full)
	slow := time.NewTimer(150 * time.Millisecond) // the slow device, not a synchronisation
	<-slow.C
	select {
	case err := <-res:
		t.Fatalf("Write returned while the ring stayed full: %v", err)
	default:
	}
	for k := 0; k < 2*ring; k++ {
		var e []byte
		testutil.WaitFor(t, "a transmit descriptor", func() bool { e, _ = tx.Peek(); return e != nil })
		tx.Pop()
		tx.Release() // kicks the transmit-space vector
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}

	// Close ends the wait too. The count is read before the Write starts:
	// read after, it could already include this Write's wait.
	before := d.Stats().TxRingFull
	go func() {
		_, err := dc.Write(p)
		res <- err
	}()
	testutil.WaitFor(t, "the Write waiting again", func() bool { return d.Stats().TxRingFull > before })
	if err := dc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-res; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	// The FIN waits behind the data, in the driver's backlog.
	d.txMu.Lock()
	b := d.txw.backlog
	d.txMu.Unlock()
	if len(b) != 1 || b[0].Flags != rings.TxFin || b[0].Conn != 1 {
		t.Fatalf("backlog %+v, want the FIN", b)
	}
	for k := 0; k <= ring; k++ { // the ring, then the FIN from the backlog
		var e []byte
		testutil.WaitFor(t, "a transmit descriptor", func() bool { e, _ = tx.Peek(); return e != nil })
		var desc rings.Tx
		_ = desc.Decode(rings.TxDesc(e))
		if k == ring && desc.Flags != rings.TxFin {
			t.Fatalf("last descriptor %+v, want the FIN", desc)
		}
		tx.Pop()
		tx.Release()
	}
}

// TestCreditsCoalesce: a reader taking small reads of legacy uploads
// returns window in UPDATEs of at least a quarter of the receive buffer,
// never more than one in the ring at a time: what it frees while the
// device has not answered goes in one UPDATE when the answer comes. (A
// credit per read filled the command ring behind one command the device
// was slow to answer, and the window never reopened.)
func TestCreditsCoalesce(t *testing.T) {
	r := newOffloadRig(t)
	c, d := r.c, r.c.d
	dc := r.conn(1)
	upload := func(n uint32) {
		r.post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 1, Aux: r.takeRx(), Len: n})
	}
	read := func(n int) {
		buf := make([]byte, 7)
		for got := 0; got < n; {
			k, err := dc.Read(buf[:min(len(buf), n-got)])
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	// updates lists the UPDATEs published so far (the reads also make
	// the connection ask for receive buffers: POST_BUFFERS).
	updates := func() (u []uint32) {
		for i := uint32(0); i != c.cons.ProducerIndex(); i++ {
			var cmd rings.Command
			_ = cmd.Decode(rings.CommandEntry(c.cons.Entry(i)))
			if cmd.Opcode == rings.OpUpdate {
				u = append(u, i)
			}
		}
		return u
	}

	// 1000 bytes read 7 at a time: below a quarter of 8192, no UPDATE.
	upload(1000)
	read(1000)
	if u := updates(); len(u) != 0 {
		t.Fatalf("UPDATEs %v after 1000 bytes read", u)
	}
	// 1048 more: one UPDATE of 2048, which the device sits on.
	upload(1048)
	read(1048)
	testutil.WaitFor(t, "an UPDATE", func() bool { return len(updates()) == 1 })
	first := updates()[0]
	if cmd := c.published(first); cmd.Arg0 != 2048 {
		t.Fatalf("command %+v", cmd)
	}
	// 6000 more while it does: no second UPDATE.
	for range 6 {
		upload(1000)
		read(1000)
	}
	if u := updates(); len(u) != 1 {
		t.Fatalf("UPDATEs %v with one in the ring, want 1", u)
	}
	// The answer (and every other command's): the 6000 go in one UPDATE.
	answer := func(upTo uint32) {
		for i := c.cons.Head(); i != upTo; i++ {
			c.writeBack(i, rings.StatusOK, 0, true)
		}
		c.release(upTo)
	}
	answer(c.cons.ProducerIndex())
	testutil.WaitFor(t, "a second UPDATE", func() bool { return len(updates()) == 2 })
	second := updates()[1]
	if cmd := c.published(second); cmd.Arg0 != 6000 {
		t.Fatalf("command %+v", cmd)
	}
	answer(c.cons.ProducerIndex())
	testutil.WaitFor(t, "the UPDATE answered", func() bool {
		dc.mu.Lock()
		defer dc.mu.Unlock()
		return !dc.creditBusy
	})
	if u := updates(); len(u) != 2 {
		t.Fatalf("UPDATEs %v, want 2", u)
	}
	if s := d.Stats(); s.CmdFailed != 0 {
		t.Fatalf("stats %+v", s)
	}
}
