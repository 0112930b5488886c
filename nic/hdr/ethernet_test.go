package hdr

import (
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

func TestEthernetRoundTrip(t *testing.T) {
	in := EthernetFields{Dst: BroadcastMAC, Src: macA, Type: EtherTypeARP}
	b := make([]byte, EthernetMinFrame)
	if n := in.Encode(b); n != EthernetSize {
		t.Fatalf("Encode: %d bytes", n)
	}
	want := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x06}
	if string(b[:EthernetSize]) != string(want) {
		t.Fatalf("wire % x, want % x", b[:EthernetSize], want)
	}
	var out EthernetFields
	if n, err := out.Decode(b); err != nil || n != EthernetSize || out != in {
		t.Fatalf("Decode: %+v %d %v", out, n, err)
	}
	e := Ethernet(b)
	if !e.DstGroup() || len(e.Payload()) != EthernetMinFrame-EthernetSize {
		t.Fatal("accessors")
	}
	e.SetDst(macB)
	if e.DstGroup() || e.Dst() != macB {
		t.Fatal("unicast destination")
	}
}

func TestEthernetTruncated(t *testing.T) {
	b := make([]byte, EthernetSize)
	for n := range len(b) {
		if _, err := ParseEthernet(b[:n]); err != ErrShort {
			t.Fatalf("%d bytes: %v", n, err)
		}
		var f EthernetFields
		if _, err := f.Decode(b[:n]); err == nil {
			t.Fatalf("Decode took %d bytes", n)
		}
	}
	if _, err := ParseEthernet(b); err != nil {
		t.Fatal(err)
	}
}

func TestEthernetAllocs(t *testing.T) {
	b := make([]byte, EthernetMinFrame)
	(&EthernetFields{Dst: macB, Src: macA, Type: EtherTypeIPv4}).Encode(b)
	if n := testing.AllocsPerRun(100, func() {
		e, err := ParseEthernet(b)
		if err != nil || e.Type() != EtherTypeIPv4 || e.Dst() != macB {
			t.Fatal("parse")
		}
		if _, err := ParseEthernet(b[:3]); err == nil {
			t.Fatal("short")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

func FuzzEthernet(f *testing.F) {
	fr, _, _ := tcpFrame(nil, nil, 0, TCPFlagACK)
	f.Add(fr)
	f.Add(fr[:EthernetSize-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		var fl EthernetFields
		n, err := fl.Decode(b)
		if (err == nil) != (len(b) >= EthernetSize) {
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

func TestWriteCorpusEthernet(t *testing.T) {
	fuzzcorpus.Updating(t)
	fr, _, _ := tcpFrame(nil, nil, 0, TCPFlagACK)
	fuzzcorpus.Write(t, "FuzzEthernet", [][]byte{fr, fr[:EthernetSize], fr[:EthernetSize-1]})
}
