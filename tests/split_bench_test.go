package tests

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/rings"
	"golang.org/x/sys/unix"
)

// BenchmarkSplit compares hosts whose NICs run in their own processes
// (memfd host memory, eventfd doorbell and vectors) with the same hosts'
// NICs in process, in the same run: a NOP command's round trip through
// the command ring, and netstack and delegated TCP throughput. The CPU
// split of the other benchmarks cannot see into a device process, so only
// throughput and latency are compared. Run with:
//
//	go test ./tests/ -run '^$' -bench Split -benchtime 2000x -count 5
func BenchmarkSplit(b *testing.B) {
	for _, mode := range []string{"inproc", "split", "split-link", "split-shm"} {
		hosts := func(b *testing.B) *hostrig.Rig {
			cfg := hostrig.Config{}
			switch mode {
			case "split":
				s := func(c *board.HostConfig) { c.Split = &board.SplitConfig{} }
				cfg.HostA, cfg.HostB = s, s
			case "split-link":
				return splitLinked(b)
			case "split-shm":
				return splitShm(b)
			}
			return hostrig.New(b, cfg)
		}
		b.Run(mode+"/command-rtt", func(b *testing.B) {
			r := hosts(b)
			nop := rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn}
			if _, err := r.A.Driver.Command(nop, 5*time.Second); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := r.A.Driver.Command(nop, 5*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode+"/netstack", func(b *testing.B) {
			r := hosts(b)
			l, err := r.B.Listen(5401)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			sink(l)
			c, err := r.A.Dial(context.Background(), netip.AddrPortFrom(hostrig.AddrB, 5401))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			measureStream(b, c)
		})
		b.Run(mode+"/delegated", func(b *testing.B) {
			r := hosts(b)
			l, err := r.B.ListenOffload(5402)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			sink(l)
			c, err := r.A.DialOffload(context.Background(), netip.AddrPortFrom(hostrig.AddrB, 5402))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			measureStream(b, c)
		})
	}
}

// splitLinked is two split hosts whose devices are joined directly by a
// packet socket pair (SplitConfig.Link): frames go from device process to
// device process without crossing the host's (no wire in between).
func splitLinked(b testing.TB) *hostrig.Rig {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	la, lb := os.NewFile(uintptr(fds[0]), "link-a"), os.NewFile(uintptr(fds[1]), "link-b")
	a, err := board.NewHost(board.HostConfig{MAC: hostrig.MACA, Addr: hostrig.PrefixA, Split: &board.SplitConfig{Link: la}}, nil)
	if err != nil {
		lb.Close()
		b.Fatal(err)
	}
	bh, err := board.NewHost(board.HostConfig{MAC: hostrig.MACB, Addr: hostrig.PrefixB, Split: &board.SplitConfig{Link: lb}}, nil)
	if err != nil {
		a.Close()
		b.Fatal(err)
	}
	r := &hostrig.Rig{A: a.Host, B: bh.Host}
	b.Cleanup(func() { a.Close(); bh.Close() })
	return r
}

// splitShm is two split hosts whose devices are cabled by a shared-memory
// link (SplitConfig.ShmLink): no system call per frame while frames flow.
func splitShm(b testing.TB) *hostrig.Rig {
	ea, eb, err := board.NewShmLink(1500)
	if err != nil {
		b.Fatal(err)
	}
	a, err := board.NewHost(board.HostConfig{MAC: hostrig.MACA, Addr: hostrig.PrefixA, Split: &board.SplitConfig{ShmLink: ea}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	bh, err := board.NewHost(board.HostConfig{MAC: hostrig.MACB, Addr: hostrig.PrefixB, Split: &board.SplitConfig{ShmLink: eb}}, nil)
	if err != nil {
		a.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(); bh.Close() })
	return &hostrig.Rig{A: a.Host, B: bh.Host}
}
