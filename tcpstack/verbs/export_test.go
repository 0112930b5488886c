package verbs

import (
	"context"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// Hooks into the provider's internals for the external tests in this
// directory (package verbs_test), which use the shared two-host rig and so
// cannot be internal tests: the rig imports this package.

// WaitQP waits until cond holds of qp's state and whether its TCP
// connection (the lower layer) has closed.
func WaitQP(ctx context.Context, qp *QP, cond func(s QPState, llpClosed bool) bool) error {
	return qp.wait(ctx, func() (bool, error) { return cond(qp.state, qp.llpClosed), nil })
}

// SetEarlyHooks sets the callbacks the provider runs when it holds a
// peer's early MPA request and before it prepares a delegation's QP.
func SetEarlyHooks(v *Provider, onHold, beforePrepare func(hdr.Tuple)) {
	v.onEarlyHold, v.beforePrepare = onHold, beforePrepare
}

// EarlyCounts is the provider's early-data counters: requests held,
// injected behind their QP's CREATE_QP, dropped.
func EarlyCounts(v *Provider) (held, injected, dropped uint64) {
	return v.earlyHeld.Load(), v.earlyInjected.Load(), v.earlyDropped.Load()
}

// ForgetOnDevice destroys qp on the device only (DESTROY_QP behind the
// host's back), so the device refuses its next doorbell.
func ForgetOnDevice(qp *QP) error {
	_, err := qp.v.do(rings.Command{Opcode: rings.OpDestroyQP, Conn: qp.qpn})
	return err
}

// DoorbellRegister reports whether v rings QPs and arms CQs with the
// device's doorbell registers; DropDoorbellRegister makes it use the
// QP_DOORBELL and ARM_CQ commands instead (a device without them).
func DoorbellRegister(v *Provider) bool { return v.db != nil }

func DropDoorbellRegister(v *Provider) { v.db = nil }

// DoorbellLate reports whether v's doorbell register writes are answered
// only when refused, later (the split socket's REG_POST).
func DoorbellLate(v *Provider) bool {
	_, ok := v.db.(rings.RDMADoorbellLate)
	return ok
}
