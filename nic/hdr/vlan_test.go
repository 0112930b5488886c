package hdr

import (
	"bytes"
	"testing"
)

// TestVLANInsertStrip checks the 802.1Q tag against bytes written by hand:
// insertion puts TPID 0x8100 and the TCI after the source MAC, and
// stripping gives back the untagged frame.
func TestVLANInsertStrip(t *testing.T) {
	f := make([]byte, EthernetSize+4)
	(&EthernetFields{Dst: macB, Src: macA, Type: EtherTypeIPv4}).Encode(f)
	copy(f[EthernetSize:], "data")
	tci := MakeVLANTCI(5, 100)
	if tci.VID() != 100 || tci.PCP() != 5 || tci.DEI() {
		t.Fatalf("TCI %#04x: VID %d PCP %d DEI %v", uint16(tci), tci.VID(), tci.PCP(), tci.DEI())
	}
	tagged := InsertVLAN(make([]byte, len(f)+VLANTagSize), Ethernet(f), tci)
	want := append(append(append([]byte{}, f[:12]...), 0x81, 0x00, 0xa0, 0x64), f[12:]...)
	if !bytes.Equal(tagged, want) {
		t.Fatalf("tagged % x\nwant   % x", tagged, want)
	}
	if !IsVLANTPID(Ethernet(tagged).Type()) || IsVLANTPID(EtherTypeIPv4) || !IsVLANTPID(EtherTypeQinQ) {
		t.Fatal("IsVLANTPID")
	}
	v, err := ParseEthernetVLAN(tagged)
	if err != nil || v.TPID() != EtherTypeVLAN || v.TCI() != tci || v.Type() != EtherTypeIPv4 || string(v.Payload()) != "data" {
		t.Fatalf("parse: %v TPID %#x TCI %#x type %#x", err, v.TPID(), uint16(v.TCI()), v.Type())
	}
	if got := StripVLAN(make([]byte, len(tagged)), v); !bytes.Equal(got, f) {
		t.Fatalf("stripped % x, want % x", got, f)
	}
	v.SetTCI(MakeVLANTCI(0, VLANIDReserved) | 1<<12)
	if v.TCI().VID() != VLANIDReserved || !v.TCI().DEI() {
		t.Fatal("SetTCI")
	}
	for n := range EthernetVLANSize {
		if _, err := ParseEthernetVLAN(tagged[:n]); err != ErrShort {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
}
