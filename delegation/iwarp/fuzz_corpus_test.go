package iwarp

import (
	"bytes"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

// Seeds, shared checks and the checked-in corpora of the wire-format
// fuzzers (FuzzMPAFrame, FuzzFPDU, FuzzDDP, FuzzTerminate, FuzzReadRequest,
// FuzzAtomicRequest, FuzzAtomicResponse, FuzzReceive). The corpora in
// testdata/fuzz are written from the encoders by
//
//	go test -run TestWriteFuzzCorpus -update-corpus ./delegation/iwarp/

// rejectsPrefixes fails t if decode accepts any truncated prefix of the
// n-byte encoding at the start of b.
func rejectsPrefixes(t *testing.T, b []byte, n int, decode func([]byte) (int, error)) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := decode(b[:i]); err == nil {
			t.Fatalf("Decode accepted a %d-byte prefix of a %d-byte encoding", i, n)
		}
	}
}

func encoded(n int, enc func([]byte) int) []byte {
	b := make([]byte, n)
	enc(b)
	return b
}

func mpaSeeds() [][]byte {
	var out [][]byte
	for _, m := range []MPAFrameFields{
		{CRC: true, Rev: 1},
		{Reply: true, CRC: true, Rev: 1, PrivateData: []byte("ird=4 ord=4")},
		{Reply: true, Reject: true, Rev: 1, PrivateData: []byte("x")},
		{Markers: true, Res: 0x1F, Rev: 2, PrivateData: bytes.Repeat([]byte{0xAB}, MPAMaxPrivateData)},
	} {
		out = append(out, encoded(m.Len(), m.Encode))
	}
	return out
}

func fpduSeeds() [][]byte {
	var out [][]byte
	for _, u := range [][]byte{nil, []byte("a"), []byte("abcdefgh"), bytes.Repeat([]byte{7}, 1454)} {
		p := FPDUFields{ULPDU: u}
		out = append(out, encoded(p.Len(), p.Encode))
	}
	return out
}

func ddpSeeds() [][]byte {
	var out [][]byte
	for _, d := range ddpSamples {
		out = append(out, encoded(d.Len(), d.Encode))
	}
	return out
}

func terminateSeeds() [][]byte {
	var out [][]byte
	for _, tm := range terminateSamples() {
		out = append(out, encoded(tm.Len(), tm.Encode))
	}
	return out
}

func readRequestSeeds() [][]byte {
	return [][]byte{
		encoded(ReadRequestLen, (&ReadRequest{SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5}).Encode),
		encoded(ReadRequestLen, (&ReadRequest{SinkSTag: 0xFFFFFFFF, SinkTO: 1 << 63, Size: 1 << 31, SrcSTag: 0x1234, SrcTO: 0x1000}).Encode),
	}
}

var atomicRequestSamples = []AtomicRequest{
	{Op: AtomicFetchAdd, Data: 1},
	{Op: AtomicCmpSwap, ReqID: 9, STag: 0x1234, TO: 0x1000, Data: 1, Mask: 2, Compare: 3, CompareMask: 4},
	{Op: 0xF, Reserved: 0x0FFFFFFF, ReqID: 0xFFFFFFFF, STag: 1, TO: 1 << 63, Data: ^uint64(0), Mask: ^uint64(0)},
}

func atomicRequestSeeds() [][]byte {
	var out [][]byte
	for _, a := range atomicRequestSamples {
		out = append(out, encoded(AtomicRequestLen, a.Encode))
	}
	return out
}

func atomicResponseSeeds() [][]byte {
	var out [][]byte
	for _, a := range []AtomicResponse{{}, {ReqID: 9, Value: 0xFFFF}, {ReqID: 0xFFFFFFFF, Value: ^uint64(0)}} {
		out = append(out, encoded(AtomicResponseLen, a.Encode))
	}
	return out
}

func FuzzAtomicRequest(f *testing.F) {
	for _, s := range atomicRequestSeeds() {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var a AtomicRequest
		n, err := a.Decode(b)
		if err != nil {
			if len(b) >= AtomicRequestLen {
				t.Fatalf("Decode of %d bytes: %v", len(b), err)
			}
			return
		}
		rejectsPrefixes(t, b, n, func(p []byte) (int, error) { var x AtomicRequest; return x.Decode(p) })
		out := make([]byte, AtomicRequestLen)
		if a.Encode(out) != n || !bytes.Equal(out, b[:n]) {
			t.Fatalf("re-encode differs: % x vs % x", out, b[:n])
		}
		var back AtomicRequest
		if _, err := back.Decode(out); err != nil || back != a {
			t.Fatalf("Decode(Encode(%+v)) = %+v, %v", a, back, err)
		}
	})
}

func FuzzAtomicResponse(f *testing.F) {
	for _, s := range atomicResponseSeeds() {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var a AtomicResponse
		n, err := a.Decode(b)
		if err != nil {
			if len(b) >= AtomicResponseLen {
				t.Fatalf("Decode of %d bytes: %v", len(b), err)
			}
			return
		}
		rejectsPrefixes(t, b, n, func(p []byte) (int, error) { var x AtomicResponse; return x.Decode(p) })
		out := make([]byte, AtomicResponseLen)
		if a.Encode(out) != n || !bytes.Equal(out, b[:n]) {
			t.Fatalf("re-encode differs: % x vs % x", out, b[:n])
		}
		var back AtomicResponse
		if _, err := back.Decode(out); err != nil || back != a {
			t.Fatalf("Decode(Encode(%+v)) = %+v, %v", a, back, err)
		}
	})
}

// truncated appends a one-byte-short copy of the first seed.
func truncated(seeds [][]byte) [][]byte {
	return append(seeds, seeds[0][:len(seeds[0])-1])
}

// TestWriteFuzzCorpus writes the seed corpus of every fuzz target in the
// package from the encoders (with -update-corpus).
func TestWriteFuzzCorpus(t *testing.T) {
	fuzzcorpus.Updating(t)
	fuzzcorpus.Write(t, "FuzzMPAFrame", truncated(mpaSeeds()))
	fuzzcorpus.Write(t, "FuzzFPDU", truncated(fpduSeeds()))
	fuzzcorpus.Write(t, "FuzzDDP", truncated(ddpSeeds()))
	fuzzcorpus.Write(t, "FuzzTerminate", truncated(terminateSeeds()))
	fuzzcorpus.Write(t, "FuzzReadRequest", truncated(append(readRequestSeeds(), atomicRequestSeeds()...)))
	fuzzcorpus.Write(t, "FuzzAtomicRequest", truncated(atomicRequestSeeds()))
	fuzzcorpus.Write(t, "FuzzAtomicResponse", truncated(atomicResponseSeeds()))
	ft := newFuzzTarget(t)
	fuzzcorpus.Write(t, "FuzzReceive", [][]byte{ft.validULPDUs()}, "uint64(1)")
}

// TestSeedsRoundTrip: every seed decodes, re-encodes to itself and has no
// accepted truncated prefix.
func TestSeedsRoundTrip(t *testing.T) {
	type codec struct {
		seeds  [][]byte
		decode func([]byte) (int, error)
	}
	for name, c := range map[string]codec{
		"mpa":  {mpaSeeds(), func(b []byte) (int, error) { var x MPAFrameFields; return x.Decode(b) }},
		"fpdu": {fpduSeeds(), func(b []byte) (int, error) { var x FPDUFields; return x.Decode(b) }},
		"ddp":  {ddpSeeds(), func(b []byte) (int, error) { var x DDP; return x.Decode(b) }},
		"term": {terminateSeeds(), func(b []byte) (int, error) { var x Terminate; return x.Decode(b) }},
		"rr":   {readRequestSeeds(), func(b []byte) (int, error) { var x ReadRequest; return x.Decode(b) }},
		"areq": {atomicRequestSeeds(), func(b []byte) (int, error) { var x AtomicRequest; return x.Decode(b) }},
		"arsp": {atomicResponseSeeds(), func(b []byte) (int, error) { var x AtomicResponse; return x.Decode(b) }},
	} {
		for i, s := range c.seeds {
			n, err := c.decode(s)
			if err != nil || n != len(s) {
				t.Fatalf("%s seed %d: Decode = %d, %v; want %d", name, i, n, err, len(s))
			}
			rejectsPrefixes(t, s, n, c.decode)
		}
	}
}
