package trace

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// sampleRecords has one record of every kind, with every field its kind
// carries set.
func sampleRecords() []Record {
	return []Record{
		{Kind: KindDevice, Dev: 0, Data: []byte(`{"name":"A"}`)},
		{Kind: KindRing, Dev: 0, Ring: 3, Flags: 1, Addr: 0x10001000, Val: 64, Len: 32},
		{Kind: KindStep, Dev: 0, N: 7, Now: 123456789, Flags: StepDoorbell | StepParked},
		{Kind: KindLoad, Dev: 0, Ring: 2, Off: 0x40, Val: 9, Data: bytes.Repeat([]byte{0xab}, 64)},
		{Kind: KindRead, Dev: 1, Addr: 0x10002000, Data: []byte("payload")},
		{Kind: KindFrameIn, Dev: 1, Data: bytes.Repeat([]byte{1}, 60)},
		{Kind: KindFrameIn, Dev: 1, Flags: FrameTooBig, Data: []byte{}},
		{Kind: KindStore, Dev: 0, Ring: 1, Off: 0, Val: 12, Data: bytes.Repeat([]byte{2}, 32)},
		{Kind: KindComplete, Dev: 0, Ring: 0, Val: 5, Data: bytes.Repeat([]byte{3}, 64)},
		{Kind: KindWrite, Dev: 0, Addr: 0x10003000, Len: 4, Data: []byte{1, 2, 3, 4}},
		{Kind: KindWrite, Dev: 0, Addr: 0x10003000, Len: 4096, Flags: WriteHashed, Data: bytes.Repeat([]byte{9}, 32)},
		{Kind: KindFrameOut, Dev: 1, Data: bytes.Repeat([]byte{4}, 1514)},
		{Kind: KindIrq, Dev: 1, Vec: VecCommand},
		{Kind: KindBell, Dev: 0, Val: 9},
		{Kind: KindBell, Dev: 1, Flags: BellCQ, Val: 3, Len: 0x5},
	}
}

func encodeSample(t testing.TB) []byte {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{Args: []string{"--path", "offload"}, Clock: "monotonic"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range sampleRecords() {
		if err := w.Write(&r); err != nil {
			t.Fatalf("write %v: %v", r.Kind, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	b := encodeSample(t)
	h, recs, err := ReadAll(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != Version || h.Clock != "monotonic" || len(h.Args) != 2 {
		t.Errorf("header %+v", h)
	}
	want := sampleRecords()
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i := range want {
		if len(want[i].Data) == 0 {
			want[i].Data = []byte{}
		}
		if len(recs[i].Data) == 0 {
			recs[i].Data = []byte{}
		}
		if !reflect.DeepEqual(recs[i], want[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, recs[i], want[i])
		}
	}
}

// TestTruncated cuts a trace at every length: each cut is an error, and
// one that names the truncation (or, inside the magic, a file that is not
// a trace), never a short read taken for a whole trace.
func TestTruncated(t *testing.T) {
	b := encodeSample(t)
	for n := 0; n < len(b); n++ {
		_, _, err := ReadAll(bytes.NewReader(b[:n]))
		if err == nil {
			t.Fatalf("a trace cut to %d of %d bytes read without error", n, len(b))
		}
		if !errors.Is(err, ErrTruncated) && !(n < len(Magic) && errors.Is(err, ErrNotTrace)) {
			t.Fatalf("cut to %d bytes: %v, want a truncation", n, err)
		}
	}
}

// TestCorrupt flips every bit of a trace in turn: each flip is found.
func TestCorrupt(t *testing.T) {
	b := encodeSample(t)
	for i := range b {
		for bit := 0; bit < 8; bit++ {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			_, _, err := ReadAll(bytes.NewReader(c))
			if err == nil {
				t.Fatalf("byte %d bit %d flipped: read without error", i, bit)
			}
		}
	}
}

func TestNotATrace(t *testing.T) {
	for _, in := range []string{"", "GIF89a", "EMUTRACX rest of a file that is long enough"} {
		if _, err := NewReader(bytes.NewReader([]byte(in))); !errors.Is(err, ErrNotTrace) && !errors.Is(err, ErrTruncated) {
			t.Errorf("%q: %v", in, err)
		}
	}
	b := encodeSample(t)
	b[offVersion] = 2
	if _, err := NewReader(bytes.NewReader(b)); !errors.Is(err, ErrVersion) {
		t.Errorf("version 2: %v", err)
	}
}

func TestWriterLimits(t *testing.T) {
	w, err := NewWriter(io.Discard, Header{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&Record{Kind: KindRead, Data: make([]byte, MaxPayload)}); err == nil {
		t.Error("a record over the limit was written")
	}
	if w.Err() == nil {
		t.Error("the writer forgot its error")
	}
	if err := w.Write(&Record{Kind: 99}); err == nil {
		t.Error("after an error, a write succeeded")
	}
}

// FuzzReader feeds arbitrary bytes to the reader, seeded from the encoder:
// no panic, and anything it accepts re-encodes to the same records.
func FuzzReader(f *testing.F) {
	f.Add(encodeSample(f))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, recs, err := ReadAll(bytes.NewReader(b))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, h)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			if err := w.Write(&recs[i]); err != nil {
				t.Fatalf("record %d (%v) read but not written: %v", i, recs[i].Kind, err)
			}
		}
		w.Close()
		_, again, err := ReadAll(&buf)
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-encoded trace: %d records, %v", len(again), err)
		}
	})
}
