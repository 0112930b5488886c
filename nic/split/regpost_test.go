package split

import (
	"testing"

	"github.com/emunic/emunic/rings"
)

// TestServerRegPost: REG_POST is a register write with no reply unless the
// register block refuses it; the refusal names the write (error code,
// offset, value), and is counted as a REG_WRITE's is.
func TestServerRegPost(t *testing.T) {
	s, path := testServer(t)
	h := dialRaw(t, path)
	h.seq++
	if err := h.c.Send(MsgRegPost, h.seq, EncodeRegWrite(rings.RegQPDoorbell, 3)); err != nil {
		t.Fatal(err)
	}
	want(t, "REG_POST before HELLO", h.reply(MsgRegPost), StatusOutOfOrder)
	h.attach(1)
	feat := h.regR(rings.RegDevFeatures)
	if feat&uint32(rings.FeatQPDoorbell) == 0 {
		t.Fatalf("the split device does not offer FeatQPDoorbell (%#x)", feat)
	}
	for _, w := range rings.Bar0BringUp(rings.Bar0RingConfig(testRings()), rings.Bar0Feature(feat)) {
		h.regW("bring-up", w.Off, w.Val, StatusOK, 0)
	}
	post := func(off, v uint32) {
		h.seq++
		b := AppendRegPost(nil, h.seq, off, v)
		if err := h.c.SendMessage(b); err != nil {
			t.Fatal(err)
		}
	}
	refusal := func(what string, code rings.Bar0ErrCode, off, v uint32) {
		t.Helper()
		hd, body, files, err := h.c.Recv()
		closeAll(files)
		if err != nil {
			t.Fatal(err)
		}
		var r Reply
		if err := r.Decode(body); err != nil || hd.Type != MsgRegPost|MsgReplyBit || r.Status != StatusBadRegister {
			t.Fatalf("%s: reply %v %v (%v)", what, hd.Type, r.Status, err)
		}
		if e, o, val := DecodeRegPostRefusal(r.Value); e != code || o != off || val != v {
			t.Fatalf("%s: refusal %v of %#x = %#x, want %v of %#x = %#x", what, e, o, val, code, off, v)
		}
	}
	bad := s.Stats().BadRegister
	nd := s.Registers().Counter(rings.RegCtrNoDoorbell)
	// Accepted: no reply. The next reply is the REG_READ's.
	post(rings.Bar0Vec(0, rings.VecRegMask), 1)
	if v := h.regR(rings.Bar0Vec(0, rings.VecRegMask)); v != 1 {
		t.Fatalf("posted mask write: reads %d", v)
	}
	// A doorbell of a QP and an arm of a CQ the device does not have.
	post(rings.RegQPDoorbell, 3)
	refusal("doorbell of no QP", rings.ErrNoDoorbell, rings.RegQPDoorbell, 3)
	post(rings.RegCQArm, rings.Bar0CQArm(7, rings.ArmSolicited))
	refusal("arm of no CQ", rings.ErrNoDoorbell, rings.RegCQArm, rings.Bar0CQArm(7, rings.ArmSolicited))
	post(rings.RegQPDoorbell, 1<<24|3)
	refusal("reserved bits", rings.ErrBadValue, rings.RegQPDoorbell, 1<<24|3)
	if got := s.Stats().BadRegister - bad; got != 3 {
		t.Errorf("BadRegister counted %d refusals, want 3", got)
	}
	if got := s.Registers().Counter(rings.RegCtrNoDoorbell) - nd; got != 2 {
		t.Errorf("no_doorbell counted %d, want 2", got)
	}
	// A malformed post is a BAD_MESSAGE reply, and the session goes on.
	h.seq++
	if err := h.c.Send(MsgRegPost, h.seq, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	want(t, "short REG_POST", h.reply(MsgRegPost), StatusBadMessage)
	if st := h.regR(rings.RegStatus); st&uint32(rings.StatusEnabled) == 0 {
		t.Fatalf("status %#x after the refusals", st)
	}
}
