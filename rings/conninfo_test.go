package rings

import (
	"math/rand/v2"
	"testing"
)

var connInfoCodec = blockCodec[ConnInfo]{
	size:     ConnInfoSize,
	decode:   func(c *ConnInfo, b []byte) error { return c.Decode(b) },
	encode:   func(c *ConnInfo, b []byte) { c.Encode(b) },
	reserved: func(i int) bool { return (i >= 0x05 && i < 0x08) || (i >= 0x3C && i < 0x40) },
}

// goodConnInfo is a block a device would write: Check accepts it.
func goodConnInfo() ConnInfo {
	return ConnInfo{Version: ConnInfoVersion, State: StateEstablished, SndScale: 7, RcvScale: 7,
		SndUna: 1000, SndNxt: 30000, RcvNxt: 5000, SndWnd: 1 << 20, RcvWnd: 1 << 19, MSS: 1448,
		Cwnd: 60000, Ssthresh: 30000, SRTT: 250, RTTVar: 60, MinRTT: 180, RTO: 200000, OOOBytes: 2896,
		Retrans: 12, FastRecoveries: 2, RTOs: 1, TLPs: 3, SegsIn: 400, SegsOut: 900, BytesAcked: 1 << 20, BytesReceived: 4000}
}

func connInfoSeeds() [][]byte {
	r := rand.New(rand.NewPCG(0x5eed, ConnInfoSize))
	out := [][]byte{connInfoCodec.bytes(ConnInfo{}), connInfoCodec.bytes(goodConnInfo())}
	for range 4 {
		b := make([]byte, ConnInfoSize)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		out = append(out, b)
	}
	return out
}

// FuzzConnInfo: any bytes decode without a panic (a short block is an
// error), re-encode to themselves but for the reserved bytes, and Check
// never accepts a block that breaks its rules.
func FuzzConnInfo(f *testing.F) {
	connInfoCodec.seed(f, connInfoSeeds())
	f.Fuzz(func(t *testing.T, data []byte) {
		connInfoCodec.check(t, data)
		var c ConnInfo
		if c.Decode(data) != nil || c.Check() != nil {
			return
		}
		if c.Version != ConnInfoVersion || c.State > StateTimeWait || int32(c.SndNxt-c.SndUna) < 0 ||
			c.SndScale > 14 || c.RcvScale > 14 || c.MSS == 0 || (c.SRTT == 0 && c.RTTVar+c.MinRTT != 0) {
			t.Fatalf("Check accepted %+v", c)
		}
	})
}

// TestConnInfoBadInput: each rule of Check refuses a block that breaks it
// alone; a short block does not decode.
func TestConnInfoBadInput(t *testing.T) {
	for _, s := range connInfoSeeds() {
		connInfoCodec.check(t, s)
	}
	good := goodConnInfo()
	if err := good.Check(); err != nil {
		t.Fatalf("a good block: %v", err)
	}
	for name, bad := range map[string]func(*ConnInfo){
		"version 0":             func(c *ConnInfo) { c.Version = 0 },
		"version 2":             func(c *ConnInfo) { c.Version = 2 },
		"state 8":               func(c *ConnInfo) { c.State = StateTimeWait + 1 },
		"SND.NXT below SND.UNA": func(c *ConnInfo) { c.SndNxt = c.SndUna - 1 },
		"send scale 15":         func(c *ConnInfo) { c.SndScale = 15 },
		"receive scale 15":      func(c *ConnInfo) { c.RcvScale = 15 },
		"MSS 0":                 func(c *ConnInfo) { c.MSS = 0 },
		"RTTVar without SRTT":   func(c *ConnInfo) { c.SRTT = 0; c.MinRTT = 0 },
		"MinRTT without SRTT":   func(c *ConnInfo) { c.SRTT = 0; c.RTTVar = 0 },
	} {
		c := good
		bad(&c)
		b := connInfoCodec.bytes(c)
		var d ConnInfo
		if err := d.Decode(b); err != nil {
			t.Fatalf("%s: Decode: %v", name, err)
		}
		if err := d.Check(); err == nil {
			t.Errorf("%s: Check accepted it", name)
		}
	}
	// SND.NXT across the wrap of sequence space is fine.
	c := good
	c.SndUna, c.SndNxt = 0xFFFFFF00, 0x100
	if err := c.Check(); err != nil {
		t.Errorf("SND.NXT past the wrap: %v", err)
	}
	var d ConnInfo
	if err := d.Decode(connInfoCodec.bytes(good)[:ConnInfoSize-1]); err == nil {
		t.Error("a 127-byte block decoded")
	}
}
