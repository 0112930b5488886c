package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// greeter accepts on l and, on each connection, sends name and a newline,
// then echoes: a client learns which host it reached.
func greeter(l net.Listener, name string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			if _, err := io.WriteString(c, name+"\n"); err != nil {
				return
			}
			io.Copy(c, c)
		}()
	}
}

// TestVLANIsolationInProcess: four hosts share one segment through a
// port.Hub, two on VLAN 10 and two on VLAN 20, with the same IPv4
// addresses on both VLANs. A connection from each VLAN's 10.0.0.1 to
// 10.0.0.2 reaches the host on its own VLAN (netstack on VLAN 10,
// delegated connections on VLAN 20), each echoes 2 MiB intact, every host
// counts the other VLAN's frames, and tags 0 and 4095 and double-tagged
// frames put on the segment are counted drops at every host. At MTU 9000
// the same holds with jumbo frames on the wire (seen at its far end).
func TestVLANIsolationInProcess(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		t.Run(fmt.Sprintf("mtu%d", mtu), func(t *testing.T) { vlanIsolation(t, mtu) })
	}
}

func vlanIsolation(t *testing.T, mtu int) {
	frameMax := mtu + hdr.EthernetVLANSize
	up, far := port.MustNewWire(port.WireConfig{MaxFrameSize: frameMax})
	_, members, err := port.NewHub(up, 4, frameMax, 1024)
	if err != nil {
		t.Fatal(err)
	}
	// The far end of the segment sees every frame: it records the longest.
	var longest atomic.Int64
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		buf := make([]byte, frameMax)
		for {
			n, err := far.ReadFrame(buf)
			if errors.Is(err, port.ErrClosed) {
				return
			}
			if int64(n) > longest.Load() {
				longest.Store(int64(n))
			}
		}
	}()
	t.Cleanup(func() { far.Close(); <-drained })

	type spec struct {
		name string
		vid  uint16
		addr string
		mac  byte
	}
	specs := []spec{{"A1", 10, "10.0.0.1/24", 1}, {"A2", 10, "10.0.0.2/24", 2}, {"B1", 20, "10.0.0.1/24", 3}, {"B2", 20, "10.0.0.2/24", 4}}
	hosts := map[string]*board.Host{}
	for i, s := range specs {
		h, err := board.NewHost(board.HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, s.mac}, Addr: netip.MustParsePrefix(s.addr), MTU: mtu,
			Device: nic.Config{VLAN: s.vid}}, members[i])
		if err != nil {
			for _, m := range members[i:] {
				m.Close()
			}
			t.Fatal(err)
		}
		hosts[s.name] = h
		t.Cleanup(func() { h.Close() })
	}
	la, err := hosts["A2"].Listen(7)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := hosts["B2"].ListenOffload(7)
	if err != nil {
		t.Fatal(err)
	}
	go greeter(la, "A2")
	go greeter(lb, "B2")
	t.Cleanup(func() { la.Close(); lb.Close() })

	dst := netip.MustParseAddrPort("10.0.0.2:7")
	for _, c := range []struct {
		from, want, mode string
	}{{"A1", "A2", "netstack"}, {"B1", "B2", "offload"}} {
		conn, err := dialMode(hosts[c.from].Host, c.mode, dst)
		if err != nil {
			t.Fatalf("%s: dial %v: %v", c.from, dst, err)
		}
		greet := make([]byte, 3)
		if _, err := io.ReadFull(conn, greet); err != nil || string(greet) != c.want+"\n" {
			t.Fatalf("%s reached %q (%v), want %s: the VLANs leak", c.from, greet, err, c.want)
		}
		echoExchange(t, conn, 2<<20)
		conn.Close()
	}
	// The counters are read from the area the device publishes when it
	// goes idle: wait for the publication that covers the echo.
	testutil.WaitFor(t, "B2's engine to count the 2 MiB echo placed on its delegated connection", func() bool {
		return engineOf(t, hosts["B2"].Host).RxBytes >= 2<<20
	})
	if mtu > 1500 && longest.Load() <= 1500+hdr.EthernetVLANSize {
		t.Errorf("longest frame on the segment %d bytes at MTU %d: no jumbo frames went out", longest.Load(), mtu)
	}

	// Bad tags, to A1's MAC: VLAN 0, VLAN 4095, and VLAN 10 double tagged.
	f := make([]byte, 64)
	(&hdr.EthernetFields{Dst: hdr.MAC{2, 0, 0, 0, 0, 1}, Src: hdr.MAC{2, 0, 0, 0, 0, 9}, Type: hdr.EtherTypeIPv4}).Encode(f)
	tag := func(f []byte, tci uint16) []byte {
		return hdr.InsertVLAN(make([]byte, len(f)+hdr.VLANTagSize), hdr.Ethernet(f), hdr.VLANTCI(tci))
	}
	before := map[string]uint64{}
	for name, h := range hosts {
		before[name] = statOf(t, h.Host, rings.StatRxDropBadVLAN)
	}
	// Each member's FIFO must have room for them: under load a slow
	// device can still be working through the other VLAN's echo, and a
	// full hub FIFO drops (counted at the hub port, as a repeater would).
	for i, m := range members {
		testutil.WaitFor(t, specs[i].name+"'s hub FIFO to drain", func() bool { return m.Pending() == 0 })
	}
	for _, bad := range [][]byte{tag(f, 0), tag(f, 4095), tag(tag(f, 10), 10)} {
		if err := far.WriteFrame(bad); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range specs {
		name, h := s.name, hosts[s.name]
		deadline := time.Now().Add(testutil.WaitTimeout)
		for statOf(t, h.Host, rings.StatRxDropBadVLAN) < before[name]+3 {
			if time.Now().After(deadline) {
				c := counters(t, h.Host)
				t.Fatalf("%s: rx_drop_bad_vlan %d, want %d; counter area gen %d parked %v; its hub port: %v; device: %v", name,
					c.Stats[rings.StatRxDropBadVLAN], before[name]+3, c.Gen, c.Parked, members[i].Stats(), stats(h.Host))
			}
			time.Sleep(time.Millisecond)
		}
		// Published after the bad frames, so after all the traffic.
		if statOf(t, h.Host, rings.StatRxDropVLAN) == 0 {
			t.Errorf("%s counted none of the other VLAN's frames", name)
		}
	}
}
