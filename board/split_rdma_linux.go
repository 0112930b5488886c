package board

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/nic/split"
	"github.com/emunic/emunic/rings"
)

// splitRDMA is a split device's RDMA doorbell registers (RegQPDoorbell,
// RegCQArm: docs/bar0.md) as the host's verbs ring them: each write is a
// REG_POST (docs/split.md), sent and not waited for, as a store to a
// doorbell page is posted on a bus. The device answers only a refusal;
// the reader hands it to the function the verbs set (OnRefused), which
// fails the QP or the CQ's posted arm, since the post that rang it
// returned long ago.
type splitRDMA struct {
	d   *splitDevice
	on  atomic.Bool // the device enabled with FeatQPDoorbell
	off bool        // SplitConfig.CommandDoorbells

	mu  sync.Mutex // one message built and sent at a time
	buf []byte
	seq uint32

	onRefused atomic.Pointer[func(off, v uint32)]
}

// enabled notes the features the enable wrote (every one the device has:
// rings.Bar0BringUp).
func (r *splitRDMA) enabled(d *splitDevice, feat rings.Bar0Feature) {
	r.d = d
	r.on.Store(!r.off && feat&rings.FeatQPDoorbell != 0 && feat&rings.FeatRDMA != 0)
}

// RDMADoorbell implements tcpstack.RDMADoorbellDevice: the registers, or
// nil when the device did not offer them.
func (d *splitDevice) RDMADoorbell() rings.RDMADoorbell {
	if !d.rdma.on.Load() {
		return nil
	}
	return &d.rdma
}

// QPDoorbell implements rings.RDMADoorbell: a REG_POST of RegQPDoorbell.
// False only when it could not be sent (the device is gone).
func (r *splitRDMA) QPDoorbell(qpn uint32) bool { return r.post(rings.RegQPDoorbell, qpn) }

// ArmCQ implements rings.RDMADoorbell: a REG_POST of RegCQArm.
func (r *splitRDMA) ArmCQ(cq, flags uint32) bool {
	return r.post(rings.RegCQArm, rings.Bar0CQArm(cq, flags))
}

// OnRefused implements rings.RDMADoorbellLate.
func (r *splitRDMA) OnRefused(f func(off, v uint32)) { r.onRefused.Store(&f) }

func (r *splitRDMA) post(off, v uint32) bool {
	r.mu.Lock()
	r.seq++
	r.buf = split.AppendRegPost(r.buf[:0], r.seq, off, v)
	err := r.d.c.SendMessage(r.buf)
	r.mu.Unlock()
	return err == nil
}

// refused takes a REG_POST's reply: a write the register block refused.
// Any other answer to a posted write is a device that does not speak the
// protocol.
func (r *splitRDMA) refused(rp split.Reply) error {
	if rp.Status != split.StatusBadRegister {
		return fmt.Errorf("the device answered a REG_POST with %v: %s", rp.Status, rp.Msg)
	}
	_, off, v := split.DecodeRegPostRefusal(rp.Value)
	if f := r.onRefused.Load(); f != nil {
		(*f)(off, v)
	}
	return nil
}
