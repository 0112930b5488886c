package main

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkIPv6Paths is each offloaded path over IPv6 against the same
// path over IPv4, in process, on one pair of dual-stack demo hosts in the
// same run: the demo's own path (its data, checks and timing) run once to
// B's IPv4 address and once to its IPv6 one per iteration, the order
// alternating, reported as Gbit/s of each family and their ratio v6/v4
// (the bar: >= 0.95). Run with:
//
//	go test ./cmd/emunic -run '^$' -bench IPv6Paths -benchtime 4x -count 3
func BenchmarkIPv6Paths(b *testing.B) {
	for _, p := range []struct {
		name string
		run  func(ctx context.Context, lab *demoLab, cfg demoConfig) (transferResult, error)
	}{
		{"delegated", offloadTransfer},
		{"iwarp", rdmaTransfer},
		{"lwio", lwioTransfer},
		{"direct", directTransfer},
	} {
		b.Run(p.name, func(b *testing.B) {
			cfg := defaultDemoConfig()
			cfg.IPv6, cfg.Bytes = true, 32<<20
			lab, err := newDemoLab(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer lab.Close()
			v4, v6 := demoAddrB.Addr(), demoAddr6B.Addr()
			var el [2]time.Duration // IPv4, IPv6
			run := func(fam int) {
				lab.addrB = [2]netip.Addr{v4, v6}[fam]
				r, err := p.run(context.Background(), lab, cfg)
				if err != nil {
					b.Fatalf("%s to %v: %v", p.name, lab.addrB, err)
				}
				el[fam] += r.elapsed
			}
			i := 0
			for b.Loop() {
				run(i % 2)
				run(1 - i%2)
				i++
			}
			bits := float64(i) * float64(cfg.Bytes) * 8
			g4, g6 := bits/el[0].Seconds()/1e9, bits/el[1].Seconds()/1e9
			b.ReportMetric(g4, "v4_Gbit/s")
			b.ReportMetric(g6, "v6_Gbit/s")
			b.ReportMetric(g6/g4, "v6/v4")
		})
	}
}
