package direct

import (
	"bytes"
	"errors"
	"testing"
)

func validHellos() [][]byte {
	var out [][]byte
	for _, h := range []Hello{
		{Caps: CapRead | CapWrite, Pref: TransferAuto, Port: 80, Slots: 33, Pool: 32, MaxInline: 8192, MaxTransfer: 256 << 10},
		{Reply: true, Caps: CapWrite, Pref: TransferWrite, Slots: 4, Pool: 2, MaxInline: 1, MaxTransfer: 1},
		{Caps: 0, Pref: TransferInline, Port: 65535, Slots: maxSlots, Pool: maxPool, MaxInline: maxInlineCap, MaxTransfer: maxTransfer},
	} {
		b := make([]byte, HelloSize)
		h.Encode(b)
		out = append(out, b)
	}
	return out
}

func TestHelloLayout(t *testing.T) {
	h := Hello{Caps: CapRead, Pref: TransferRead, Port: 0x0201, Slots: 0x0003, Pool: 0x00000104, MaxInline: 0x00010000,
		MaxTransfer: 0x04030201}
	b := make([]byte, HelloSize)
	h.Encode(b)
	want := []byte{'S', 'D', 'v', '2', helloRequest, CapRead, byte(TransferRead), 0, 0x01, 0x02, 0x03, 0x00,
		0x04, 0x01, 0, 0, 0, 0, 1, 0, 1, 2, 3, 4}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", b, want)
	}
	var back Hello
	if err := back.Decode(b); err != nil || back != h {
		t.Fatalf("%+v %v", back, err)
	}
}

func TestHelloRejects(t *testing.T) {
	good := validHellos()[0]
	mut := func(f func(b []byte)) []byte { b := append([]byte(nil), good...); f(b); return b }
	for name, b := range map[string][]byte{
		"short":       good[:HelloSize-1],
		"long":        append(append([]byte(nil), good...), 0),
		"magic":       mut(func(b []byte) { b[0] = 'X' }),
		"kind":        mut(func(b []byte) { b[helloOffKind] = 3 }),
		"caps":        mut(func(b []byte) { b[helloOffCaps] = 4 }),
		"pref":        mut(func(b []byte) { b[helloOffPref] = 4 }),
		"reserved":    mut(func(b []byte) { b[helloOffRsvd8] = 1 }),
		"no transfer": mut(func(b []byte) { copy(b[helloOffMaxXfer:], []byte{0, 0, 0, 0}) }),
		"huge xfer":   mut(func(b []byte) { b[helloOffMaxXfer+3] = 0x80 }),
		"port zero":   mut(func(b []byte) { b[helloOffPort], b[helloOffPort+1] = 0, 0 }),
		"reply port":  mut(func(b []byte) { b[helloOffKind] = helloReply }),
		"one slot":    mut(func(b []byte) { b[helloOffSlots] = 1 }),
		"pool 1":      mut(func(b []byte) { b[helloOffPool] = 1 }),
		"huge pool":   mut(func(b []byte) { b[helloOffPool+2] = 1 }),
		"inline zero": mut(func(b []byte) { b[helloOffMaxInline], b[helloOffMaxInline+1] = 0, 0 }),
	} {
		var h Hello
		if err := h.Decode(b); !errors.Is(err, ErrBadHello) {
			t.Errorf("%s: %v, want ErrBadHello", name, err)
		}
	}
}

// TestTransferMode: the mode both sides compute for one direction.
func TestTransferMode(t *testing.T) {
	for _, c := range []struct {
		pref Transfer
		caps uint8
		want Transfer
	}{
		{TransferAuto, CapRead | CapWrite, TransferRead},
		{TransferAuto, CapWrite, TransferWrite},
		{TransferAuto, 0, TransferInline},
		{TransferRead, CapWrite, TransferWrite},
		{TransferWrite, CapRead | CapWrite, TransferWrite},
		{TransferWrite, CapRead, TransferRead},
		{TransferInline, CapRead | CapWrite, TransferInline},
	} {
		if got := transferMode(c.pref, c.caps); got != c.want {
			t.Errorf("transferMode(%v, %#x) = %v, want %v", c.pref, c.caps, got, c.want)
		}
	}
}

func FuzzHello(f *testing.F) {
	for _, b := range validHellos() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Hello
		if err := h.Decode(data); err != nil {
			if !errors.Is(err, ErrBadHello) {
				t.Fatal(err)
			}
			return
		}
		b := make([]byte, HelloSize)
		h.Encode(b)
		if !bytes.Equal(b, data) {
			t.Fatalf("re-encoded % x from % x", b, data)
		}
		for n := 0; n < len(data); n++ {
			var w Hello
			if w.Decode(data[:n]) == nil {
				t.Fatalf("a %d-byte prefix decoded", n)
			}
		}
	})
}
