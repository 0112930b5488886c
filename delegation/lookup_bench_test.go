package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

// BenchmarkLookup: the receive path's connection lookup, a hit and a miss
// (another port) per op, with 1000 connections installed so the table is
// not trivially small.
func BenchmarkLookup(b *testing.B) {
	o := defaultRigOpts()
	o.cfg.MaxConns = 1024
	r := quietRig(b, o)
	for i := uint32(1); i < 1000 && int(i) < r.e.cfg.MaxConns; i++ {
		st := r.st
		st.LocalPort = portA + uint16(i)
		if s := r.e.Offload(i, &st); s != 0 {
			b.Fatal(s)
		}
	}
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK})
	miss := append([]byte(nil), tcp...)
	be.PutUint16(miss[2:], portA+2000)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.e.LookupSegment(ip, tcp); !ok {
			b.Fatal("miss")
		}
		if _, ok := r.e.LookupSegment(ip, miss); ok {
			b.Fatal("hit")
		}
	}
}
