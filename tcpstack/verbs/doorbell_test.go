package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// TestVerbsDoorbellRegister: on a device with the RDMA doorbell registers
// (the in-process device, and a split one that granted FeatQPDoorbell),
// posts and PollWait's arms cost no command at all: every message below
// is a receive posted and rung, a send posted and rung, and a PollWait
// that arms its CQ, and neither host's command ring moves.
func TestVerbsDoorbellRegister(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4796)
	if !verbs.DoorbellRegister(a.V) || !verbs.DoorbellRegister(b.V) {
		t.Fatal("the device's doorbell registers are not in use")
	}
	ca, cb := a.H.Driver.Stats().Commands, b.H.Driver.Stats().Commands
	const n = 200
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wc := make([]rings.Completion, 4)
	for i := range n {
		slot := i % b.Cfg.RecvN
		w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: uint64(i), NumSGE: 1}
		w.SGL[0] = a.LocalMR.SGE(i%a.Cfg.LocalSize, 1)
		if err := a.QP.PostSend(&w); err != nil {
			t.Fatal(err)
		}
		// B's receive, then A's send completion, each by PollWait (which
		// arms the CQ when it finds it empty).
		for _, nd := range []*hostrig.Node{b, a} {
			k, err := nd.CQ.PollWait(ctx, wc[:1], false)
			if err != nil || k != 1 || wc[0].Status != rings.WCSuccess {
				t.Fatalf("message %d: PollWait %d %v: %v", i, k, err, &wc[0])
			}
		}
		if err := b.PostRecvs(b.QP, slot); err != nil {
			t.Fatal(err)
		}
	}
	if d := a.H.Driver.Stats().Commands - ca; d != 0 {
		t.Errorf("A ran %d commands for %d messages, want 0", d, n)
	}
	if d := b.H.Driver.Stats().Commands - cb; d != 0 {
		t.Errorf("B ran %d commands for %d messages, want 0", d, n)
	}
	if a.CQ.Stats().Events == 0 && b.CQ.Stats().Events == 0 {
		t.Log("no PollWait slept (the completions were always there first)")
	}
}

// TestVerbsDoorbellRegisterRefused: a synchronous doorbell the device
// refuses (the QP is gone there) fails the post with ErrDoorbell, at
// once; an asynchronous one fails the QP (TestVerbsAsyncDoorbellRefused).
// Over the split socket the write is posted (REG_POST) and its refusal
// comes later: the post succeeds and the QP fails, as an asynchronous
// doorbell's does.
func TestVerbsDoorbellRegisterRefused(t *testing.T) {
	_, a, _ := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4795)
	if err := verbs.ForgetOnDevice(a.QP); err != nil {
		t.Fatal(err)
	}
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, NumSGE: 1}
	w.SGL[0] = a.LocalMR.SGE(0, 1)
	err := a.QP.PostSend(&w)
	if !verbs.DoorbellLate(a.V) {
		if !errors.Is(err, verbs.ErrDoorbell) {
			t.Fatalf("PostSend after the device forgot the QP: %v, want ErrDoorbell", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("posted doorbell: PostSend %v", err)
	}
	select {
	case <-a.QP.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("a refused posted doorbell did not fail the QP")
	}
	if err := a.QP.DoorbellErr(); !errors.Is(err, verbs.ErrDoorbell) {
		t.Fatalf("DoorbellErr = %v, want ErrDoorbell", err)
	}
}

// TestVerbsDoorbellCommandsStill: a provider on a device without the
// registers (here: told to use the commands) still works, by QP_DOORBELL
// and ARM_CQ, with a command per post.
func TestVerbsDoorbellCommandsStill(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4794)
	verbs.DropDoorbellRegister(a.V)
	verbs.DropDoorbellRegister(b.V)
	ca := a.H.Driver.Stats().Commands
	const n = 50
	sendEach(t, a, b, n, 0, func(s int) error { return b.PostRecvs(b.QP, s) })
	if d := a.H.Driver.Stats().Commands - ca; d < n {
		t.Errorf("A ran %d commands for %d sends by QP_DOORBELL", d, n)
	}
}
