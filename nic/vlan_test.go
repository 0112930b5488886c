package nic

import (
	"bytes"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// tagged returns f with an outermost tag of protocol tpid carrying tci.
func tagged(f []byte, tpid uint16, tci uint16) []byte {
	t := hdr.InsertVLAN(make([]byte, len(f)+hdr.VLANTagSize), hdr.Ethernet(f), hdr.VLANTCI(tci))
	hdr.Ethernet(t).SetType(tpid)
	return t
}

// noNotification fails if a notification arrives within d.
func (h *hostSide) noNotification(d time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if e, _ := h.ntf.Peek(); e != nil {
			var n rings.Notification
			_ = n.Decode(rings.NotificationEntry(e))
			h.t.Fatalf("unexpected notification %+v", n)
		}
		h.irq.Wait(5 * time.Millisecond)
	}
}

// TestVLANReceiveFilterStrip: a device on VLAN 10 takes frames tagged 10
// only, strips the tag and reports it in the notification; every other
// VLAN, untagged frames, VLAN IDs 0 and 4095, truncated tags and double
// tagging are counted drops and never reach a buffer.
func TestVLANReceiveFilterStrip(t *testing.T) {
	h := newHostSideConfig(t, 4, Config{VLAN: 10})
	good := frame(devMAC, 100)
	inputs := []struct {
		name string
		f    []byte
		id   rings.StatID
	}{
		{"other VLAN", tagged(good, hdr.EtherTypeVLAN, 20), rings.StatRxDropVLAN},
		{"untagged", good, rings.StatRxDropVLAN},
		{"VID 0 (priority tag)", tagged(good, hdr.EtherTypeVLAN, 0x6000), rings.StatRxDropBadVLAN},
		{"VID 4095", tagged(good, hdr.EtherTypeVLAN, 4095), rings.StatRxDropBadVLAN},
		{"QinQ, S-tag 10 over C-tag 10", tagged(tagged(good, hdr.EtherTypeVLAN, 10), hdr.EtherTypeQinQ, 10), rings.StatRxDropBadVLAN},
		{"double C-tag 10 over 20", tagged(tagged(good, hdr.EtherTypeVLAN, 20), hdr.EtherTypeVLAN, 10), rings.StatRxDropBadVLAN},
		{"S-tag 10 alone", tagged(good, hdr.EtherTypeQinQ, 10), rings.StatRxDropBadVLAN},
		{"truncated tag", tagged(good, hdr.EtherTypeVLAN, 10)[:hdr.EthernetSize+2], rings.StatRxDropBadVLAN},
		{"tagged 10, over the MTU", tagged(frame(devMAC, 1500), hdr.EtherTypeVLAN, 10), rings.StatRxDropOversize},
	}
	for _, in := range inputs {
		before := h.dev.Stat(in.id)
		if err := h.wire.Inject(in.f); err != nil {
			t.Fatal(err)
		}
		h.waitStat(in.id, before+1)
	}
	// A full-MTU frame with its tag is 1522 bytes on the wire: taken.
	for _, g := range [][]byte{good, frame(devMAC, 1500-28)} {
		tci := hdr.MakeVLANTCI(5, 10)
		if err := h.wire.Inject(tagged(g, hdr.EtherTypeVLAN, uint16(tci))); err != nil {
			t.Fatal(err)
		}
		n, ok := h.notification()
		if !ok || n.Flags != rings.NtfLegacyUpload || n.VLAN != uint16(tci) || int(n.Len) != len(g) {
			t.Fatalf("tagged frame of our VLAN: notification %+v ok=%v", n, ok)
		}
		got, _ := h.mem.Map(h.bufs+rings.Addr(int(n.Aux)*h.bufLen), int(n.Len))
		if !bytes.Equal(got, g) {
			t.Fatal("legacy buffer does not hold the untagged frame")
		}
	}
	h.noNotification(50 * time.Millisecond)
	if got := h.dev.Stat(rings.StatRxDropVLAN) + h.dev.Stat(rings.StatRxDropBadVLAN); got != 8 {
		t.Errorf("VLAN drops %d, want 8", got)
	}
}

// TestVLANOffByDefault: a device on no VLAN delivers untagged frames with
// VLAN 0 in the notification and drops every tagged frame (counted).
func TestVLANOffByDefault(t *testing.T) {
	h := newHostSide(t, 4)
	good := frame(devMAC, 100)
	if err := h.wire.Inject(tagged(good, hdr.EtherTypeVLAN, 10)); err != nil {
		t.Fatal(err)
	}
	h.waitStat(rings.StatRxDropVLAN, 1)
	if err := h.wire.Inject(tagged(good, hdr.EtherTypeVLAN, 4095)); err != nil {
		t.Fatal(err)
	}
	h.waitStat(rings.StatRxDropBadVLAN, 1)
	if err := h.wire.Inject(good); err != nil {
		t.Fatal(err)
	}
	n, ok := h.notification()
	if !ok || n.Flags != rings.NtfLegacyUpload || n.VLAN != 0 || int(n.Len) != len(good) {
		t.Fatalf("untagged frame: notification %+v ok=%v", n, ok)
	}
	if _, err := New(Config{VLAN: 4095}, h.mem, h.wire); err == nil {
		t.Error("New took VLAN 4095")
	}
}

// TestVLANTransmitInsert: the device inserts the descriptor's tag (PCP
// kept) or its own, and refuses a descriptor that would leave on another
// VLAN or double tagged.
func TestVLANTransmitInsert(t *testing.T) {
	h := newHostSideConfig(t, 0, Config{VLAN: 10})
	buf, _ := h.mem.Alloc(4096, 64)
	f := frame(peerMAC, 200)
	_ = h.mem.WriteAt(f, buf)
	pre := tagged(f, hdr.EtherTypeVLAN, 10)
	preBuf := buf + 2048
	_ = h.mem.WriteAt(pre, preBuf)
	post := func(tx rings.Tx) {
		e := h.tx.Next()
		tx.Encode(rings.TxDesc(e))
		h.tx.Commit()
	}
	pcp := uint16(hdr.MakeVLANTCI(3, 10))
	post(rings.Tx{Conn: rings.NoConn, Addr: buf, Len: uint32(len(f)), VLAN: 20})  // another VLAN
	post(rings.Tx{Conn: rings.NoConn, Addr: preBuf, Len: uint32(len(pre))})       // tagged by the host
	post(rings.Tx{Conn: rings.NoConn, Addr: buf, Len: uint32(len(f)), VLAN: pcp}) // tag with PCP 3
	post(rings.Tx{Conn: rings.NoConn, Addr: buf, Len: uint32(len(f))})            // the device's tag
	if got := h.wire.Next(t, 2*time.Second); !bytes.Equal(got, tagged(f, hdr.EtherTypeVLAN, pcp)) {
		t.Fatalf("descriptor tag: % x", got)
	}
	if got := h.wire.Next(t, 2*time.Second); !bytes.Equal(got, tagged(f, hdr.EtherTypeVLAN, 10)) {
		t.Fatalf("device tag: % x", got)
	}
	h.waitStat(rings.StatTxDropBadDesc, 2)
	if got := h.dev.Stat(rings.StatTxBytes); got != 2*uint64(len(f)+4) {
		t.Errorf("tx_bytes = %d, want %d (tags included)", got, 2*(len(f)+4))
	}
}

// TestVLANTransmitTagOffDevice: a descriptor tag at a device on no VLAN
// is refused, so a host cannot put frames on a VLAN it was not given.
func TestVLANTransmitTagOffDevice(t *testing.T) {
	h := newHostSide(t, 0)
	buf, _ := h.mem.Alloc(2048, 64)
	f := frame(peerMAC, 200)
	_ = h.mem.WriteAt(f, buf)
	for _, tci := range []uint16{10, 0} {
		e := h.tx.Next()
		(&rings.Tx{Conn: rings.NoConn, Addr: buf, Len: uint32(len(f)), VLAN: tci}).Encode(rings.TxDesc(e))
		h.tx.Commit()
	}
	if got := h.wire.Next(t, 2*time.Second); !bytes.Equal(got, f) {
		t.Fatalf("untagged descriptor: % x", got)
	}
	h.waitStat(rings.StatTxDropBadDesc, 1)
}
