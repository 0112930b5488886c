package hdr

import (
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

func arpRequest() ARPFields {
	return ARPFields{HType: ARPHTypeEthernet, PType: EtherTypeIPv4, HLen: 6, PLen: 4, Op: ARPOpRequest,
		SHA: macA, SPA: addrA, TPA: addrB}
}

func TestARPRoundTrip(t *testing.T) {
	in := arpRequest()
	b := make([]byte, ARPSize+18) // an ARP frame is padded to the Ethernet minimum
	if n := in.Encode(b); n != ARPSize {
		t.Fatalf("Encode: %d", n)
	}
	want := []byte{0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 0x0a, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2}
	if string(b[:ARPSize]) != string(want) {
		t.Fatalf("wire % x\nwant % x", b[:ARPSize], want)
	}
	var out ARPFields
	if n, err := out.Decode(b); err != nil || n != ARPSize || out != in {
		t.Fatalf("Decode: %+v %d %v", out, n, err)
	}
	a, err := ParseARP(b)
	if err != nil || len(a) != ARPSize || !a.IsEthernetIPv4() {
		t.Fatalf("ParseARP: %d %v", len(a), err)
	}
	a.SetOp(ARPOpReply)
	a.SetTHA(macA)
	a.SetSHA(macB)
	a.SetSPA(addrB)
	a.SetTPA(addrA)
	if a.Op() != ARPOpReply || a.THA() != macA || a.SHA() != macB || a.SPA() != addrB || a.TPA() != addrA {
		t.Fatal("setters")
	}
	b[ARPOffHLen] = 8
	if a.IsEthernetIPv4() {
		t.Fatal("8-byte hardware addresses taken for Ethernet")
	}
}

func TestARPTruncated(t *testing.T) {
	b := make([]byte, ARPSize)
	in := arpRequest()
	in.Encode(b)
	for n := range len(b) {
		if _, err := ParseARP(b[:n]); err != ErrShort {
			t.Fatalf("%d bytes: %v", n, err)
		}
		var f ARPFields
		if _, err := f.Decode(b[:n]); err == nil {
			t.Fatalf("Decode took %d bytes", n)
		}
	}
}

func TestARPAllocs(t *testing.T) {
	b := make([]byte, ARPSize)
	in := arpRequest()
	in.Encode(b)
	if n := testing.AllocsPerRun(100, func() {
		a, err := ParseARP(b)
		if err != nil || !a.IsEthernetIPv4() || a.TPA() != addrB {
			t.Fatal("parse")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

func FuzzARP(f *testing.F) {
	b := make([]byte, ARPSize)
	in := arpRequest()
	in.Encode(b)
	f.Add(b)
	f.Add(b[:ARPSize-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		var fl ARPFields
		n, err := fl.Decode(b)
		if (err == nil) != (len(b) >= ARPSize) {
			t.Fatalf("len %d: %v", len(b), err)
		}
		if err != nil {
			return
		}
		re := make([]byte, n)
		fl.Encode(re)
		if string(re) != string(b[:n]) {
			t.Fatalf("re-encoded % x, was % x", re, b[:n])
		}
	})
}

func TestWriteCorpusARP(t *testing.T) {
	fuzzcorpus.Updating(t)
	b := make([]byte, ARPSize)
	in := arpRequest()
	in.Encode(b)
	fuzzcorpus.Write(t, "FuzzARP", [][]byte{b, b[:ARPSize-1]})
}
