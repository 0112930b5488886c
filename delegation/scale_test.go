package delegation

import (
	"fmt"
	"testing"

	"github.com/emunic/emunic/rings"
)

// idleEngine returns an engine with n delegated connections, all idle (no
// data in flight, no keepalive): nothing for a pass to do.
func idleEngine(tb testing.TB, n int) *rig {
	o := defaultRigOpts()
	o.cfg = Config{MaxConns: n + 1}
	r := newRig(tb, o)
	r.env.transmit = func([]byte) error { return nil }
	for i := 1; i <= n; i++ {
		st := r.st
		st.RemotePort = uint16(1024 + i%60000)
		st.RemoteIP[2] = byte(100 + i/60000) // never the rig's own peer
		if s := r.e.Offload(uint32(i), &st); s != rings.StatusOK {
			tb.Fatalf("offload %d: %v", i, s)
		}
	}
	return r
}

// A pass over an engine of idle connections does no per-connection work:
// no timer is armed and nothing is pending, whatever their number.
func TestIdleConnectionsArmNothing(t *testing.T) {
	r := idleEngine(t, 10000)
	occ := r.e.Occupancy()
	if occ.Conns != 10001 || occ.Timers != 0 || occ.Pending != 0 || r.e.PendingNotifications() != 0 {
		t.Fatalf("occupancy %+v", occ)
	}
	if d := r.e.NextDeadline(); d != NoDeadline {
		t.Fatalf("a timer is armed at %d", d)
	}
	if a := testing.AllocsPerRun(100, func() { r.e.Tick(r.now); r.e.NextDeadline() }); a != 0 {
		t.Fatalf("%v allocations per pass", a)
	}
}

// BenchmarkIdlePass is the engine's share of one offload-unit pass
// (Tick, NextDeadline, PendingNotifications) with n idle connections: the
// same few nanoseconds for 10 as for 65,000.
//
//	go test ./delegation/ -run '^$' -bench IdlePass
func BenchmarkIdlePass(b *testing.B) {
	for _, n := range []int{10, 10000, 65000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := idleEngine(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r.e.Tick(r.now)
				_ = r.e.NextDeadline()
				_ = r.e.PendingNotifications()
			}
		})
	}
}
