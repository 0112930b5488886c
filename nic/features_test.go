package nic

import (
	"bytes"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port/porttest"
	"github.com/emunic/emunic/rings"
)

// TestWithheldFeaturesRefused: a device whose driver withheld delegation
// and RDMA (Config.Withheld, from RegDrvFeatures) completes those
// families' commands BAD_OPCODE, counted, and drops a delegated transmit
// descriptor; the ring family still works.
func TestWithheldFeaturesRefused(t *testing.T) {
	h := newHostSideConfig(t, 0, Config{Withheld: rings.FeatDelegation | rings.FeatRDMA})
	blk, _ := h.mem.Alloc(rings.ConnStateSize, 64)
	refused := []rings.Command{
		{Opcode: rings.OpOffload, Conn: 0, Addr: blk, Len: rings.ConnStateSize},
		{Opcode: rings.OpClose, Conn: 0},
		{Opcode: rings.OpCreateCQ, Conn: 0},
		{Opcode: rings.OpQPDoorbell, Conn: 0},
	}
	for _, c := range refused {
		if out := h.command(c); out.Status != rings.StatusBadOpcode {
			t.Errorf("%v with its feature withheld: %v, want BAD_OPCODE", c.Opcode, out.Status)
		}
	}
	if out := h.command(rings.Command{Opcode: rings.OpNop}); out.Status != rings.StatusOK {
		t.Errorf("NOP: %v", out.Status)
	}
	if got := h.dev.Stat(rings.StatCmdBadOpcode); got != uint64(len(refused)) {
		t.Errorf("cmd_bad_opcode = %d, want %d", got, len(refused))
	}
	buf, _ := h.mem.Alloc(2048, 64)
	e := h.tx.Next()
	(&rings.Tx{Conn: 0, Addr: buf, Len: 100}).Encode(rings.TxDesc(e))
	h.tx.Commit()
	h.waitStat(rings.StatTxDropBadDesc, 1)
	// Legacy frames go on.
	f := frame(peerMAC, 200)
	_ = h.mem.WriteAt(f, buf)
	e = h.tx.Next()
	(&rings.Tx{Conn: rings.NoConn, Addr: buf, Len: uint32(len(f))}).Encode(rings.TxDesc(e))
	h.tx.Commit()
	if got := h.wire.Next(t, 2*time.Second); !bytes.Equal(got, f) {
		t.Fatalf("legacy frame: % x", got)
	}
}

// TestWithheldLegacyAndVLAN: without FeatVLAN a legacy descriptor's tag is
// refused (an untagged one goes), and without FeatLegacy every legacy
// descriptor is; each refusal is a counted drop.
func TestWithheldLegacyAndVLAN(t *testing.T) {
	f := frame(peerMAC, 200)
	for _, tc := range []struct {
		name     string
		withheld rings.Bar0Feature
		vlan     uint16 // the device's VLAN
		descs    []uint16
		sent     int
	}{
		{"vlan", rings.FeatVLAN, 10, []uint16{10, 0}, 1},
		{"legacy", rings.FeatLegacy, 0, []uint16{0, 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostSideConfig(t, 0, Config{Withheld: tc.withheld, VLAN: tc.vlan})
			buf, _ := h.mem.Alloc(2048, 64)
			_ = h.mem.WriteAt(f, buf)
			for _, tci := range tc.descs {
				e := h.tx.Next()
				(&rings.Tx{Conn: rings.NoConn, Addr: buf, Len: uint32(len(f)), VLAN: tci}).Encode(rings.TxDesc(e))
				h.tx.Commit()
			}
			h.waitStat(rings.StatTxDropBadDesc, uint64(len(tc.descs)-tc.sent))
			for range tc.sent {
				h.wire.Next(t, 2*time.Second)
			}
			// A NOP round trip: the device has looked at both
			// descriptors by its completion.
			h.command(rings.Command{Opcode: rings.OpNop})
			if got := h.dev.Stat(rings.StatTxFrames); got != uint64(tc.sent) {
				t.Errorf("tx_frames = %d, want %d", got, tc.sent)
			}
		})
	}
}

// TestWithheldUnknownFeature: a configuration withholding a feature the
// device does not have is refused.
func TestWithheldUnknownFeature(t *testing.T) {
	mem, err := rings.NewArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	p := porttest.New(porttest.Config{})
	defer p.Close()
	if _, err := New(Config{MAC: devMAC, Withheld: 1 << 30}, mem, p); err == nil {
		t.Fatal("New accepted a withheld feature the device does not have")
	}
}
