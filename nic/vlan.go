package nic

import "github.com/emunic/emunic/nic/hdr"

// The device's 802.1Q tag layer (VLAN offload; docs/rings.md "VLANs").
// It sits between the MAC and the classifier: on receive it filters by
// VLAN ID and strips the tag, so the classifier, the offload engine and the
// host stack see untagged frames; on transmit it inserts the tag the
// descriptor carries, or the device's own. Each costs one copy of the
// frame into a buffer of the unit's (the FIFO slot must stay as received:
// a frame that waits for a legacy buffer is classified again on the next
// pass). A device on no VLAN touches no frame: the tag layer only refuses
// tagged ones.

// vlanFrameSize is the largest frame the MAC takes: a tag on top of
// MTU + Ethernet header when the device is on a VLAN.
func (d *Device) vlanFrameSize() int {
	if d.cfg.VLAN != 0 {
		return d.maxFrame + hdr.VLANTagSize
	}
	return d.maxFrame
}

// untag is the receive tag layer. It returns the frame to classify (f
// itself when untagged, else the frame without its tag, in a unit buffer)
// and the stripped tag control information, or a drop verdict.
func (d *Device) untag(f []byte) ([]byte, uint16, rxVerdict) {
	if len(f) < hdr.EthernetSize {
		return f, 0, rxLegacy // classify counts the runt
	}
	tpid := hdr.Ethernet(f).Type()
	if !hdr.IsVLANTPID(tpid) {
		if d.cfg.VLAN != 0 {
			return nil, 0, rxDropVLAN // untagged: not on our VLAN
		}
		return f, 0, rxLegacy
	}
	v, err := hdr.ParseEthernetVLAN(f)
	if err != nil || tpid == hdr.EtherTypeQinQ || hdr.IsVLANTPID(v.Type()) {
		return nil, 0, rxDropBadVLAN // truncated, or double tagged
	}
	tci := v.TCI()
	switch vid := tci.VID(); {
	case vid == hdr.VLANIDNone || vid == hdr.VLANIDReserved:
		return nil, 0, rxDropBadVLAN
	case vid != d.cfg.VLAN:
		return nil, 0, rxDropVLAN
	}
	if d.rxUntagBuf == nil {
		d.rxUntagBuf = make([]byte, d.maxFrame+hdr.VLANTagSize)
	}
	return hdr.StripVLAN(d.rxUntagBuf, v), uint16(tci), rxLegacy
}

// tag is the transmit tag layer for a frame the host or the engine built
// (untagged): it returns the frame to put on the wire, or false when the
// descriptor's tag cannot go out (counted by the caller as a bad
// descriptor). tci is the descriptor's VLAN field (0 for the engine's
// frames).
func (d *Device) tag(frame []byte, tci uint16) ([]byte, bool) {
	if d.cfg.VLAN == 0 {
		return frame, tci == 0
	}
	if len(frame) > d.maxFrame || hdr.IsVLANTPID(hdr.Ethernet(frame).Type()) {
		return nil, false // tagged by the host: it would leave double tagged
	}
	t := hdr.VLANTCI(tci)
	if tci == 0 {
		t = hdr.MakeVLANTCI(0, d.cfg.VLAN)
	} else if t.VID() != d.cfg.VLAN {
		return nil, false // another VLAN's: the device keeps its hosts apart
	}
	return hdr.InsertVLAN(d.txScratch(), hdr.Ethernet(frame), t), true
}
