package lwio

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

func sampleOpen() OpenRequest {
	return OpenRequest{Disposition: DispCreate, FlagsAttrs: FileNoIntermediate, Path: "dir/ファイル.bin"}
}

func sampleOpenResp() OpenResponse {
	return OpenResponse{Size: 1 << 40, Key: RequestResumeKey{Key: ResumeKey{ResumeKey: 0x1122334455667788, Timestamp: 99, Pid: 4242}, Server: "EMUNIC"}}
}

// TestPipeMessages round-trips every pipe message, checks its bytes
// against the documented offsets, and refuses every truncated prefix.
func TestPipeMessages(t *testing.T) {
	o := sampleOpen()
	m, err := o.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if int(le.Uint16(m[CtlOffLength:])) != len(m) || le.Uint16(m[CtlOffOpcode:]) != ControlOpOpen ||
		le.Uint16(m[OpenOffDisposition:]) != DispCreate || le.Uint32(m[OpenOffFlagsAttrs:]) != FileNoIntermediate ||
		!bytes.Equal(m[OpenOffPath:], utf16le(o.Path)) || int(le.Uint16(m[OpenOffPathLen:])) != len(m)-OpenReqMinLen {
		t.Fatalf("OPEN bytes % x", m)
	}
	var got OpenRequest
	if err := got.Decode(m); err != nil || got != o {
		t.Fatalf("OPEN round trip: %+v, %v", got, err)
	}
	for i := range len(m) {
		if got.Decode(m[:i]) == nil {
			t.Fatalf("OPEN prefix %d accepted", i)
		}
	}
	r := sampleOpenResp()
	rm, err := r.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if le.Uint64(rm[OpenRspOffSize:]) != r.Size || le.Uint64(rm[OpenRspOffKey:]) != r.Key.Key.ResumeKey {
		t.Fatalf("OPEN response bytes % x", rm)
	}
	var gr OpenResponse
	if err := gr.Decode(rm); err != nil || !reflect.DeepEqual(gr, r) {
		t.Fatalf("OPEN response round trip: %+v, %v", gr, err)
	}
	for i := range len(rm) {
		if gr.Decode(rm[:i]) == nil {
			t.Fatalf("OPEN response prefix %d accepted", i)
		}
	}
	// A failure carries no key, and a key after one is refused.
	fail := OpenResponse{Status: StatusAccessDenied}
	fm, _ := fail.Append(nil)
	if len(fm) != OpenRspMinLen {
		t.Fatalf("failed OPEN response is %d bytes", len(fm))
	}
	if err := gr.Decode(fm); err != nil || gr.Status != StatusAccessDenied {
		t.Fatalf("failed OPEN response: %v", err)
	}
	rel := appendRelease(nil, 77)
	if len(rel) != ReleaseLen || le.Uint64(rel[RelOffResumeKey:]) != 77 || checkControl(rel, ControlOpRelease, ReleaseLen) != nil {
		t.Fatalf("RELEASE bytes % x", rel)
	}
	// What the encoder refuses.
	for _, bad := range []OpenRequest{{Path: ""}, {Path: strings.Repeat("x", MaxPathLen)}} {
		if _, err := bad.Append(nil); err == nil {
			t.Errorf("OPEN with a path of %d bytes encoded", len(bad.Path))
		}
	}
	// What the decoder refuses: a bad disposition, odd path length, a
	// reserved field set, a wrong opcode.
	for i, edit := range []func([]byte){
		func(b []byte) { le.PutUint16(b[OpenOffDisposition:], 3) },
		func(b []byte) { le.PutUint16(b[OpenOffPathLen:], le.Uint16(b[OpenOffPathLen:])-1) },
		func(b []byte) { le.PutUint16(b[OpenOffReserved:], 1) },
		func(b []byte) { le.PutUint16(b[CtlOffOpcode:], ControlOpRelease) },
		func(b []byte) { b[CtlOffProtocolID] = 'X' },
	} {
		b := append([]byte(nil), m...)
		edit(b)
		if got.Decode(b) == nil {
			t.Errorf("edit %d accepted", i)
		}
	}
}

// TestReadControl reads messages back to back from a stream and refuses
// broken framing.
func TestReadControl(t *testing.T) {
	o := sampleOpen()
	a, _ := o.Append(nil)
	b := appendRelease(nil, 5)
	var buf []byte
	stream := bytes.NewReader(append(append([]byte(nil), a...), b...))
	m, op, err := readControl(stream, buf)
	if err != nil || op != ControlOpOpen || !bytes.Equal(m, a) {
		t.Fatalf("first message: %v", err)
	}
	m, op, err = readControl(stream, m[:0])
	if err != nil || op != ControlOpRelease || !bytes.Equal(m, b) {
		t.Fatalf("second message: %v", err)
	}
	short := append([]byte(nil), a...)
	le.PutUint16(short[CtlOffLength:], 4)
	if _, _, err := readControl(bytes.NewReader(short), nil); err == nil {
		t.Fatal("a length below the header accepted")
	}
	if _, _, err := readControl(bytes.NewReader(a[:len(a)-1]), nil); err == nil {
		t.Fatal("a message cut short accepted")
	}
}

func FuzzOpen(f *testing.F) {
	o := sampleOpen()
	m, _ := o.Append(nil)
	f.Add(m, false)
	r := sampleOpenResp()
	rm, _ := r.Append(nil)
	f.Add(rm, true)
	f.Fuzz(func(t *testing.T, m []byte, resp bool) {
		if resp {
			var r OpenResponse
			if r.Decode(m) != nil {
				return
			}
			re, err := r.Append(nil)
			if err != nil {
				return
			}
			var again OpenResponse
			if err := again.Decode(re); err != nil || !reflect.DeepEqual(again, r) {
				t.Fatalf("re-encoded OPEN response: %v", err)
			}
			return
		}
		var o OpenRequest
		if o.Decode(m) != nil {
			return
		}
		re, err := o.Append(nil)
		if err != nil {
			return // a path that decoded to more UTF-16 than it may encode
		}
		var again OpenRequest
		if err := again.Decode(re); err != nil || again != o {
			t.Fatalf("re-encoded OPEN: %v", err)
		}
	})
}

func TestWriteCorpusPipe(t *testing.T) {
	fuzzcorpus.Updating(t)
	o := sampleOpen()
	m, _ := o.Append(nil)
	fuzzcorpus.Write(t, "FuzzOpen", [][]byte{m}, "bool(false)")
}
