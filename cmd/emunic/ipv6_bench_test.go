package main

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// BenchmarkIPv6Paths is each offloaded path over IPv6 against the same
// path over IPv4, in process, in the same run: the demo's own path (its
// data, checks and timing) run once to B's IPv4 address and once to its
// IPv6 one per iteration, the order alternating, each on a fresh pair of
// dual-stack demo hosts. Reported: Gbit/s of each family over all
// iterations, and v6/v4, the median of the iterations' IPv6/IPv4 ratios
// (each pair run back to back, so the ratio of one iteration sees the
// same load on a shared machine; the bar: >= 0.95). Run with:
//
//	go test ./cmd/emunic -run '^$' -bench IPv6Paths -benchtime 10x -count 3
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
			// A fresh lab for each run: a path's listeners and servers
			// take fixed ports, which a host does not give out again
			// at once.
			run := func(fam int) time.Duration {
				lab, err := newDemoLab(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer lab.Close()
				lab.addrB = [2]netip.Addr{demoAddrB.Addr(), demoAddr6B.Addr()}[fam]
				r, err := p.run(context.Background(), lab, cfg)
				if err != nil {
					b.Fatalf("%s to %v: %v", p.name, lab.addrB, err)
				}
				return r.elapsed
			}
			var el [2]time.Duration // IPv4, IPv6
			var ratios []float64
			for i := 0; b.Loop(); i++ {
				var e [2]time.Duration
				e[i%2] = run(i % 2)
				e[1-i%2] = run(1 - i%2)
				el[0], el[1] = el[0]+e[0], el[1]+e[1]
				ratios = append(ratios, e[0].Seconds()/e[1].Seconds())
			}
			bits := float64(len(ratios)) * float64(cfg.Bytes) * 8
			b.ReportMetric(bits/el[0].Seconds()/1e9, "v4_Gbit/s")
			b.ReportMetric(bits/el[1].Seconds()/1e9, "v6_Gbit/s")
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "v6/v4")
		})
	}
}
