// Package hostrig is the two-host test rig the project's tests share: two
// emulated hosts, A (10.0.0.1) and B (10.0.0.2), each a full machine built
// by board (a tcpstack.Host with its own host memory and netstack, and its
// NIC, whose in-process device the rig keeps beside it), joined by an
// in-memory wire (port.NewWire) with optional seeded impairments, a
// wrapper on either port (a pcap recorder, a spy), and per-host
// configuration hooks. On top of it, Node is one host's RDMA verbs objects
// (provider, PD, CQ, receive and local buffers with their MRs) and Connect
// makes a connected QP pair.
//
// It is imported by tests only (it calls t.Fatal). It imports board,
// tcpstack and tcpstack/verbs, so the internal tests of those packages
// cannot use it (an import cycle); their tests that need unexported hooks
// build hosts themselves, everything else uses this rig.
package hostrig

import (
	"context"
	"net/netip"
	"runtime/pprof"
	"sync"
	"testing"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack"
)

// The rig's addresses. MACs are 02:00:00:00:00:01 and :02.
var (
	PrefixA = netip.MustParsePrefix("10.0.0.1/24")
	PrefixB = netip.MustParsePrefix("10.0.0.2/24")
	AddrA   = PrefixA.Addr()
	AddrB   = PrefixB.Addr()
	MACA    = [6]byte{2, 0, 0, 0, 0, 1}
	MACB    = [6]byte{2, 0, 0, 0, 0, 2}
)

// Config shapes a rig. The zero value is two default hosts on a clean wire.
type Config struct {
	// Wire is the in-memory wire's configuration (impairments, seed, MTU).
	Wire port.WireConfig
	// WrapA and WrapB, when set, put something between a host and its end
	// of the wire (a recorder, a spy); the host uses the port they return.
	WrapA, WrapB func(*port.WirePort) (port.Port, error)
	// HostA and HostB, when set, adjust a host's configuration before it is
	// built (engine timers, stack buffers, offload table size).
	HostA, HostB func(*board.HostConfig)
	// LabelB, when set, builds host B under the pprof label side=LabelB,
	// which every goroutine it starts inherits (its device relabels its
	// own as side=device): internal/cpusplit then tells B's host CPU
	// (LabelB "server") from A's.
	LabelB string
	// LabelA is LabelB for host A (side=LabelA; cpusplit's side=client
	// with "client"): A's host work, its interrupt handling and stack
	// included, apart from the runtime's unlabelled work.
	LabelA string
}

// Rig is two hosts on a wire. The hosts are closed when the test ends, or
// earlier by Close (a capture is complete only once its host is closed).
type Rig struct {
	A, B *tcpstack.Host
	// DevA and DevB are the hosts' NICs when they run in this process
	// (nil when split): the device side, for a test that reads it.
	DevA, DevB *nic.Device
	// PortA and PortB are the wire's two ends, under any wrapper.
	PortA, PortB *port.WirePort

	once sync.Once
}

// HostConfig is the rig's configuration for host A (a == true) or B.
func HostConfig(a bool) board.HostConfig {
	if a {
		return board.HostConfig{MAC: MACA, Addr: PrefixA}
	}
	return board.HostConfig{MAC: MACB, Addr: PrefixB}
}

// New builds a rig; a failure fails the test. The hosts close at cleanup.
func New(t testing.TB, cfg Config) *Rig {
	t.Helper()
	pa, pb, err := port.NewWire(cfg.Wire)
	if err != nil {
		t.Fatalf("hostrig: wire: %v", err)
	}
	r := &Rig{PortA: pa, PortB: pb}
	qa, err := wrap(pa, cfg.WrapA)
	if err != nil {
		pa.Close()
		pb.Close()
		t.Fatalf("hostrig: port A: %v", err)
	}
	qb, err := wrap(pb, cfg.WrapB)
	if err != nil {
		qa.Close()
		pb.Close()
		t.Fatalf("hostrig: port B: %v", err)
	}
	ca, cb := HostConfig(true), HostConfig(false)
	if cfg.HostA != nil {
		cfg.HostA(&ca)
	}
	if cfg.HostB != nil {
		cfg.HostB(&cb)
	}
	var a *board.Host
	if cfg.LabelA != "" {
		pprof.Do(context.Background(), pprof.Labels("side", cfg.LabelA), func(context.Context) {
			a, err = board.NewHost(ca, qa)
		})
	} else {
		a, err = board.NewHost(ca, qa)
	}
	if err != nil {
		qa.Close()
		qb.Close()
		t.Fatalf("hostrig: host A: %v", err)
	}
	var b *board.Host
	if cfg.LabelB != "" {
		pprof.Do(context.Background(), pprof.Labels("side", cfg.LabelB), func(context.Context) {
			b, err = board.NewHost(cb, qb)
		})
	} else {
		b, err = board.NewHost(cb, qb)
	}
	if err != nil {
		a.Close()
		qb.Close()
		t.Fatalf("hostrig: host B: %v", err)
	}
	r.A, r.DevA, r.B, r.DevB = a.Host, a.Device, b.Host, b.Device
	t.Cleanup(r.Close)
	return r
}

// Pair is New with the zero Config, returning the two hosts.
func Pair(t testing.TB) (a, b *tcpstack.Host) {
	t.Helper()
	r := New(t, Config{})
	return r.A, r.B
}

// Close closes both hosts (once; later calls do nothing).
func (r *Rig) Close() {
	r.once.Do(func() {
		r.A.Close()
		r.B.Close()
	})
}

func wrap(p *port.WirePort, w func(*port.WirePort) (port.Port, error)) (port.Port, error) {
	if w == nil {
		return p, nil
	}
	return w(p)
}

// DualStack makes the rig's hosts dual-stack: A gets the IPv6 address a6
// and B b6 besides their IPv4 ones (after whatever HostA and HostB already
// do).
func (c *Config) DualStack(a6, b6 netip.Prefix) {
	for _, h := range []struct {
		f *func(*board.HostConfig)
		p netip.Prefix
	}{{&c.HostA, a6}, {&c.HostB, b6}} {
		prev, p := *h.f, h.p
		*h.f = func(hc *board.HostConfig) {
			if prev != nil {
				prev(hc)
			}
			hc.Stack.Addrs = append(hc.Stack.Addrs, p)
		}
	}
}
