package lwio

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/google/uuid"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

func sampleHeader(polling, vectored bool) Header {
	h := Header{Length: 65536, Opcode: OpRead, Flags: FlagInterrupt, Credits: 7, Marker: IOMarker, Fid: 3, Sequence: 9,
		Tid: 11, Offset: 1 << 33, DataVa: 0x1000_0000, DataMh: 0x123456, ImmCookie: 0xABCD, Cookie: 0x1122334455667788}
	if vectored {
		h.Opcode, h.DataMh, h.NumPages, h.PageSize = OpVecRead, 0, 16, 4096
	}
	if polling {
		h.Flags, h.ImmCookie, h.Cookie, h.IosMh, h.IosVa = 0, 0, 0, 0x654321, 0x1000_8000
	}
	return h
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, c := range []struct{ polling, vectored bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		h := sampleHeader(c.polling, c.vectored)
		b := make([]byte, HeaderSize)
		h.Encode(b)
		var got Header
		if err := got.Decode(b); err != nil || got != h {
			t.Fatalf("%+v: decoded %+v, %v", c, got, err)
		}
		for n := range HeaderSize {
			if err := got.Decode(b[:n]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix of %d bytes: %v", n, err)
			}
		}
		// Reserved bytes stay zero.
		if !bytes.Equal(b[HdrOffReserved1:HdrOffReserved1+4], make([]byte, 4)) || !bytes.Equal(b[HdrOffReserved2:HdrOffReserved2+4], make([]byte, 4)) {
			t.Fatalf("reserved bytes written: % x", b)
		}
	}
	b := make([]byte, HeaderSize)
	h := sampleHeader(false, false)
	h.Flags |= 0x01
	h.Encode(b)
	if _, err := ParseHeader(b); !errors.Is(err, ErrFlags) {
		t.Fatalf("undefined flag: %v", err)
	}
	if OpInterrupt.String() != "INTERRUPT" || Opcode(0x42).String() != "OP_0x42" {
		t.Fatal(OpInterrupt.String(), Opcode(0x42).String())
	}
}

func sampleNegotiate(req bool) Negotiate {
	return Negotiate{Request: req, Name: "client-α", Key: uuid.MustParse("00112233-4455-6677-8899-aabbccddeeff"), ResponseLen: 4096,
		Providers: []Provider{
			{Name: "emunic-iwarp", Instances: []Instance{{HostAddress: []byte{10, 0, 0, 1}, Discriminator: []byte{0x12, 0x34}}}},
			{Name: "other", Instances: []Instance{{HostAddress: []byte{1}, Discriminator: nil}, {HostAddress: nil, Discriminator: []byte{9, 9, 9}}}},
		}}
}

func TestNegotiateRoundTrip(t *testing.T) {
	for _, req := range []bool{true, false} {
		n := sampleNegotiate(req)
		if !req {
			n.ResponseLen = 0
		}
		m, err := n.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		got := Negotiate{Request: req}
		if err := got.Decode(m); err != nil || !reflect.DeepEqual(normalize(got), normalize(n)) {
			t.Fatalf("request %v: %+v, %v", req, got, err)
		}
		for i := range len(m) {
			if err := (&Negotiate{Request: req}).Decode(m[:i]); err == nil {
				t.Fatalf("prefix of %d bytes accepted", i)
			}
		}
		// The GUID is in the Windows layout on the wire.
		if !bytes.Equal(m[NegOffKey:NegOffKey+8], []byte{0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66}) {
			t.Fatalf("GUID bytes % x", m[NegOffKey:NegOffKey+16])
		}
	}
	long := sampleNegotiate(true)
	long.Name = "a name far too long for sixteen"
	if _, err := long.Append(nil); err == nil {
		t.Fatal("a host name without room for its NUL was encoded")
	}
}

// normalize makes nil and empty byte slices compare equal.
func normalize(n Negotiate) Negotiate {
	for i := range n.Providers {
		for j := range n.Providers[i].Instances {
			in := &n.Providers[i].Instances[j]
			if len(in.HostAddress) == 0 {
				in.HostAddress = nil
			}
			if len(in.Discriminator) == 0 {
				in.Discriminator = nil
			}
		}
	}
	return n
}

func sampleAuth(server bool) AuthParams {
	a := AuthParams{RevID: RevID, Endian: EndianPtr64, PageSize: 4096, MaxRdmaWindowSize: 64 << 10, MaxSendBufferSize: 1024,
		MaxRecvBufferSize: 16, HeaderSize: HeaderSize, Credits: 8, RdmaReadSupported: 1, Key: [16]byte{1, 2, 3, 4, 5}}
	if server {
		a.BaseSequence, a.MaxRecvBufferSize, a.HasSessionID, a.SessionID = 1, 8192, true, -42
	}
	return a
}

func TestAuthParams(t *testing.T) {
	for _, server := range []bool{false, true} {
		a := sampleAuth(server)
		b := a.Append(nil)
		if len(b) > MaxAuthSize {
			t.Fatalf("%d bytes, MaxAuthSize %d", len(b), MaxAuthSize)
		}
		var got AuthParams
		if err := got.Decode(append(b, 0xEE, 0xEE)); err != nil || got != a { // trailing buffer bytes ignored
			t.Fatalf("server %v: %+v, %v", server, got, err)
		}
		for i := range len(b) {
			if err := got.Decode(b[:i]); err == nil {
				t.Fatalf("prefix of %d bytes accepted", i)
			}
		}
		// Any changed byte outside the signature breaks it (or the
		// structure): a signature binds every field and option.
		for i := range len(b) {
			c := bytes.Clone(b)
			c[i] ^= 0x01
			if err := got.Decode(c); err == nil {
				t.Fatalf("byte %d flipped: accepted", i)
			}
		}
	}
	sa := sampleAuth(false)
	dup := sa.Append(nil)
	dup = append(dup[:len(dup)-1], OptKey, OptKeyLen)
	dup = append(dup, make([]byte, OptKeyLen+1)...)
	if err := new(AuthParams).Decode(dup); !errors.Is(err, ErrOption) && !errors.Is(err, ErrSignature) {
		t.Fatalf("a second KEY: %v", err)
	}
}

func TestSmallStructs(t *testing.T) {
	r := StatusResponse{Cookie: 77, IOSB: IOSB{Information: 4096, Status: StatusAccessDenied}}
	b := make([]byte, StatusResponseSize)
	r.Encode(b)
	var gr StatusResponse
	if err := gr.Decode(b); err != nil || gr != r {
		t.Fatal(gr, err)
	}
	if err := gr.Decode(b[:StatusResponseSize-1]); err == nil {
		t.Fatal("short response accepted")
	}
	f := FidParams{ResumeKey: ResumeKey{1, 2, 3}, SessionID: -5, FlagsAndAttributes: FileNoIntermediate}
	fb := make([]byte, FidParamsSize)
	f.Encode(fb)
	var gf FidParams
	if err := gf.Decode(fb); err != nil || gf != f {
		t.Fatal(gf, err)
	}
	for i := range FidParamsSize {
		if err := gf.Decode(fb[:i]); err == nil {
			t.Fatalf("FID_PARAMS prefix %d accepted", i)
		}
	}
	g := Region{DataVa: 1 << 40, DataMh: 9, Length: 512}
	gb := make([]byte, RegionSize)
	g.Encode(gb)
	var gg Region
	if err := gg.Decode(gb); err != nil || gg != g {
		t.Fatal(gg, err)
	}
	k := RequestResumeKey{Key: ResumeKey{7, 8, 9}, Server: `\\server\share`}
	kb, err := k.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	var gk RequestResumeKey
	if err := gk.Decode(kb); err != nil || gk != k {
		t.Fatal(gk, err)
	}
	for i := range len(kb) {
		if err := gk.Decode(kb[:i]); err == nil {
			t.Fatalf("resume key prefix %d accepted", i)
		}
	}
}

func FuzzNegotiate(f *testing.F) {
	for _, req := range []bool{true, false} {
		n := sampleNegotiate(req)
		m, _ := n.Append(nil)
		f.Add(m, req)
	}
	f.Fuzz(func(t *testing.T, m []byte, req bool) {
		n := Negotiate{Request: req}
		if n.Decode(m) != nil {
			return
		}
		re, err := n.Append(nil)
		if err != nil {
			return // a name that decoded longer than it may be encoded
		}
		var again Negotiate
		again.Request = req
		if err := again.Decode(re); err != nil || !reflect.DeepEqual(normalize(again), normalize(n)) {
			t.Fatalf("re-encoded negotiate does not decode to itself: %v", err)
		}
	})
}

func FuzzAuthParams(f *testing.F) {
	for _, server := range []bool{false, true} {
		a := sampleAuth(server)
		f.Add(a.Append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var a AuthParams
		if a.Decode(b) != nil {
			return
		}
		var again AuthParams
		if err := again.Decode(a.Append(nil)); err != nil || again != a {
			t.Fatalf("re-encoded parameters: %v", err)
		}
	})
}

func FuzzHeader(f *testing.F) {
	b := make([]byte, HeaderSize)
	h := sampleHeader(false, true)
	h.Encode(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Header
		if h.Decode(b) != nil {
			return
		}
		re := make([]byte, HeaderSize)
		h.Encode(re)
		var again Header
		if err := again.Decode(re); err != nil || again != h {
			t.Fatalf("re-encoded header: %v", err)
		}
	})
}

func TestWriteCorpusLWIO(t *testing.T) {
	fuzzcorpus.Updating(t)
	var seeds [][]byte
	for _, req := range []bool{true, false} {
		n := sampleNegotiate(req)
		m, _ := n.Append(nil)
		seeds = append(seeds, m)
	}
	fuzzcorpus.Write(t, "FuzzNegotiate", seeds[:1], "bool(true)")
	ac, as := sampleAuth(false), sampleAuth(true)
	fuzzcorpus.Write(t, "FuzzAuthParams", [][]byte{ac.Append(nil), as.Append(nil)})
	b := make([]byte, HeaderSize)
	h := sampleHeader(true, false)
	h.Encode(b)
	fuzzcorpus.Write(t, "FuzzHeader", [][]byte{b, b[:HeaderSize-1]})
}
